"""The lean position pass must agree with LibCST's PositionProvider on every node."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from torchdev_lint.analysis.walk import walk
from torchdev_lint.positions import node_spans

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
    spans = node_spans(module, nodes)
    for node in nodes:
        span = expected[node]
        assert spans[id(node)] == ((span.start.line, span.start.column), (span.end.line, span.end.column))
