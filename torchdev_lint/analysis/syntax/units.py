"""The units the device flow analyses (a module body, a function) and where each one sits.

A unit's analysis depends only on its code and on the names its enclosing
scopes bind, never on how far the engine's traversal has got, so it can be
asked for at any time from anywhere: while the traversal is inside the unit,
its own scopes are used; otherwise the unit's scope chain is built from the
file's statements with the same binder the traversal uses (`scopes.open_scope`).
A built scope has the bindings but not the uses the traversal records
(`Scope.method_calls`, `Scope.calls`); the device flow reads bindings only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import libcst as cst

from torchdev_lint.analysis.syntax.scopes import Scope, block_statements, open_scope

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

Unit = cst.FunctionDef | cst.Module
Fact = TypeVar("Fact")
_NESTED_BLOCKS = ("body", "handlers", "orelse", "finalbody", "cases")


def memo(ctx: object) -> dict[object, object]:
    """What the analyses remember about one file (kept on its `FileContext`, or on pass 1's stand-in
    for one): unit results, class facts, built scopes, `remember`ed facts."""
    found = getattr(ctx, "_flow_cache", None)
    if found is None:
        found = {}
        ctx._flow_cache = found  # type: ignore[attr-defined]
    return found


def remember(ctx: FileContext, fact: str, node: cst.CSTNode, compute: Callable[[], Fact]) -> Fact:
    """A fact about `node` (`fact` names it), computed once per file context.

    The one cache for what rules and analyses derive from a subtree: it lives
    exactly as long as the file's tree, unlike caches keyed by `id()` that keep
    trees alive across files and may answer for a reused id.
    """
    cache = memo(ctx)
    key = (fact, node)
    if key not in cache:
        cache[key] = compute()
    return cache[key]  # type: ignore[return-value]


def current_unit(ctx: FileContext) -> Unit | None:
    """The function (or module) whose analysis covers the node being visited (None in class bodies)."""
    owner = ctx.scope.owner
    if owner.kind in ("function", "module"):
        return owner.node  # type: ignore[return-value]
    return None


def scope_of(node: cst.CSTNode, ctx: FileContext) -> Scope | None:
    """The scope a module, class or function opens, from any point of the traversal.

    None when `node` is not a module, class or function statement of this file.
    """
    scope: Scope | None = ctx.scope
    while scope is not None and scope.node is not node:
        scope = scope.parent
    if scope is not None:
        return scope
    cache = memo(ctx)
    key = ("scope", node)
    if key not in cache:
        parent = definition_owners(ctx).get(node)
        parent_scope = scope_of(parent, ctx) if parent is not None else None
        cache[key] = open_scope(node, parent_scope) if parent_scope is not None else None
    return cache[key]  # type: ignore[return-value]


def method_class(function: cst.FunctionDef, scope: Scope) -> cst.ClassDef | None:
    """The class `function` (whose scope is `scope`) is a plain method of, if any.

    Only a def directly in the class body counts (not one under an `if`), and
    not a `staticmethod` or `classmethod`.
    """
    parent = scope.parent
    if parent is None or parent.kind != "class":
        return None
    class_node: cst.ClassDef = parent.node  # type: ignore[assignment]
    if not any(statement is function for statement in block_statements(class_node.body)):
        return None
    if any(
        isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod", "classmethod")
        for d in function.decorators
    ):
        return None
    return class_node


def definition_owners(ctx: FileContext) -> dict[cst.CSTNode, cst.CSTNode]:
    """Each class and function statement of the file, mapped to the module, class or function holding it."""
    return _statements(ctx).parents


def imported_roots(ctx: FileContext) -> frozenset[str]:
    """The first name of every module an absolute import of the file names, at any depth
    (`torch` for `import torch.nn as nn` and `from torch.nn import Linear`): only an import
    binds a name that resolves to a module's API (`scopes.resolve`)."""
    return _statements(ctx).imported


class _Statements:
    """What one pass over the file's statements (no expressions) finds: where each class and
    function sits, and the modules its imports name."""

    def __init__(self, module: cst.Module) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        imported: set[str] = set()
        stack: list[tuple[cst.CSTNode, cst.CSTNode]] = [(s, module) for s in module.body]
        # Exact types: LibCST's node classes are final, and isinstance on their ABCs is slow.
        while stack:
            statement, owner = stack.pop()
            if type(statement) is cst.SimpleStatementLine:
                for small in statement.body:
                    if type(small) is cst.Import or type(small) is cst.ImportFrom:
                        imported.update(_roots(small))
                continue
            if type(statement) is cst.FunctionDef or type(statement) is cst.ClassDef:
                self.parents[statement] = owner
                stack.extend((s, statement) for s in block_statements(statement.body))
                continue
            for attr in _NESTED_BLOCKS:
                child = getattr(statement, attr, None)
                if child is None:
                    continue
                if type(child) is cst.IndentedBlock or type(child) is cst.SimpleStatementSuite:
                    stack.extend((s, owner) for s in block_statements(child))
                elif type(child) is list or type(child) is tuple:
                    stack.extend((c, owner) for c in child)  # except handlers, match cases
                elif isinstance(child, cst.CSTNode):
                    stack.append((child, owner))  # an `else`, `elif` or `finally` clause
        self.imported = frozenset(imported)


def _roots(statement: cst.Import | cst.ImportFrom) -> list[str]:
    if isinstance(statement, cst.ImportFrom):
        module = statement.module
        if statement.relative or module is None:
            return []
        names = [module]
    else:
        names = [alias.name for alias in statement.names]
    roots = []
    for name in names:
        root: cst.BaseExpression = name
        while isinstance(root, cst.Attribute):
            root = root.value
        if isinstance(root, cst.Name):
            roots.append(root.value)
    return roots


def _statements(ctx: FileContext) -> _Statements:
    cache = memo(ctx)
    found = cache.get("statements")
    if not isinstance(found, _Statements):
        found = cache["statements"] = _Statements(ctx.module)
    return found
