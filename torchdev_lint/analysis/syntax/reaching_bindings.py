"""Which plain assignment a name's use reads, in straight-line code (`reaching_assignment`).

A name bound more than once (`x = torch.load(p)`, then `x = torch.from_numpy(x[n])`) is
judged by the binding that reaches each use, not by every binding at once; the load and
save facts (`checkpoint_loads`, `checkpoint_saves`) ask this module which one that is.
`assigned_between` says whether what an assignment read may have changed by a later use
(a discarded move that repeats its factory's `dtype=`, `factory_values.moves_nothing`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from itertools import pairwise
from typing import TypeGuard

import libcst as cst

from torchdev_lint.analysis.syntax.bindings import unpacked, walk_bindings

# Nodes whose names belong to another scope, or are read later (lambdas, generators).
_SCOPE_BOUNDARIES = (
    cst.FunctionDef,
    cst.ClassDef,
    cst.Lambda,
    cst.GeneratorExp,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
)


def reaching_assignment(
    name: cst.Name, parent: Callable[[cst.CSTNode], cst.CSTNode | None], parts: bool = False
) -> cst.Assign | cst.AnnAssign | None:
    """The plain assignment `name = value` whose value `name` reads: the last one before it in
    straight-line code of the same function (its block, then the blocks around it), when no
    other binding of the name (a loop target, a branch, a walrus) can come in between. With
    `parts`, also an unpacking `x, name = value` (`name` one element of a flat target).

    None when unknown: the name is reached from the function's start, through a compound
    statement that binds it (a loop may rebind it after the use), or inside a nested scope.
    """
    for statement, holds in _run_before(name, parent):
        if holds:
            if _binds_around(statement, lambda target: _is_name(target, name.value)):
                return None
        elif _assigns_only(statement, name.value) or (parts and _unpacks_into(statement, name.value)):
            return statement
        elif _binds(statement, name.value):
            return None
    return None


def assigned_between(
    assignment: cst.CSTNode,
    use: cst.CSTNode,
    roots: Collection[str],
    parent: Callable[[cst.CSTNode], cst.CSTNode | None],
) -> bool:
    """Whether code that runs after the statement `assignment` and before `use` may assign to one
    of `roots`, or to an attribute or item of one (`q = ...`, `q.data = ...`, `q[0] = ...`):
    what `use` reads of them may then differ from what `assignment` read. True when `assignment`
    is not found before `use` in straight-line code."""

    def rooted(target: cst.BaseExpression) -> bool:
        while isinstance(target, (cst.Attribute, cst.Subscript)):
            target = target.value
        return isinstance(target, cst.Name) and target.value in roots

    for statement, holds in _run_before(use, parent):
        if not holds and statement is assignment:
            return False
        if _binds_around(statement, rooted) if holds else _binds_target(statement, rooted):
            return True
    return True


def parents_along(path: Sequence[cst.CSTNode]) -> Callable[[cst.CSTNode], cst.CSTNode | None]:
    """`parent` for the nodes of `path`, root first, each a child of the one before (a visitor's
    ancestors): all the walks above ask, since they only climb from the use."""
    parents = {id(child): above for above, child in pairwise(path)}
    return lambda node: parents.get(id(node))


def _run_before(
    node: cst.CSTNode, parent: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> Iterator[tuple[cst.CSTNode, bool]]:
    """What runs before `node` in straight-line code of its function, latest first: each small or
    compound statement before it, with False, and each statement holding it, with True. Ends at
    the function's start or at a nested scope (its names are read later)."""
    while True:
        above = parent(node)
        if above is None or isinstance(above, _SCOPE_BOUNDARIES):
            return
        if not isinstance(above, (cst.SimpleStatementLine, cst.IndentedBlock, cst.Module)):
            node = above
            continue
        if not isinstance(node, cst.SimpleStatementLine):
            yield node, True
        body: list[cst.CSTNode] = list(above.body)
        for previous in reversed(body[: next(i for i, n in enumerate(body) if n is node)]):
            smalls = previous.body if isinstance(previous, cst.SimpleStatementLine) else [previous]
            for small in reversed(smalls):
                yield small, False
        node = above


def _binds_around(statement: cst.CSTNode, matches: Callable[[cst.BaseExpression], bool]) -> bool:
    """Does a statement holding the use bind a matching target: a loop, branch or handler
    anywhere in it, the use's own small statement only with `:=` (`f(name := g(), name)`)."""
    if isinstance(statement, cst.BaseCompoundStatement):
        return _binds_target(statement, matches)
    return _binds_target(statement, matches, walrus_only=True)


def _is_name(target: cst.BaseExpression, name: str) -> bool:
    return isinstance(target, cst.Name) and target.value == name


def _assigns_only(statement: cst.CSTNode, name: str) -> TypeGuard[cst.Assign | cst.AnnAssign]:
    """`name = value` or `name: T = value`."""
    if isinstance(statement, cst.Assign):
        targets = [target.target for target in statement.targets]
    elif isinstance(statement, cst.AnnAssign) and statement.value is not None:
        targets = [statement.target]
    else:
        return False
    return len(targets) == 1 and isinstance(targets[0], cst.Name) and targets[0].value == name


def _unpacks_into(statement: cst.CSTNode, name: str) -> TypeGuard[cst.Assign]:
    """`x, name = value`: one flat tuple or list target holding `name`."""
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
        return False
    target = statement.targets[0].target
    return isinstance(target, (cst.Tuple, cst.List)) and any(
        _is_name(element.value, name) for element in target.elements
    )


def _binds(node: cst.CSTNode, name: str) -> bool:
    """Does `node` (nested scopes included) bind `name`?"""
    return _binds_target(node, lambda target: _is_name(target, name))


def _binds_target(
    node: cst.CSTNode, matches: Callable[[cst.BaseExpression], bool], walrus_only: bool = False
) -> bool:
    """Does `node` (nested scopes included) bind a matching target; only with `:=`, if `walrus_only`?"""
    return any(
        matches(single)
        for bound in walk_bindings([node], nested_scopes=True)
        if not walrus_only or bound.kind == "walrus"
        for single in unpacked(bound.target)
    )


def after_exit(stack: Sequence[cst.CSTNode]) -> bool:
    """Is the statement on top of `stack` (the nodes from the module down) dead code, after a
    `raise` or `return` of its block (`raise NotImplementedError(...)`, then `backend = "gloo"`)?"""
    line, block = (stack[-2], stack[-3]) if len(stack) >= 3 else (None, None)
    if not isinstance(block, cst.IndentedBlock):
        return False
    for statement in block.body:
        if statement is line:
            return False
        if isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, (cst.Raise, cst.Return)) for small in statement.body
        ):
            return True
    return False
