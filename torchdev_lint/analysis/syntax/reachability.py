"""Dead code: the statements after one that always leaves their block.

Code that follows `return`, `raise`, `break`, `continue`, `assert False` or `sys.exit()` in the same
block never runs, so nothing it spells can fail or cost anything at run time (a `.cuda()` after
`assert False, "not used"` is a leftover, not a hard-coded device). Only a leaving statement at the
block's own level counts: one inside an `if` or a loop may not run. A function defined in dead code
is never defined, so its body is dead too.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from torchdev_lint.analysis.syntax.scopes import dotted_name

# Calls that end the program.
ENDING_CALLS = frozenset({"sys.exit", "os._exit", "exit", "quit"})
_ENDING_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in ENDING_CALLS)


def dead_after(small: cst.BaseSmallStatement, ancestors: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
    """The statements that never run because `small` (the statement being entered, last of its
    `ancestors`) always leaves its block: those after it on its line and in its block."""
    if not _leaves(small) or len(ancestors) < 2:
        return []
    line = ancestors[-2]
    if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return []
    dead: list[cst.CSTNode] = list(_after(line.body, small))
    block = ancestors[-3] if isinstance(line, cst.SimpleStatementLine) and len(ancestors) > 2 else None
    if isinstance(block, (cst.IndentedBlock, cst.Module)):
        dead += _after(block.body, line)
    return dead


def _after(statements: Sequence[cst.CSTNode], node: cst.CSTNode) -> Sequence[cst.CSTNode]:
    for index, statement in enumerate(statements):
        if statement is node:
            return statements[index + 1 :]
    return ()


def _leaves(small: cst.BaseSmallStatement) -> bool:
    if isinstance(small, (cst.Return, cst.Raise, cst.Break, cst.Continue)):
        return True
    if isinstance(small, cst.Assert):
        test = small.test
        return (isinstance(test, cst.Name) and test.value == "False") or (
            isinstance(test, cst.Integer) and test.evaluated_value == 0
        )
    if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
        return False
    func = small.value.func
    last = func.attr if isinstance(func, cst.Attribute) else func
    return isinstance(last, cst.Name) and last.value in _ENDING_NAMES and dotted_name(func) in ENDING_CALLS
