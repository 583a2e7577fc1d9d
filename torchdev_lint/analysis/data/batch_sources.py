"""Which iterable's batches a move moves: the loop's, or one drawn with `next()` each iteration.

Training code iterates a loader with `for x, y in loader:` (`batches.batch_move`), or draws a
batch with `next()` on each pass of a step loop: `x, y = next(it)` with `it = iter(loader)`,
`img = next(self.dl)` with `self.dl = cycle(DataLoader(...))`. Either way the loader's batches
cross to the device once per step, so both count as moved batches (TDL204, the project's
parameter boundaries). A draw outside any loop (one batch taken to read its shape) does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeGuard

import libcst as cst

from torchdev_lint.analysis.data.batches import BatchMove, access_path, batch_move, uncast
from torchdev_lint.analysis.data.loaders import is_loader
from torchdev_lint.analysis.knowledge.devices import Move
from torchdev_lint.analysis.syntax.loops import enclosing_loops
from torchdev_lint.analysis.syntax.reaching_bindings import parents_along, reaching_assignment
from torchdev_lint.analysis.syntax.scopes import Scope, resolve

_MAX_STEPS = 4  # assignments followed back from the moved value to the draw (`x = batch["x"]`, ...)


def batch_source(move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope) -> cst.BaseExpression | None:
    """The iterable whose batch `move` (the last of `ancestors`) moves, casts in front looked
    through: `loader` in `for x, y in loader: x.float().to(d)`, `it` in `x, y = next(it)` drawn
    in the same loop pass; None when the moved value is not known to be such a batch."""
    batch = batch_move(move, ancestors, scope, through_casts=True)
    if batch is not None:
        return batch.source
    draw = _draw(move, ancestors, scope, through_casts=True)
    return draw.source if draw is not None else None


def drawn_batch_move(move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope) -> BatchMove | None:
    """`move` as a move of (part of) a batch drawn with `next(it)` in the pass of the innermost loop
    around it (`x, y = next(it)` ... `x.to(d)`), as `batches.batch_move` says of a loop's batches:
    the host paths are the moved expression and the names it was unpacked from (none when the
    draw itself is moved, `next(it).cuda()`: nothing else holds that batch)."""
    loops = enclosing_loops(ancestors)
    if not loops:
        return None
    draw = _draw(move, ancestors, scope, through_casts=False)
    receiver = access_path(move.receiver)
    if draw is None or (receiver is None and draw.names):
        return None
    host = (*((receiver,) if receiver is not None else ()), *((name,) for name in draw.names))
    return BatchMove(move, loops[0], host, draw.whole, draw.source)


class _Draw(NamedTuple):
    source: cst.BaseExpression  # `it` of `next(it)`
    names: tuple[str, ...]  # the names followed back from the moved value to the draw
    whole: bool  # the moved value is the drawn batch itself (`batch = next(it)`, `batch.to(d)`)


def _draw(move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope, through_casts: bool) -> _Draw | None:
    """The draw when the moved value is (part of) `next(it)`, drawn inside a loop of its function
    (or from an iterator the object keeps) from an iterator over a loader, and not rebound before
    the move."""
    moved = uncast(move.receiver, scope) if through_casts else move.receiver
    path = list(ancestors)
    node: cst.CSTNode = path[-1]
    while node is not moved:  # down from the move to the moved value, through the casts
        if isinstance(node, cst.Call):
            node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return None
        path.append(node)
    names: list[str] = []
    whole = True
    for _ in range(_MAX_STEPS):
        while isinstance(node, (cst.Attribute, cst.Subscript)):  # `batch["image"]`, `batch.x`
            node = node.value
            path.append(node)
            whole = False
        if _is_next(node, scope):
            source = node.args[0].value
            drawn_each_call = enclosing_loops(path) or _kept_by_instance(source)
            return (
                _Draw(source, tuple(names), whole) if drawn_each_call and is_loader(source, scope) else None
            )
        if not isinstance(node, cst.Name):
            return None
        names.append(node.value)
        assignment = reaching_assignment(node, parents_along(path), parts=True)
        if not isinstance(assignment, cst.Assign):
            return None
        found = _assigned_path(assignment, node, path)
        if found is None:
            return None
        whole = whole and isinstance(assignment.targets[0].target, cst.Name)  # not `x, y = next(it)`
        path, node = found
    return None


def _kept_by_instance(iterator: cst.BaseExpression) -> bool:
    """`self.dl`: an iterator an object keeps between calls is there to be drawn from again,
    so each call of the method draws the next batch (a step function its caller loops over)."""
    return (
        isinstance(iterator, cst.Attribute)
        and isinstance(iterator.value, cst.Name)
        and iterator.value.value == "self"
    )


def _is_next(node: cst.CSTNode, scope: Scope) -> TypeGuard[cst.Call]:
    return (
        isinstance(node, cst.Call)
        and len(node.args) == 1
        and node.args[0].keyword is None
        and not node.args[0].star
        and resolve(node.func, scope) == "builtins.next"
    )


def _assigned_path(
    assignment: cst.Assign, name: cst.Name, path: list[cst.CSTNode]
) -> tuple[list[cst.CSTNode], cst.BaseExpression] | None:
    """The path down to what `name` was assigned (`x = v`: `v`; `x, y = v`: `v`, which `x` is a
    part of), found in the block of `path` that holds the assignment; None for other shapes."""
    if len(assignment.targets) != 1:
        return None
    target = assignment.targets[0].target
    if isinstance(target, (cst.Tuple, cst.List)):
        if isinstance(assignment.value, (cst.Tuple, cst.List)) or not any(
            isinstance(e.value, cst.Name) and e.value.value == name.value for e in target.elements
        ):
            return None
    elif not (isinstance(target, cst.Name) and target.value == name.value):
        return None
    for index in range(len(path) - 1, -1, -1):
        block = path[index]
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            continue
        line = next(
            (
                line
                for line in block.body
                if isinstance(line, cst.SimpleStatementLine) and any(s is assignment for s in line.body)
            ),
            None,
        )
        if line is not None:
            return [*path[: index + 1], line, assignment, assignment.value], assignment.value
    return None
