"""Which plain assignment a name's use reads, in straight-line code (`reaching_assignment`).

A name bound more than once (`x = torch.load(p)`, then `x = torch.from_numpy(x[n])`) is
judged by the binding that reaches each use, not by every binding at once; the load and
save facts (`checkpoint_loads`, `checkpoint_saves`) ask this module which one that is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

import libcst as cst

from torchdev_lint.analysis.bindings import unpacked, walk_bindings

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
    name: cst.Name, parent: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> cst.Assign | cst.AnnAssign | None:
    """The plain assignment `name = value` whose value `name` reads: the last one before it in
    straight-line code of the same function (its block, then the blocks around it), when no
    other binding of the name (a loop target, a branch, a walrus) can come in between.

    None when unknown: the name is reached from the function's start, through a compound
    statement that binds it (a loop may rebind it after the use), or inside a nested scope.
    """
    node: cst.CSTNode = name
    while True:
        above = parent(node)
        if above is None or isinstance(above, _SCOPE_BOUNDARIES):
            return None
        if not isinstance(above, (cst.SimpleStatementLine, cst.IndentedBlock, cst.Module)):
            node = above
            continue
        if isinstance(above, cst.SimpleStatementLine):
            if _binds(node, name.value, walrus_only=True):
                return None  # `f(name := g(), name)`
        elif isinstance(node, cst.BaseCompoundStatement) and _binds(node, name.value):
            return None  # a loop, branch or handler around the use (or at it) binds it too
        body: list[cst.CSTNode] = list(above.body)
        for previous in reversed(body[: next(i for i, n in enumerate(body) if n is node)]):
            smalls = previous.body if isinstance(previous, cst.SimpleStatementLine) else [previous]
            for small in reversed(smalls):
                if _assigns_only(small, name.value):
                    return small
                if _binds(small, name.value):
                    return None
        node = above


def _assigns_only(statement: cst.CSTNode, name: str) -> TypeGuard[cst.Assign | cst.AnnAssign]:
    """`name = value` or `name: T = value`."""
    if isinstance(statement, cst.Assign):
        targets = [target.target for target in statement.targets]
    elif isinstance(statement, cst.AnnAssign) and statement.value is not None:
        targets = [statement.target]
    else:
        return False
    return len(targets) == 1 and isinstance(targets[0], cst.Name) and targets[0].value == name


def _binds(node: cst.CSTNode, name: str, walrus_only: bool = False) -> bool:
    """Does `node` (nested scopes included) bind `name`; only with `:=`, if `walrus_only`?"""
    return any(
        isinstance(single, cst.Name) and single.value == name
        for bound in walk_bindings([node], nested_scopes=True)
        if not walrus_only or bound.kind == "walrus"
        for single in unpacked(bound.target)
    )
