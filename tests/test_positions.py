"""The lean position pass must agree with LibCST's PositionProvider on every node."""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.positions import spans_and_code, statement_spans

SAMPLES = {
    "decorated": '@decorator(\n    1,\n)\n# comment\nclass A(B, metaclass=M):\n    """doc."""\n\n    @property\n    def f(self) -> int:\n        return (1 +\n                2)\n',
    "crlf": "import torch\r\nx = torch.load(p)\r\nif x:\r\n    y = [a.to(d) for a in xs]\r\n",
    "compound": "try:\n    pass\nexcept (A, B) as e:\n    raise\nelse:\n    x = 1\nfinally:\n    y = 2\nwith a as b, c:\n    while x:\n        break\n",
    "strings": 's = """multi\nline""" + f"{x!r:>10}"\nt = lambda a, *b, **c: (a, b)\n',
}


@pytest.mark.parametrize("source", list(SAMPLES.values()), ids=list(SAMPLES))
def test_spans_match_position_provider(source: str) -> None:
    _compare(cst.parse_module(source))


def test_spans_match_on_own_source() -> None:
    for path in sorted((Path(__file__).parent.parent / "torchdev_lint").rglob("*.py"))[:20]:
        _compare(cst.parse_module(path.read_bytes()))


def _compare(module: cst.Module) -> None:
    nodes: list[cst.CSTNode] = []
    walk(module, nodes.append, lambda node: None)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    spans = spans_and_code(module, nodes)[0]
    for node in nodes:
        span = expected[node]
        assert spans[id(node)] == ((span.start.line, span.start.column), (span.end.line, span.end.column))


PARTIAL_SAMPLES = {
    **SAMPLES,
    "header": "#!/usr/bin/env python\n# comment\n\nimport torch\n\n\n# lead\n\n@a\n\n# between\n@b(\n  1)\n\ndef f():\n    pass\n    # footer\n\nx = 1; y = 2\n",
    "continuation": "x = \\\n    1\nif a and \\\n   b:\n    pass\n@ \\\n  dec\ndef g(): pass\n",
    "no final newline": "import torch\nx = torch.load(p)",
    "nested with tabs": "class A:\n\tclass B:\n\t\tdef f(self):\n\t\t\treturn 'é' + x  # c\n\n\t@property\n\tdef g(self): return 1\n",
}


@pytest.mark.parametrize("source", list(PARTIAL_SAMPLES.values()), ids=list(PARTIAL_SAMPLES))
def test_statement_spans_equal_the_whole_pass(source: str) -> None:
    """Generating only the statements that hold the nodes, placed by `ast`, gives the same spans
    (or declines: None)."""
    _compare_partial(source)


def test_statement_spans_equal_the_whole_pass_on_real_files() -> None:
    for path in sorted((Path(__file__).parent.parent / "torchdev_lint").rglob("*.py"))[:30]:
        _compare_partial(path.read_text(encoding="utf-8"))


def test_statement_spans_decline_nodes_outside_statements() -> None:
    module = cst.parse_module("x = 1\n")
    assert statement_spans(module, ast.parse("x = 1\n"), [module]) is None
    assert statement_spans(module, ast.parse("x = 1\ny = 2\n"), [module.body[0]]) is None  # trees differ


def _compare_partial(source: str) -> None:
    module = cst.parse_module(source)
    nodes: list[cst.CSTNode] = []
    walk(module, nodes.append, lambda node: None)
    nodes = [node for node in nodes if node is not module]
    whole = spans_and_code(module, nodes)[0]
    partial = statement_spans(module, ast.parse(source), nodes)
    if "\\\n  dec" in source:  # a decorator continued on the next line: declined
        assert partial is None
        return
    assert partial == whole
    for node in nodes[:: max(1, len(nodes) // 7)]:  # and for a few nodes alone
        assert statement_spans(module, ast.parse(source), [node]) == {id(node): whole[id(node)]}
