"""What runs on every pass through a block, and which host reads decide its control flow (TDL206).

A read of a device value waits for the device each time it runs. Whether it runs on every
iteration of a loop (or on every call of a function) is a question of the path from the block
to the read:

- `runs_every_time(path, scope, per_item=...)`: no `if` branch on the way, except one whose
  test says that CUDA is there (`if torch.cuda.is_available():`, `if use_cuda:`, the `else` of
  `if not x.is_cuda:`): on a GPU it is taken every time, unlike `if step % 50 == 0:`; no `try`,
  `except`, `match`, the branch of a conditional expression or the right of `and`/`or`. A
  nested `for` loop runs its body once per item: it counts with `per_item` (a per-sample read
  inside a function called every step), a `while` never does. A comprehension counts (as it
  always has for TDL206).
- `steered(block, is_read, prune=...)`: does a host read decide the block's control flow (an
  `if`/`while`/`assert` test or an index that holds a read, or a name a read was assigned to)?
  Then the block must wait for the device anyway; `is_read` says what counts as a read (`.item()`,
  a helper that returns one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from torchdev_lint.analysis.context.guards import says_missing, says_present
from torchdev_lint.analysis.syntax.loops import names_in
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.analysis.syntax.walk import first, visit

_SOMETIMES = (cst.Try, cst.TryStar, cst.ExceptHandler, cst.ExceptStarHandler, cst.Match)


def runs_every_time(path: Sequence[cst.CSTNode], scope: Scope, *, per_item: bool) -> bool:
    """Does the last node of `path` (the nodes from a block down to it, outermost first) run
    each time the block runs? See the module doc."""
    for node, child in zip(path, path[1:], strict=False):
        if isinstance(node, (cst.If, cst.IfExp)):
            if child is node.test:
                continue
            taken = child is node.body
            if not taken_on_gpu(node.test, scope, taken):
                return False
        elif isinstance(node, _SOMETIMES):
            return False
        elif isinstance(node, cst.BooleanOperation) and child is node.right:
            return False
        elif isinstance(node, (cst.For, cst.While)):
            if child is getattr(node, "iter", None):
                continue
            if not (per_item and isinstance(node, cst.For) and child is node.body):
                return False
    return True


def taken_on_gpu(test: cst.BaseExpression, scope: Scope, taken: bool) -> bool:
    """Is the branch of `test` that is `taken` (the body when True, the `else` when False) taken
    every time on a machine with CUDA? `torch.cuda.is_available() and step % 50 == 0` is not:
    both sides of an `and` must hold."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return taken_on_gpu(test.expression, scope, not taken)
    if isinstance(test, cst.BooleanOperation):
        left = taken_on_gpu(test.left, scope, taken)
        right = taken_on_gpu(test.right, scope, taken)
        both = isinstance(test.operator, cst.And) == taken  # `a and b` true, `a or b` false
        return left and right if both else left or right
    return says_present(test, scope) if taken else says_missing(test, scope)


def steered(
    block: cst.CSTNode, is_read: Callable[[cst.CSTNode], bool], prune: tuple[type[cst.CSTNode], ...] = ()
) -> bool:
    """Does a host read decide the control flow of `block` (`if t.item() in stop: break`,
    `x = t.item()` then `if x == 0:`, an index or a slice bound)? Nested functions are left out,
    and the nodes of the `prune` types."""
    prune = (cst.FunctionDef, cst.Lambda, cst.ClassDef, *prune)
    reads: set[str] = set()
    smalls = _SmallStatements(prune)
    visit(block, smalls)
    for statement in smalls.found:
        if isinstance(statement, cst.Assign) and has_read(statement.value, is_read):
            reads.update(t.target.value for t in statement.targets if isinstance(t.target, cst.Name))

    def decides(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.If, cst.While, cst.Assert)):
            test: cst.CSTNode = node.test
        elif isinstance(node, cst.SubscriptElement):
            test = node.slice
        else:
            return False
        return has_read(test, is_read) or bool(names_in(test) & reads)

    return first(block, decides, prune=prune) is not None


def has_read(node: cst.CSTNode, is_read: Callable[[cst.CSTNode], bool]) -> bool:
    """Does the expression read a value on the host (as `is_read` tells)?"""
    return first(node, is_read) is not None


def value_read(node: cst.CSTNode) -> bool:
    """`t.item()`, `t.tolist()`: a device value read into Python."""
    if not isinstance(node, cst.Call) or node.args:
        return False
    func = node.func
    return isinstance(func, cst.Attribute) and func.attr.value in ("item", "tolist")


class _SmallStatements(cst.CSTVisitor):
    """The small statements of a block, in order (nested functions and `prune` types left out)."""

    def __init__(self, prune: tuple[type[cst.CSTNode], ...]) -> None:
        self.found: list[cst.BaseSmallStatement] = []
        self._prune = prune

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.found.extend(node.body)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self._prune):
            return False
        return super().on_visit(node)
