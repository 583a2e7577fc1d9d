"""Source positions of nodes, computed by one lean code-generation pass.

LibCST's PositionProvider builds a CodeRange object per node through a
contextmanager per statement and expression; that dominated the cost of
checking files with findings. This pass records plain tuples, with a small
class-based context manager, and gives the same syntactic positions
(verified against PositionProvider in the tests). When CPython's `ast` of the
same text is at hand, `statement_spans` generates only the top-level
statements that hold the wanted nodes, each started at the line `ast` gives
it: a finding in a 20,000-line file no longer costs generating all of it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState

from torchdev_lint.analysis.syntax.walk import children

Point = tuple[int, int]  # (1-based line, 0-based column), as LibCST's CodePosition


class _SyntacticSpan:
    """Replaces PositionProvider's contextmanager: a node's span without leading lines and decorators."""

    __slots__ = ("state", "key", "start_node", "end_node", "start")

    def __init__(
        self, state: _PositionState, node: cst.CSTNode, start_node: object, end_node: object
    ) -> None:
        self.state = state
        self.key = id(node)
        self.start_node = start_node
        self.end_node = end_node
        self.start: Point = (0, 0)

    def __enter__(self) -> None:
        self.start = (self.state.line, self.state.column)

    def __exit__(self, *exc_info: object) -> None:
        spans = self.state.spans
        start = spans[id(self.start_node)][0] if self.start_node is not None else self.start
        end = (
            spans[id(self.end_node)][1] if self.end_node is not None else (self.state.line, self.state.column)
        )
        spans[self.key] = (start, end)


@dataclass
class _PositionState(CodegenState):
    line: int = 1
    column: int = 0
    spans: dict[int, tuple[Point, Point]] = field(default_factory=dict)
    stack: list[Point] = field(default_factory=list)

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        for token in self.indent_tokens:
            self._advance(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self._advance(value)

    def _advance(self, value: str) -> None:
        if "\n" not in value and "\r" not in value:
            self.column += len(value)
            return
        lines = value.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.line += len(lines) - 1
        self.column = len(lines[-1])

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.stack.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.stack.pop()
        key = id(node)
        if key not in self.spans:
            self.spans[key] = (start, (self.line, self.column))

    def record_syntactic_position(  # type: ignore[override]
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> _SyntacticSpan:
        return _SyntacticSpan(self, node, start_node, end_node)


def spans_and_code(
    module: cst.Module, nodes: Iterable[cst.CSTNode]
) -> tuple[dict[int, tuple[Point, Point]], str]:
    """The nodes' spans (by id, as PositionProvider would report them) and the module's code, from one
    code-generation pass (not two)."""
    state = _PositionState(default_indent=module.default_indent, default_newline=module.default_newline)
    module._codegen(state)
    return {id(node): state.spans[id(node)] for node in nodes}, "".join(state.tokens)


def statement_spans(
    module: cst.Module, tree: ast.Module, nodes: Collection[cst.CSTNode], hints: Collection[cst.CSTNode] = ()
) -> dict[int, tuple[Point, Point]] | None:
    """The spans `spans_and_code` gives, from generating only the statements that hold `nodes`.

    `tree` is CPython's `ast` of the text `module` was parsed from: its line
    and column numbers place each generated statement. Classes and functions
    whose header holds none of the nodes are not generated whole: only the
    statements of their body that hold nodes are, at their block's
    indentation. `hints` are statements, at any depth, likely to hold the
    nodes (searched first in their body). None when that cannot be done exactly: a node outside
    every statement (the module itself, its header), trees that do not match,
    or a statement whose generated start disagrees with `ast` (then generate
    the whole module instead).
    """
    spans: dict[int, tuple[Point, Point]] = {}
    place = _Placer(module, spans)
    wanted = {id(node) for node in nodes}
    if not place.body(module.body, tree.body, [], wanted, hints):
        return None
    return {id(node): spans[id(node)] for node in nodes}


class _Placer:
    """Generates the statements holding wanted nodes, descending into class and function bodies."""

    def __init__(self, module: cst.Module, spans: dict[int, tuple[Point, Point]]) -> None:
        self.module = module
        self.spans = spans

    def body(
        self,
        statements: Sequence[cst.BaseStatement],
        tree: Sequence[ast.stmt],
        indents: list[str],
        wanted: set[int],
        hints: Iterable[cst.CSTNode] = (),
    ) -> bool:
        """Place every node of `wanted` found in `statements` (whose `ast` is `tree`); whether all were."""
        starts = _starts(statements, tree)
        if starts is None:
            return False
        missing = set(wanted)
        index = {id(statement): number for number, statement in enumerate(statements)}
        hinted = [index[id(hint)] for hint in hints if id(hint) in index]
        for number in dict.fromkeys([*hinted, *range(len(statements))]):
            if not missing:
                break
            statement = statements[number]
            found = _take(statement, missing)
            if found and not self._inside(statement, starts[number][1], indents, found, hints):
                if not self._generate(statement, starts[number][0], indents):
                    return False
        return not missing

    def _inside(
        self,
        statement: cst.BaseStatement,
        tree: ast.stmt,
        indents: list[str],
        found: set[int],
        hints: Iterable[cst.CSTNode] = (),
    ) -> bool:
        """Place `found` by generating only statements of a class or function body; whether done
        (not when some are in the header: decorators, name, parameters, bases)."""
        block = getattr(statement, "body", None)
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or not isinstance(
            block, cst.IndentedBlock
        ):
            return False
        inner_tree = getattr(tree, "body", None)
        if not isinstance(inner_tree, list):
            return False
        indent = self.module.default_indent if block.indent is None else block.indent
        return self.body(block.body, inner_tree, [*indents, indent], found, hints)

    def _generate(self, statement: cst.BaseStatement, start: Point, indents: list[str]) -> bool:
        """Generate one statement whose anchor (see `_anchor`) starts at `start`; whether it did."""
        anchor, lines_before = _anchor(statement)
        module = self.module
        state = _PositionState(default_indent=module.default_indent, default_newline=module.default_newline)
        state.indent_tokens = list(indents)
        state.line = start[0] - lines_before
        statement._codegen(state)
        if state.spans[id(anchor)][0] != start:
            return False  # `ast` counted lines or columns differently here
        self.spans.update(state.spans)
        return True


def _starts(
    statements: Sequence[cst.BaseStatement], tree: Sequence[ast.stmt]
) -> list[tuple[Point, ast.stmt]] | None:
    """Where each statement's anchor (see `_anchor`) starts by `ast`, with the statement's `ast`."""
    starts = []
    position = 0
    for statement in statements:
        if position >= len(tree):
            return None
        first = tree[position]
        decorators = getattr(first, "decorator_list", None)
        anchor = decorators[0] if decorators else first
        starts.append(((anchor.lineno, anchor.col_offset), first))
        position += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return starts if position == len(tree) else None


def _anchor(statement: cst.BaseStatement) -> tuple[cst.CSTNode, int]:
    """The node of a statement whose start `ast` knows (its first decorator's expression, its
    first small statement, or itself), and how many lines code generation emits before it (the
    statement's leading blank and comment lines, then the decorator's). The anchor's generated
    start is checked against `ast`'s: a line continuation before it (`@ \\`), or a column `ast`
    counts in bytes (non-ASCII before it on its line), makes them differ, and the caller falls
    back to the whole module."""
    if isinstance(statement, cst.SimpleStatementLine):
        return statement.body[0], len(statement.leading_lines)
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.decorators:
        first = statement.decorators[0]
        return first.decorator, len(statement.leading_lines) + len(first.leading_lines)
    assert isinstance(statement, cst.BaseCompoundStatement)  # the only other kind of statement
    return statement, len(statement.leading_lines)


def _take(root: cst.CSTNode, missing: set[int]) -> set[int]:
    """Remove from `missing` the ids of nodes in `root`'s subtree, and return them."""
    found = set()
    stack = [root]
    while stack and missing:
        node = stack.pop()
        if id(node) in missing:
            missing.discard(id(node))
            found.add(id(node))
        stack.extend(children(node))
    return found


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class LineIndex:
    """Python's own notion of lines (breaks are `\\n`, `\\r\\n` and `\\r` only), shared by
    positions, fix edits and `# noqa`, so that a form feed or U+2028 inside a line,
    or a CR-only file, cannot put them on different lines.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [match.end() for match in _LINE_BREAK.finditer(text)]

    def line(self, number: int) -> str:
        """The text of 1-based line `number`, without its line break ("" past the end)."""
        if not 1 <= number <= len(self.starts):
            return ""
        start = self.starts[number - 1]
        end = self.starts[number] if number < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, point: Point) -> int:
        """The string offset of a (1-based line, 0-based column) point."""
        return self.starts[point[0] - 1] + point[1]

    def point(self, offset: int) -> Point:
        """The (1-based line, 0-based column) point of a string offset."""
        low, high = 0, len(self.starts) - 1
        while low < high:  # the last line start at or before `offset`
            middle = (low + high + 1) // 2
            if self.starts[middle] <= offset:
                low = middle
            else:
                high = middle - 1
        return low + 1, offset - self.starts[low]
