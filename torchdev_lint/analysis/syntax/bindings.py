"""What code binds: the one reader of assignments, loop targets, imports, `with ... as`, defs.

Every question of the form "which names does this code (re)bind?" asks here:
the scopes' name tables (`scopes.collect_bindings`), what a loop body rebinds
(`loops.bound_in`), whether another binding comes between an assignment and a
use (`reaching_bindings`), which attributes a class's methods write
(`flow_classes`), what `del`, `import` and `global` make the device flow
forget (`flow_statements`).

- `own_bindings(node)`: what one node binds by itself, its children left out;
- `walk_bindings(roots, ...)`: every binding under `roots`, in source order,
  optionally without expressions (a scope's name table needs statements only)
  or with nested scopes;
- `unpacked(target)`: the single targets of `a, (b.c, *d[0])`.

A `Bound` keeps the target as written (a `Name`, an `Attribute`, a `Subscript`
or a tuple of them): what counts as bound (`buf[i] = v` changing `buf`, or not)
is the asker's question.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import libcst as cst

from torchdev_lint.analysis.syntax.walk import children

BindingKind = Literal[
    "assign",  # `x = v`, `x = y = v`
    "annotation",  # `x: T = v`, `x: T` (value None)
    "aug-assign",  # `x += v`
    "for",  # `for x in ...`
    "comprehension",  # `[... for x in ...]`: binds in the comprehension's own scope
    "with",  # `with ... as x`
    "except",  # `except E as x`
    "import",  # `import a.b as x`, `import a.b` (binds `a`), `from m import x`
    "def",
    "class",
    "walrus",  # `(x := v)`
    "del",  # `del x`
    "global",
    "nonlocal",
]
# Nodes whose body is another scope: entered only when asked for.
NESTED_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
# The parts of compound statements that hold statements, in source order.
_BLOCKS = ("items", "body", "handlers", "orelse", "finalbody", "cases")
_PARTS: dict[type, tuple[str, ...]] = {}
_HOLDS_STATEMENTS = (
    cst.BaseCompoundStatement,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Else,
    cst.Finally,
    cst.MatchCase,
)


@dataclass(frozen=True, slots=True)
class Bound:
    """One binding: `target` as written, its kind, the node that binds and the value it gets.

    `node` is the statement or clause that binds (the `Assign`, the `For`, the
    `WithItem`, the `ExceptHandler`, the `Import`...); `value` is the assigned
    expression of an assignment, annotation or walrus (every target of
    `x = y = v` gets `v`). For an import, `target` is the name bound (`a` for
    `import a.b`) and `alias` the imported name.
    """

    target: cst.BaseExpression
    kind: BindingKind
    node: cst.CSTNode
    value: cst.BaseExpression | None = None
    alias: cst.ImportAlias | None = None


def own_bindings(node: cst.CSTNode) -> list[Bound]:
    """What `node` binds by itself (its children, which may bind too, left out)."""
    reader = _READERS.get(type(node))
    return [] if reader is None else reader(node)


def _assign(node: cst.Assign) -> list[Bound]:
    return [Bound(target.target, "assign", node, node.value) for target in node.targets]


def _as_name(
    kind: BindingKind,
) -> Callable[[cst.WithItem | cst.ExceptHandler | cst.ExceptStarHandler], list[Bound]]:
    def read(node: cst.WithItem | cst.ExceptHandler | cst.ExceptStarHandler) -> list[Bound]:
        asname = node.asname if isinstance(node, cst.WithItem) else node.name
        return [] if asname is None else [Bound(asname.name, kind, node)]

    return read


def _names(kind: BindingKind) -> Callable[[cst.Global | cst.Nonlocal], list[Bound]]:
    return lambda node: [Bound(item.name, kind, node) for item in node.names]


def _import_bindings(node: cst.Import | cst.ImportFrom) -> list[Bound]:
    if isinstance(node.names, cst.ImportStar):
        return []
    found = []
    for alias in node.names:
        if alias.asname is not None:
            bound: cst.BaseExpression = alias.asname.name
        else:
            bound = alias.name
            while isinstance(bound, cst.Attribute):
                bound = bound.value  # `import os.path` binds `os`
        found.append(Bound(bound, "import", node, alias=alias))
    return found


_READERS: dict[type, Callable[[Any], list[Bound]]] = {
    cst.Assign: _assign,
    cst.AnnAssign: lambda node: [Bound(node.target, "annotation", node, node.value)],
    cst.AugAssign: lambda node: [Bound(node.target, "aug-assign", node)],
    cst.For: lambda node: [Bound(node.target, "for", node)],
    cst.CompFor: lambda node: [Bound(node.target, "comprehension", node)],
    cst.WithItem: _as_name("with"),
    cst.ExceptHandler: _as_name("except"),
    cst.ExceptStarHandler: _as_name("except"),
    cst.NamedExpr: lambda node: [Bound(node.target, "walrus", node, node.value)],
    cst.Del: lambda node: [Bound(node.target, "del", node)],
    cst.FunctionDef: lambda node: [Bound(node.name, "def", node)],
    cst.ClassDef: lambda node: [Bound(node.name, "class", node)],
    cst.Import: _import_bindings,
    cst.ImportFrom: _import_bindings,
    cst.Global: _names("global"),
    cst.Nonlocal: _names("nonlocal"),
}


def walk_bindings(
    roots: Iterable[cst.CSTNode], *, expressions: bool = True, nested_scopes: bool = False
) -> Iterator[Bound]:
    """Every binding under `roots` (roots included), in source order.

    `expressions=False` reads statements only (no walrus inside an expression,
    no comprehension); `nested_scopes=False` reports a `def` or `class` but
    not what its body binds, and leaves lambdas out.
    """
    stack = list(roots)[::-1]
    pop, push, extend = stack.pop, stack.append, stack.extend
    stop = frozenset() if nested_scopes else NESTED_SCOPES
    while stack:
        node = pop()
        node_type = type(node)
        reader = _READERS.get(node_type)
        if reader is not None:
            yield from reader(node)
        if node_type in stop:
            continue
        if expressions:
            extend(reversed(children(node)))
            continue
        # Statements only: push the blocks and clauses, last first, so they pop in source order.
        fields = _PARTS.get(node_type)
        if fields is None:
            fields = _PARTS[node_type] = _part_fields(node_type)
        for name in fields:
            child = getattr(node, name)
            if type(child) is tuple or type(child) is list:
                extend(reversed(child))
            elif child is not None:
                push(child)


def _part_fields(node_type: type) -> tuple[str, ...]:
    """The fields holding statements or clauses, last first (a statements-only walk enters these only)."""
    if issubclass(node_type, (cst.SimpleStatementLine, cst.BaseSuite, cst.Module)):
        return ("body",)
    if not issubclass(node_type, _HOLDS_STATEMENTS):
        return ()
    return tuple(name for name in reversed(_BLOCKS) if name in node_type.__dataclass_fields__)


def paired_elements(
    target: cst.BaseExpression, value: cst.BaseExpression | None
) -> list[tuple[cst.BaseExpression, cst.BaseExpression]] | None:
    """`x, y = a, b`: each target element with the element of the display it receives; None where
    the value is no display of as many plain elements (`a, b = pair`, starred elements)."""
    if not (
        isinstance(target, (cst.Tuple, cst.List))
        and isinstance(value, (cst.Tuple, cst.List))
        and len(target.elements) == len(value.elements)
        and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements))
    ):
        return None
    return [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]


def unpacked(target: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The single targets of a target: `a`, `b.c` and `d[0]` for `a, (b.c, *d[0])`."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from unpacked(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from unpacked(target.value)
    else:
        yield target


def read_anywhere(unit: cst.CSTNode, name: str, binding: cst.Name) -> bool:
    """Might code in `unit` (nested scopes included) read `name` other than through `binding`:
    any `Name` spelled so, except `binding` itself, attribute names and keyword names (a
    rebinding counts too: cautious where a flow would be needed)."""
    stack = [unit]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute):
            stack.append(node.value)
            continue
        if isinstance(node, cst.Arg):
            stack.append(node.value)
            continue
        if isinstance(node, cst.Name) and node.value == name and node is not binding:
            return True
        stack.extend(children(node))
    return False


def rebound_globally(module: cst.Module, name: str) -> bool:
    """Does a function of the module declare `global name` (and so may rebind the module's name to
    anything, whatever the module-level bindings say)?"""
    return any(
        bound.kind == "global" and isinstance(bound.target, cst.Name) and bound.target.value == name
        for bound in walk_bindings(module.body, expressions=False, nested_scopes=True)
    )
