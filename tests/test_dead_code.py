"""No rule reports code that never runs: statements after one that always leaves their block.

A `.cuda()` after `assert False` is a leftover, not a hard-coded device; the fact is the engine's
(`analysis/syntax/reachability.py`), so it holds for every rule alike.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdev_lint.analysis.syntax.reachability import dead_after
from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rule import all_rules

DEAD = {
    "assert": """
        def pad(packed, sizes):
            assert False, "superseded by pad_fast"
            packed, sizes = packed.cuda(), sizes.cuda()
            return packed
        """,
    "raise": """
        def warm(buffer):
            raise NotImplementedError
            buffer = buffer.to("cuda")
        """,
    "exit after a loop": """
        import sys
        import torch

        for item in range(3):
            print(item)
        sys.exit(0)
        probe = torch.zeros(4).cuda()
        """,
    "a function defined after return": """
        def outer(values):
            return values
            def inner(x):
                return x.cuda()
        """,
}

LIVE = {
    "return in a branch": """
        def place(tensor, skip):
            if skip:
                return tensor
            return tensor.cuda()
        """,
    "assert of a condition": """
        def place(tensor):
            assert tensor.dim() == 2
            return tensor.cuda()
        """,
    "a nested function before the exit": """
        def outer(values):
            def inner(x):
                return x.cuda()
            return inner
        """,
}


def _codes(source: str) -> list[str]:
    result = check_source("m.py", textwrap.dedent(source), all_rules(), Settings())
    return [d.code for d in result.diagnostics]


@pytest.mark.parametrize("source", DEAD.values(), ids=DEAD.keys())
def test_dead_code_is_not_reported(source: str) -> None:
    assert _codes(source) == []


@pytest.mark.parametrize("source", LIVE.values(), ids=LIVE.keys())
def test_live_code_is_reported(source: str) -> None:
    assert "TDL301" in _codes(source)


def test_the_statements_after_an_exit_are_dead_on_its_line_and_in_its_block() -> None:
    module = cst.parse_module("def f(x):\n    y = 1\n    return x; y = 2\n    z = 3\n")
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    line = function.body.body[1]
    assert isinstance(line, cst.SimpleStatementLine)
    exit_, after = line.body
    ancestors = [module, function, function.body, line, exit_]
    assert dead_after(exit_, ancestors) == [after, function.body.body[2]]
    first = function.body.body[0]
    assert isinstance(first, cst.SimpleStatementLine)
    assert dead_after(first.body[0], [module, function, function.body, first, first.body[0]]) == []
