"""Parse a file once and run every selected rule in one traversal.

The engine knows no rule by name: it dispatches `visit_<Node>`/`leave_<Node>`
methods, keeps the scope stack that name resolution needs, and turns what
rules report into diagnostics. Positions are computed only for files that
have findings, since LibCST's position metadata costs a second pass.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple, cast

import libcst as cst

from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.analysis.syntax.quotes import QuoteStyle
from torchdev_lint.analysis.syntax.reachability import dead_after
from torchdev_lint.analysis.syntax.scopes import (
    Scope,
    collect_bindings,
    collect_comprehension_bindings,
    collect_function_bindings,
    dotted_name,
    resolve,
)
from torchdev_lint.analysis.syntax.walk import children
from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import Diagnostic, FixInfo, SourceError
from torchdev_lint.noqa import Directives
from torchdev_lint.positions import LineIndex, Point, spans_and_code, statement_spans
from torchdev_lint.rule import Fix, Rule

Handler = Callable[[cst.CSTNode], object]


@dataclass
class Finding:
    """A rule's report before positions are known."""

    rule: type[Rule]
    node: cst.CSTNode
    message: str
    fix: Fix | None
    # Nodes around it, outermost first: where `_locate` looks first. Those being traversed when
    # it was reported, or, for a call reported later (from `leave_scope`), those around the call.
    path: tuple[cst.CSTNode, ...] = ()


class Original(NamedTuple):
    """The text a module was parsed from and CPython's `ast` of it: with them, positions are
    generated for only the statements that hold findings (see `positions.statement_spans`)."""

    text: str
    tree: ast.Module


@dataclass
class FileResult:
    """Everything one check of one file produced."""

    path: str
    module: cst.Module | None
    findings: list[Finding] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # Spans of reported and fix-replaced nodes, by node id: ((line, col), (end_line, end_col)).
    positions: Mapping[int, tuple[Point, Point]] = field(default_factory=dict)
    # The module's lines, when it has findings (for code frames and noqa).
    lines: LineIndex | None = None
    # What the check knew from other files of the project (re-checks after fixes reuse it).
    project: FileFacts | None = None
    # The settings it was checked with (fix edits are tidied to their line length).
    settings: Settings | None = None

    @property
    def reported(self) -> list[Diagnostic]:
        """Diagnostics that no `# noqa` suppresses."""
        return [d for d in self.diagnostics if not d.suppressed]


class FileContext:
    """What rules see of the file being checked: names, scopes, ancestors, reporting."""

    def __init__(
        self,
        path: str,
        module: cst.Module,
        settings: Settings,
        project: FileFacts | None = None,
        *,
        fixes: bool = True,
    ) -> None:
        self.path = path
        self.module = module
        self.settings = settings
        # Facts from other files of the project (analysis/project/project_facts.py); None: this file alone.
        self.project = project
        # False: findings only (the flake8 plugin shows no fix). Then `string` gives no literal and
        # `report` drops fixes, so what only a fix needs (a module's quote style, a free name)
        # is never computed; findings are the same, since no rule reports depending on its fix.
        self.fixes = fixes
        self.ancestors: list[cst.CSTNode] = []
        self.scope: Scope = Scope(module, "module", None)
        self.findings: list[Finding] = []
        self._quotes: QuoteStyle | None = None
        # id of each call traversed -> its ancestors (a finding's `path`, see `report`).
        self._call_paths: dict[int, tuple[cst.CSTNode, ...]] = {}
        # Statements after one that always leaves their block: what is found there is not reported.
        self.dead: list[cst.CSTNode] = []

    def string(self, value: str, at: cst.CSTNode) -> cst.SimpleString | None:
        """A string literal for a fix replacing `at`: legal there, in the file's quote style.

        None when no quote character is legal there (an f-string nested in both kinds), and
        when no fix is built (`fixes` False).
        """
        if not self.fixes:
            return None
        if self._quotes is None:
            self._quotes = QuoteStyle(self.module)
        return self._quotes.literal(value, at)

    def qualname(self, node: cst.BaseExpression) -> str | None:
        """Fully qualified name of `node` as seen from the current scope."""
        return resolve(node, self.scope)

    def parent(self, depth: int = 1) -> cst.CSTNode | None:
        """The ancestor `depth` levels above the node being visited."""
        index = len(self.ancestors) - 1 - depth
        return self.ancestors[index] if index >= 0 else None

    def report(self, rule: Rule, node: cst.CSTNode, message: str, fix: Fix | None) -> None:
        path = self._call_paths.get(id(node)) or tuple(self.ancestors)
        self.findings.append(Finding(type(rule), node, message, fix if self.fixes else None, path))

    def code_for(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # Scope bookkeeping, driven by the dispatcher before rules see a node (see `_OPENS`); the
    # dispatcher also keeps `ancestors` and restores the scope a node opened when it is left.
    def _open_function(self, node: cst.FunctionDef | cst.Lambda) -> None:
        self.scope = Scope(node, "function" if type(node) is cst.FunctionDef else "lambda", self.scope)
        collect_function_bindings(self.scope, node)

    def _open_class(self, node: cst.ClassDef) -> None:
        self.scope = Scope(node, "class", self.scope)
        collect_bindings(self.scope, node.body.body)

    def _open_comprehension(self, node: cst.ListComp | cst.SetComp | cst.DictComp | cst.GeneratorExp) -> None:
        self.scope = Scope(node, "comprehension", self.scope)
        collect_comprehension_bindings(self.scope, node)

    def _open_module(self, node: cst.Module) -> None:
        collect_bindings(self.scope, node.body)

    def _note_exit(self, node: cst.BaseSmallStatement) -> None:
        self.dead += dead_after(node, self.ancestors)

    def _record_call(self, node: cst.Call) -> None:
        self._call_paths[id(node)] = tuple(self.ancestors)
        func = node.func
        owner = self.scope.owner
        if isinstance(func, cst.Attribute):
            key = dotted_name(func.value)
            if key is not None:
                owner.method_calls[key].append((func.attr.value, node))
        elif isinstance(func, cst.Name):
            owner.calls[func.value].append(node)


# What entering a node of each type does to the context besides recording it as an ancestor.
_OPENS: dict[type, Callable[[FileContext, Any], None]] = {
    cst.Call: FileContext._record_call,
    cst.FunctionDef: FileContext._open_function,
    cst.Lambda: FileContext._open_function,
    cst.ClassDef: FileContext._open_class,
    cst.ListComp: FileContext._open_comprehension,
    cst.SetComp: FileContext._open_comprehension,
    cst.DictComp: FileContext._open_comprehension,
    cst.GeneratorExp: FileContext._open_comprehension,
    cst.Module: FileContext._open_module,
    **dict.fromkeys(
        (cst.Return, cst.Raise, cst.Break, cst.Continue, cst.Assert, cst.Expr), FileContext._note_exit
    ),
}


class _Dispatcher:
    """Calls every rule's handlers for a node; one traversal serves them all.

    Handler return values are ignored (children are always visited), and
    trivia nodes (whitespace, comments, punctuation, operators) are not
    visited; see `analysis.syntax.walk`. A rule's `leave_scope(scope)` runs when a
    module, class or function body has been traversed, while that scope is
    still current: the place to judge facts that need all of a scope's uses.
    """

    def __init__(self, ctx: FileContext, rules: Sequence[Rule]) -> None:
        self.ctx = ctx
        visits: dict[type, list[Handler]] = defaultdict(list)
        leaves: dict[type, list[Handler]] = defaultdict(list)
        self.scope_leaves = [
            rule.leave_scope for rule in rules if type(rule).leave_scope is not Rule.leave_scope
        ]
        for rule in rules:
            for attr in dir(type(rule)):
                prefix, _, node_name = attr.partition("_")
                table = {"visit": visits, "leave": leaves}.get(prefix)
                if table is not None and node_name and hasattr(cst, node_name):
                    table[getattr(cst, node_name)].append(getattr(rule, attr))
        self.visits = dict(visits)
        self.leaves = dict(leaves)

    def run(self, root: cst.Module) -> None:
        """`analysis.syntax.walk.walk` over `root` with the dispatch written into its loop: per node, a
        table lookup on entry and one on exit instead of four calls (into the dispatcher and
        into the context, each way), which cost a fifth of a check with the default rules."""
        ctx = self.ctx
        ancestors = ctx.ancestors
        visits, leaves, scope_leaves = self.visits.get, self.leaves.get, self.scope_leaves
        opening = _OPENS.get
        stack: list[Any] = [root]
        pop, push, extend = stack.pop, stack.append, stack.extend
        while stack:
            node = pop()
            if node is _LEAVE:
                node = pop()
            else:
                ancestors.append(node)
                opens = opening(type(node))  # most nodes open nothing
                if opens is not None:
                    opens(ctx, node)
                handlers = visits(type(node))
                if handlers is not None:
                    for handler in handlers:
                        handler(node)
                below = children(node)
                if below:
                    push(node)
                    push(_LEAVE)
                    extend(reversed(below))
                    continue
                # A leaf (a name, a literal: half the nodes) is left at once, not stacked.
            handlers = leaves(type(node))
            if handlers is not None:
                for handler in handlers:
                    handler(node)
            scope = ctx.scope
            if node is scope.node:
                if scope.kind in _JUDGED_SCOPES:
                    for scope_handler in scope_leaves:
                        scope_handler(scope)
                if scope.parent is not None:
                    ctx.scope = scope.parent
            ancestors.pop()


_LEAVE = object()  # on the stack under the children of a node entered: leave it then
_JUDGED_SCOPES = frozenset({"module", "class", "function"})


def parse(path: str, source: bytes | str, python_tree: ast.Module | None = None) -> cst.Module:
    """Parse with LibCST, turning every failure into a one-line SourceError (`python_tree`:
    CPython's tree of `source` when the caller has it, see `_parse`)."""
    return _parse(path, source, python_tree)[0]


def parse_with_python_tree(path: str, source: bytes | str) -> tuple[cst.Module, ast.Module | None]:
    """`parse`, with CPython's tree it made on the way: a check given both (`check_source`'s
    `module` and `python_tree`) places its findings without generating the whole module's code."""
    return _parse(path, source, None)


def _parse(
    path: str, source: bytes | str, tree: ast.Module | None = None
) -> tuple[cst.Module, ast.Module | None]:
    """LibCST's tree and CPython's (None when CPython's parser refuses the text); `tree`, when
    given, is CPython's tree of `source`, already built by the caller."""
    if ("\x00" in source) if isinstance(source, str) else (b"\x00" in source):
        raise SourceError(path, "source contains a NUL byte")
    if tree is None:
        tree = _python_tree(path, source)
    try:
        with _unvalidated_nodes():
            return cst.parse_module(source), tree
    except cst.ParserSyntaxError as error:
        raise SourceError(path, _syntax_error(source, error)) from None
    except (UnicodeDecodeError, LookupError, SyntaxError) as error:
        raise SourceError(path, f"cannot decode: {error}") from None
    except RecursionError:
        raise SourceError(path, "too deeply nested for the parser") from None


# LibCST validates every node as it is built (`CSTNode.__post_init__`), also the nodes its parser
# builds from the source, which are valid by construction: a tenth of a cold check's CPU. Its
# own comment there notes validating a parsed tree is avoidable.
_VALIDATE = cst.CSTNode.__post_init__


def _skip_validation(node: cst.CSTNode) -> None:
    """No check of a node the parser built."""


@contextmanager
def _unvalidated_nodes() -> Iterator[None]:
    """Nodes built meanwhile are not validated (the parser's). The validation is put back as
    LibCST defines it, never as found: an overlapping parse in another thread then only
    validates the rest of its nodes, and nodes built after both stay validated."""
    cst.CSTNode.__post_init__ = _skip_validation  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        cst.CSTNode.__post_init__ = _VALIDATE  # type: ignore[method-assign]


def _python_tree(path: str, source: bytes | str) -> ast.Module | None:
    """CPython's tree of the source, refusing nesting that would crash LibCST's parser.

    LibCST's native parser recurses on the machine stack and kills the whole
    process (SIGSEGV) a few thousand levels deep (`((((...))))`, `- - - 1`,
    `a.b.b.b...`); CPython's parser detects such depth cleanly and is much
    faster. Other syntax errors are left to LibCST to report (None here).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to report
            tree = compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
            return cast(ast.Module, tree)  # mode "exec" makes a Module
    except SyntaxError as error:
        if "too many nested" in str(error.msg):
            raise SourceError(path, f"too deeply nested to parse: {error.msg}") from None
    except (RecursionError, MemoryError):
        raise SourceError(path, "too deeply nested to parse (Python's parser gives up too)") from None
    except ValueError:
        pass
    return None


def _original(source: bytes | str, module: cst.Module, tree: ast.Module | None) -> Original | None:
    """The text and `ast` that place partially generated positions, when they agree with LibCST's
    code: not where LibCST drops characters (form feeds, a final lone CR) or a BOM is in the text."""
    if tree is None:
        return None
    try:
        text = source if isinstance(source, str) else source.decode(module.encoding)
    except (UnicodeDecodeError, LookupError):
        return None
    if "\x0c" in text or text.endswith("\r") or text.startswith("\ufeff"):
        return None
    return Original(text, tree)


def _syntax_error(source: bytes | str, error: cst.ParserSyntaxError) -> str:
    """One line saying where and why: Python's own message when it has one (clearer than LibCST's)."""
    try:
        compile(source, "<source>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as python:
        if python.lineno is not None:
            return f"syntax error at line {python.lineno}, column {python.offset or 1}: {python.msg}"
    except (ValueError, RecursionError, MemoryError):
        pass
    detail = error.message.removeprefix("parser error: ").splitlines()[0] if error.message else ""
    return (
        f"syntax error at line {error.raw_line}, column {error.raw_column + 1}: {detail or 'invalid syntax'}"
    )


def could_match(source: bytes | str, rules: Sequence[type[Rule]]) -> bool:
    """Cheap text filter: can any selected rule fire in this file at all?"""
    return any(_triggered(source, rule) for rule in rules)


def matching_rules(
    source: bytes | str, rules: Sequence[type[Rule]], project: FileFacts | None = None
) -> list[type[Rule]]:
    """The rules that can fire in this text: one of their `triggers` occurs in it, or the file's
    project facts hold one of their `fact_triggers`. A rule left out would find nothing: most
    files name few of the APIs the rules look for (no `DataLoader`, no `pin_memory`)."""
    return [
        rule
        for rule in rules
        if _triggered(source, rule)
        or (project is not None and any(getattr(project, fact) for fact in rule.fact_triggers))
    ]


def _triggered(source: bytes | str, rule: type[Rule]) -> bool:
    """Does one of the rule's triggers occur in the text, however spaced (`x.to (d)`)?"""
    if isinstance(source, str):
        if any(trigger in source for trigger in rule.triggers):
            return True
    elif any(trigger.encode() in source for trigger in rule.triggers):
        return True
    for trigger in rule.triggers:
        pattern = _spaced(trigger, bytes if isinstance(source, bytes) else str)
        if pattern is not None and pattern.search(source) is not None:
            return True
    return False


@cache
def _spaced(trigger: str, kind: type) -> re.Pattern[Any] | None:
    """The trigger with the spacing Python allows between its tokens (`x. to (d)`, a backslash
    continuation), for the text that lacks it as written; None for a single name, which has no
    other spelling. A miss costs a millisecond on a 1.4 MB file."""
    tokens = re.findall(r"\w+|[^\w\s]", trigger)
    if len(tokens) < 2:
        return None
    pattern = r"[\s\\]*".join(re.escape(token) for token in tokens)
    return re.compile(pattern.encode() if kind is bytes else pattern)


def check_source(
    path: str,
    source: bytes | str,
    rules: Sequence[type[Rule]],
    settings: Settings | None = None,
    *,
    skip_filter: bool = True,
    project: FileFacts | None = None,
    python_tree: ast.Module | None = None,
    module: cst.Module | None = None,
    fixes: bool = True,
) -> FileResult:
    """Check one file's bytes; raises SourceError when it cannot be parsed.

    Fixes are reported with their safety and message but no text edits:
    `fixes.add_edits` computes those for the callers that show them.
    `python_tree` is CPython's `ast` of `source` when the caller has it
    (flake8 does): it is not built again; nor is `module`, LibCST's tree of
    `source` made by `parse` (the flake8 plugin's pass 1 may have parsed it).
    `fixes=False` reports the same findings without fixes (see `FileContext.fixes`).
    `skip_filter` runs only the rules that can fire in the text (`matching_rules`); a file where
    none can is not parsed, unless it has project facts (a parse error is reported there as before).
    """
    if skip_filter:
        rules = matching_rules(source, rules, project)
        if not rules and project is None:
            return FileResult(path, None, project=project)
    if module is not None:
        tree = python_tree
    else:
        module, tree = _parse(path, source, python_tree)
    original = _original(source, module, tree)
    return check_module(
        path, module, rules, settings or Settings(), project=project, original=original, fixes=fixes
    )


def check_module(
    path: str,
    module: cst.Module,
    rules: Sequence[type[Rule]],
    settings: Settings,
    *,
    project: FileFacts | None = None,
    original: Original | None = None,
    fixes: bool = True,
) -> FileResult:
    """Check a parsed module; with its `original` text and `ast`, positions cost less."""
    ctx = FileContext(path, module, settings, project, fixes=fixes)
    instances = [rule(ctx) for rule in rules]
    dispatcher = _Dispatcher(ctx, instances)
    result = FileResult(path, module, ctx.findings, project=project, settings=settings)
    if not instances:
        return result
    try:
        dispatcher.run(module)
        if ctx.findings:
            _locate(result, original, ctx.dead)  # positions: LibCST code generation recurses
    except RecursionError:
        raise SourceError(path, "too deeply nested to analyse") from None
    return result


def _locate(result: FileResult, original: Original | None, dead: Sequence[cst.CSTNode] = ()) -> None:
    """Give each finding its position and noqa status (and keep the spans of the nodes fixes replace);
    drop the findings in `dead` statements."""
    assert result.module is not None
    module = result.module
    wanted = [f.node for f in result.findings] + list(dead)
    wanted += [old for f in result.findings if f.fix is not None for old in f.fix.replacements]
    spans = None
    if original is not None:
        hints = [around for f in result.findings for around in f.path]
        spans = statement_spans(module, original.tree, wanted, hints)
    if original is not None and spans is not None:
        positions = spans
        lines = result.lines = LineIndex(original.text)
    else:
        positions, code = spans_and_code(module, wanted)
        lines = result.lines = LineIndex(code)
    result.positions = positions
    directives = Directives(lines)
    dead_spans = [positions[id(statement)] for statement in dead]
    unique: dict[tuple[str, int, int], Finding] = {}
    for finding in result.findings:
        start, _ = positions[id(finding.node)]
        if not any(begin <= start < end for begin, end in dead_spans):
            unique.setdefault((finding.rule.code, *start), finding)
    result.findings = sorted(unique.values(), key=lambda f: (positions[id(f.node)][0], f.rule.code))
    for finding in result.findings:
        (line, column), (end_line, end_column) = positions[id(finding.node)]
        fix_info = None if finding.fix is None else FixInfo(finding.fix.safety, finding.fix.reported_message)
        result.diagnostics.append(
            Diagnostic(
                path=result.path,
                line=line,
                column=column + 1,
                end_line=end_line,
                end_column=end_column + 1,
                code=finding.rule.code,
                name=finding.rule.name,
                message=finding.message,
                fix=fix_info,
                suppressed=directives.suppresses(line, finding.rule.code),
            )
        )
