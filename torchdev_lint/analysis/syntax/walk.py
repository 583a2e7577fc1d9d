"""A fast, read-only traversal of a LibCST tree.

LibCST's own `visit` rebuilds every node it passes (it is shared with
transformers), which costs more than parsing. Linting needs no rebuilt tree,
so this walker reads children straight from the node fields, in source order,
and leaves out trivia (whitespace, comments, punctuation, operators) that no
rule inspects. It is iterative, so deeply nested code cannot overflow the
Python stack.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from collections import abc
from collections.abc import Callable
from typing import Any

import libcst as cst

TRIVIA: tuple[type[cst.CSTNode], ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Newline,
    cst.Comment,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Comma,
    cst.Dot,
    cst.Semicolon,
    cst.Colon,
    cst.AssignEqual,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
    cst.Asynchronous,
)
_SELF_FIELD = re.compile(r"self\.(\w+)")
# Node type -> the function listing its children, written for its fields (see `_reader`).
_READERS: dict[type, Callable[[cst.CSTNode], list[cst.CSTNode]]] = {}


def _child_fields(node_type: type) -> tuple[str, ...]:
    """The node type's fields in source order, as LibCST's own visit orders them."""
    names = [field.name for field in dataclasses.fields(node_type)]
    try:
        source = inspect.getsource(node_type._visit_and_replace_children)  # type: ignore[attr-defined]
        ordered = list(dict.fromkeys(m.group(1) for m in _SELF_FIELD.finditer(source)))
        names = [n for n in ordered if n in names] + [n for n in names if n not in ordered]
    except (OSError, TypeError):
        pass
    types = {field.name: field.type for field in dataclasses.fields(node_type)}
    fields = tuple(
        n
        for n in names
        if not n.startswith("whitespace")
        and n not in ("leading_lines", "lpar", "rpar")
        and _may_hold_node(types[n])
    )
    return fields


def _may_hold_node(annotation: object) -> bool:
    """Can a field so annotated hold a node the walker visits? Not `str`, a `Literal`, a
    `MaybeSentinel` or a trivia type (`Name.value`, `Arg.comma`): reading such fields for every
    node found nothing and cost a fifth of a walk. Unknown annotations (strings) count as nodes."""
    if isinstance(annotation, type):
        return issubclass(annotation, cst.CSTNode) and not issubclass(annotation, TRIVIA)
    if typing.get_origin(annotation) is typing.Literal:
        return False
    arguments = typing.get_args(annotation)
    return not arguments or any(_may_hold_node(argument) for argument in arguments)


_NOT_NODE, _NODE, _SKIP, _SEQUENCE = 0, 1, 2, 3
_CATEGORY: dict[type, int] = {list: _SEQUENCE, tuple: _SEQUENCE}


def _category(value_type: type) -> int:
    """How the walker treats a field value of this type (cached: isinstance on ABCs is slow)."""
    category = _CATEGORY.get(value_type)
    if category is None:
        if not issubclass(value_type, cst.CSTNode):
            category = _NOT_NODE
        else:
            category = _SKIP if issubclass(value_type, TRIVIA) else _NODE
        _CATEGORY[value_type] = category
    return category


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Non-trivia children of `node`, in source order."""
    reader = _READERS.get(type(node))
    if reader is None:
        reader = _reader(type(node))
    return reader(node)


def _reader(node_type: type) -> Callable[[cst.CSTNode], list[cst.CSTNode]]:
    """The function listing a node type's children, written (once per type) for its fields: a
    field whose annotation says it always holds a visited node (`Attribute.value`) or a sequence
    of them (`Call.args`) is taken as it is; the others (`Optional`, `MaybeSentinel`, a union
    with trivia) have each value's type looked up. A third cheaper than one loop over the
    fields testing every value and every item (what `children` cost a tenth of a check)."""
    try:
        hints = typing.get_type_hints(node_type)
    except (NameError, TypeError):  # an annotation that does not evaluate: test every value
        hints = {}
    lines = ["def children(node):", "    found = []"]
    for name in _child_fields(node_type):
        annotation = hints.get(name)
        if _always_node(annotation):
            lines.append(f"    found.append(node.{name})")
        elif typing.get_origin(annotation) is abc.Sequence and all(
            _always_node(item) for item in typing.get_args(annotation)
        ):
            lines.append(f"    found += node.{name}")
        else:
            lines.append(_TESTED.format(name=name))
    lines.append("    return found")
    namespace: dict[str, Any] = {"categories": _CATEGORY, "category": _category}
    exec("\n".join(lines), namespace)  # noqa: S102 (code written here from field names)
    reader: Callable[[cst.CSTNode], list[cst.CSTNode]] = namespace["children"]
    _READERS[node_type] = reader
    return reader


_TESTED = f"""\
    value = node.{{name}}
    kind = categories.get(type(value))
    if kind is None:
        kind = category(type(value))
    if kind == {_NODE}:
        found.append(value)
    elif kind == {_SEQUENCE}:
        for item in value:
            kind = categories.get(type(item))
            if kind is None:
                kind = category(type(item))
            if kind == {_NODE}:
                found.append(item)"""


def _always_node(annotation: object) -> bool:
    """Is every value a field so annotated can hold a node the walker visits (a node class that is
    not trivia, or a union of such)?"""
    if isinstance(annotation, type):
        return issubclass(annotation, cst.CSTNode) and not issubclass(annotation, TRIVIA)
    arguments = typing.get_args(annotation)
    unions = (typing.Union, types.UnionType)
    return typing.get_origin(annotation) in unions and all(_always_node(a) for a in arguments)


def walk(
    root: cst.CSTNode,
    enter: Callable[[cst.CSTNode], object],
    leave: Callable[[cst.CSTNode], object],
) -> None:
    """Call `enter` on each node before its children and `leave` after them."""
    # A node entered waits under a `_LEAVE` marker, its children above it: no pair per node.
    stack: list[object] = [root]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        if node is _LEAVE:
            leave(pop())  # type: ignore[arg-type]
            continue
        enter(node)  # type: ignore[arg-type]
        push(node)
        push(_LEAVE)
        extend(reversed(children(node)))  # type: ignore[arg-type]


_LEAVE = object()


def visit(root: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Run a LibCST visitor without rebuilding the tree: `visit_X` returning False skips
    X's children (`leave_X` still runs), as in `root.visit(visitor)`; trivia are not visited."""
    stack: list[object] = [root]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        if node is _LEAVE:
            visitor.on_leave(pop())  # type: ignore[arg-type]
        elif visitor.on_visit(node):  # type: ignore[arg-type]
            push(node)
            push(_LEAVE)
            extend(reversed(children(node)))  # type: ignore[arg-type]
        else:
            visitor.on_leave(node)  # type: ignore[arg-type]


def first(
    root: cst.CSTNode,
    matches: Callable[[cst.CSTNode], object],
    prune: tuple[type[cst.CSTNode], ...] = (),
) -> cst.CSTNode | None:
    """The first node of `root`'s subtree (`root` included), in source order, that `matches`,
    or None. The search stops there. Nodes of a `prune` type are tested, their children are not
    (`prune=(cst.FunctionDef,)` leaves nested functions out)."""
    stack = [root]
    pop, extend = stack.pop, stack.extend
    while stack:
        node = pop()
        if matches(node):
            return node
        if not isinstance(node, prune):
            extend(reversed(children(node)))
    return None


def contains(outer: cst.CSTNode, inner: cst.CSTNode | None) -> bool:
    """Is `inner` `outer` itself or one of its descendants?"""
    return inner is not None and first(outer, lambda node: node is inner) is not None


def calls(root: cst.CSTNode) -> list[cst.Call]:
    """Every call in `root`'s subtree (nested functions included): the searches that ask
    whether some call there deletes, saves to or builds something."""
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call:  # exact type (LibCST's node classes are final): isinstance on ABCs is slow
            found.append(node)
        stack.extend(children(node))
    return found
