"""Is code a program's entry point or a module's demo?

`if __name__ == "__main__":` at the top of a script is the program itself. The same block in a
module that other files of the project import (`dac/model/dac.py`, imported by the package) is
the author's smoke test or demo: nobody's training run goes through it, so what only costs speed
there does not matter, as in test code (TDL203). Whether the project imports the module is a
fact of pass 1 (`FileFacts.roles`); a file checked alone is taken for a script.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.analysis.provenance.checkpoint_loads import is_test_code

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


def untimed_code(ctx: FileContext) -> bool:
    """The node being visited is test code or a package module's demo: its speed does not matter."""
    return is_test_code(ctx.path, ctx.ancestors, ctx.scope) or in_demo_block(ctx.ancestors, ctx.project)


def in_demo_block(ancestors: Sequence[cst.CSTNode], project: FileFacts | None) -> bool:
    """Inside a module-level `if __name__ == "__main__":` of a module the project imports."""
    if project is None or len(ancestors) < 2 or not isinstance(ancestors[0], cst.Module):
        return False
    block = ancestors[1]
    return isinstance(block, cst.If) and _main_test(block.test) and project.imported_by_project()


def _main_test(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Equal):
        return False
    sides = (test.left, target.comparator)
    names = [s for s in sides if isinstance(s, cst.Name) and s.value == "__name__"]
    strings = [s for s in sides if isinstance(s, cst.SimpleString) and s.evaluated_value == "__main__"]
    return len(names) == 1 and len(strings) == 1
