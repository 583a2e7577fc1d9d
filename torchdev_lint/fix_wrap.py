"""Calls a fix makes too long for the project's line length, wrapped as black and ruff wrap them.

Where the project sets a line length (`config.configured_line_length`), a fix
whose edited line comes out longer than it, where the original line was not,
wraps the call it edits: `(`, then each argument on a line of its own one
indent deeper with a (magic) trailing comma, then `)` on a line of its own at
the indentation of the line the call starts on (so black and ruff format
keep it so). A call that is an argument of another call on the same line
wraps with it: the outer one is split first (black's right-hand split), then,
if an argument line is still too long, the edited call inside it.

Only where that is black's layout, else the fix is applied unwrapped: not a
call inside an f-string, a subscript, a list, tuple, set or dict display, a
comprehension, parameters or parentheses opened on the same line, nor one
sharing its line with other items of the brackets around it (`f(` / `a, g(x),`
/ `)`: black puts one item per line first), or followed on its line by another
bracket (black would split that one), or ending a chain that ruff lays out one
link per line (`x[i].f().g(...)`); not a call on a line of several statements (`a = f(x); b = 2`) or after a compound statement's colon
(`if x: f(y)`); not a call without arguments or with a bare generator
argument (`f(x for x in y)` allows no trailing comma).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider

from torchdev_lint.positions import LineIndex, Point
from torchdev_lint.rule import Fix

# Nodes that hold brackets of their own: a call among them on its line is not split first by black.
_BRACKETS = (
    cst.Call,
    cst.Subscript,
    cst.List,
    cst.Tuple,
    cst.Set,
    cst.Dict,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
    cst.Parameters,  # a default value: `def f(x=g(y)):` is split at the parameters
)
_STOP = (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Decorator)


def too_long(
    module: cst.Module,
    fixes: Sequence[Fix],
    positions: Mapping[int, tuple[Point, Point]],
    lines: LineIndex,
    limit: int,
) -> list[cst.CSTNode]:
    """The replaced nodes of `fixes` whose line(s) fit in `limit` and whose replacement, as
    estimated from the text around it, does not: the fixes that may need wrapping."""
    found = []
    for fix in fixes:
        for old, new in fix.replacements.items():
            span = positions.get(id(old))
            if span is None:
                continue
            (line, column), (end_line, end_column) = span
            if max(len(lines.line(n)) for n in range(line, end_line + 1)) > limit:
                continue  # already too long: the project does not keep this line to the limit
            first, last = lines.line(line)[:column], lines.line(end_line)[end_column:]
            indent = first[: len(first) - len(first.lstrip())]
            for text in _texts(module, new):
                rows = text.splitlines() or [""]
                if isinstance(new, cst.BaseExpression):
                    rows[0] = first + rows[0]
                    rows[-1] += last
                else:
                    rows = [indent + row for row in rows]
                if max(len(row) for row in rows) > limit:
                    found.append(old)
                    break
    return found


def _texts(module: cst.Module, new: object) -> list[str]:
    if isinstance(new, cst.FlattenSentinel):
        return [module.code_for_node(node) for node in new.nodes]
    return [module.code_for_node(new)] if isinstance(new, cst.CSTNode) else []


def wrap_long_calls(
    fixed: cst.Module, replaced: Iterable[object], original: set[int], limit: int
) -> dict[cst.CSTNode, cst.Call]:
    """Wrapped calls to put in `fixed` in place of the calls they wrap: for the calls fixes made
    (within the nodes `replaced` became; a call whose id is in `original` is one no fix made)
    that come out on a line over `limit`."""
    wrapper = MetadataWrapper(fixed, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    text = LineIndex(fixed.code)
    wrapped: dict[cst.CSTNode, cst.Call] = {}
    for edited in _edited_calls(replaced, original):
        where = positions.get(edited)
        if where is None or where.start.line != where.end.line or len(text.line(where.start.line)) <= limit:
            continue
        found = _splittable(edited, positions, parents)
        if found is None or found[0] in wrapped:
            continue
        outer, path = found
        line = text.line(where.start.line)
        indent = line[: len(line) - len(line.lstrip())]
        layout = _Layout(fixed, _block_indent(outer, parents, fixed), limit, path)
        wrapped[outer] = layout.wrap(outer, indent)
    return wrapped


def _edited_calls(replaced: Iterable[object], original: set[int]) -> list[cst.Call]:
    """The outermost calls in the replacements that a fix made (not kept from the original)."""
    found: list[cst.Call] = []
    stack: list[object] = list(replaced)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.FlattenSentinel):
            stack.extend(node.nodes)
        elif isinstance(node, cst.CSTNode) and id(node) not in original:
            if isinstance(node, cst.Call):
                found.append(node)
            else:
                stack.extend(node.children)
    return found


def _splittable(
    call: cst.Call, positions: Mapping[cst.CSTNode, CodeRange], parents: Mapping[cst.CSTNode, cst.CSTNode]
) -> tuple[cst.Call, set[int]] | None:
    """The call to split for `call` (itself, or the call on the same line it is an argument of),
    with the ids of the calls from that one down to `call`; None where black would split
    elsewhere or the split is not clean (see the module docstring)."""
    line = positions[call].start.line
    outer, path = call, {id(call)}
    while True:
        arg = parents.get(outer)
        holder = parents.get(arg) if isinstance(arg, cst.Arg) else None
        if not isinstance(holder, cst.Call) or not _on_line(positions.get(holder), line):
            break
        outer = holder
        path.add(id(outer))
    if not outer.args or outer.lpar or _fluent(outer) or any(_bare_generator(arg) for arg in outer.args):
        return None
    node: cst.CSTNode = outer
    enclosed = False  # within brackets opened on an earlier line
    while not isinstance(node, _STOP):
        parent = parents.get(node)
        if parent is None or isinstance(parent, (cst.FormattedString, cst.SimpleStatementSuite)):
            return None
        where = positions.get(parent)
        if where is not None and _bracketed(parent):
            if where.start.line == line:
                return None
            if not enclosed and _shares_line(parent, node, positions, line):
                return None  # `f(` / `a, b, g(x),` / `)`: black puts one item per line first
            enclosed = True
        node = parent
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) > 1:
        return None
    end = positions[outer].end
    if _bracket_after(node, positions, end.line, end.column):
        return None
    return outer, path


# What brackets hold: black splits those apart first when another shares the call's line.
_ITEMS = (cst.Arg, cst.BaseElement, cst.BaseDictElement, cst.Param, cst.SubscriptElement, cst.CompFor)


def _shares_line(
    brackets: cst.CSTNode, branch: cst.CSTNode, positions: Mapping[cst.CSTNode, CodeRange], line: int
) -> bool:
    """Whether an item of `brackets` other than `branch` (the one holding the call) lies on `line`."""
    for child in brackets.children:
        where = positions.get(child)
        if child is not branch and isinstance(child, _ITEMS) and where is not None:
            if where.start.line <= line <= where.end.line:
                return True
    return False


def _bracketed(node: cst.CSTNode) -> bool:
    """Whether the node opens a bracket of its own or is parenthesized."""
    if isinstance(node, _BRACKETS):
        return True
    lpar = getattr(node, "lpar", None)
    return isinstance(lpar, cst.LeftParen) or (isinstance(lpar, (list, tuple)) and bool(lpar))


def _fluent(call: cst.Call) -> bool:
    """Whether the call ends a chain that ruff lays out one link per line (fluent style): two or
    more attributes taken of a call or subscript (`x[i].f().g(...)`, not `x.f().g(...)`)."""
    links = 0
    node: cst.BaseExpression = call.func
    while isinstance(node, (cst.Attribute, cst.Call, cst.Subscript)):
        if isinstance(node, cst.Attribute):
            links += isinstance(node.value, (cst.Call, cst.Subscript))
            node = node.value
        else:
            node = node.func if isinstance(node, cst.Call) else node.value
    return links >= 2


def _on_line(where: CodeRange | None, line: int) -> bool:
    return where is not None and where.start.line == line == where.end.line


def _bare_generator(arg: cst.Arg) -> bool:
    return isinstance(arg.value, cst.GeneratorExp) and not arg.value.lpar


def _bracket_after(
    statement: cst.CSTNode, positions: Mapping[cst.CSTNode, CodeRange], line: int, column: int
) -> bool:
    """Whether a bracket opens on `line` at or after `column` within the statement."""
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        where = positions.get(node)
        if where is None or where.end.line < line or where.start.line > line:
            continue
        if where.start.line == line and where.start.column >= column and _bracketed(node):
            return True
        if isinstance(node, cst.IndentedBlock):
            continue
        stack.extend(node.children)
    return False


def _block_indent(node: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode], module: cst.Module) -> str:
    """The indentation of the block holding `node`, as LibCST writes it before each of its lines."""
    parts: list[str] = []
    current: cst.CSTNode | None = parents.get(node)
    while current is not None:
        if isinstance(current, cst.IndentedBlock):
            parts.append(current.indent if current.indent is not None else module.default_indent)
        current = parents.get(current)
    return "".join(reversed(parts))


class _Layout:
    """Writes a call one argument per line, given the indentation of its first line."""

    def __init__(self, module: cst.Module, block: str, limit: int, path: set[int]) -> None:
        self.module = module
        self.block = block
        self.limit = limit
        self.path = path  # the calls that lead to the edited one: split again if still too long

    def wrap(self, call: cst.Call, indent: str) -> cst.Call:
        inner = indent + self.module.default_indent
        args = []
        for index, arg in enumerate(call.args):
            arg = arg.with_changes(
                comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace("")
            )
            value = arg.value
            if (
                isinstance(value, cst.Call)
                and id(value) in self.path
                and value.args
                and not value.lpar
                and not _fluent(value)
                and len(inner) + len(self.module.code_for_node(arg)) + 1 > self.limit
                and not any(_bare_generator(a) for a in value.args)
            ):
                arg = arg.with_changes(value=self.wrap(value, inner))
            after = indent if index == len(call.args) - 1 else inner
            args.append(arg.with_changes(comma=cst.Comma(whitespace_after=self._break(after))))
        return call.with_changes(whitespace_before_args=self._break(inner), args=args)

    def _break(self, indent: str) -> cst.ParenthesizedWhitespace:
        """A line break to `indent`, relative to the block's indentation as the parser writes it."""
        relative = indent.startswith(self.block)
        rest = indent[len(self.block) :] if relative else indent
        return cst.ParenthesizedWhitespace(indent=relative, last_line=cst.SimpleWhitespace(rest))
