"""What every fix run must guarantee, checked on one file: used by the fuzz tests and the corpus script.

A fix run (all rules, unsafe fixes included) must give source that still
compiles, also on the oldest Python the tool supports (3.10), that keeps every
comment, that a second run leaves unchanged, and that differs from the input
only where a fix was reported, and that has no line with trailing whitespace
that the input did not have. The fixer's own guard refuses fixes that would
break the first two; a refusal is a problem too (a rule wrote bad code: the
guard must never be what keeps a file intact). "Where" is checked per line and per fix round
(a fix may give rise to a finding in the next round): every line a round
changed or deleted must lie in a statement holding a finding with a fix in the
text that round started from, or in an import statement (the fixer removes the
imports whose last use a fix removed, and a block left empty gets `pass`), and
every line it inserted elsewhere must be an import, `pass`, or the very
expression of a fixed finding (a move hoisted out of a loop).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import FileResult, check_source
from torchdev_lint.fixes import MAX_ROUNDS, fix_source
from torchdev_lint.grammar import OLDEST_PYTHON, Survey, guard_problem
from torchdev_lint.rule import Rule

_IMPORT = re.compile(r"(import [\w.]+( as \w+)?|from [\w.]+ import [\w, ()]+)$")
# The one device variable TDL301's fix defines after the imports, for every use it rewrites.
_DEVICE_DEFINITION = re.compile(r"\w+ = \w+\.device\(.*\bis_available\(\).*\)$")


@dataclass
class Outcome:
    """What checking and fixing one file showed."""

    parsed: bool = True
    findings: dict[str, int] = field(default_factory=dict)
    fixed: bytes | None = None  # the fixed source, when the fixer changed something
    problems: list[str] = field(default_factory=list)
    rounds: int = 0  # fix rounds that changed something; above 1, fixes gave rise to new findings
    follow_ups: int = 0  # fixes applied to findings that other fixes gave rise to
    refused: str | None = None  # why the fixer refused to fix the file, if it did


def check_fix_properties(
    path: str, source: bytes, rules: Sequence[type[Rule]], settings: Settings | None = None
) -> Outcome:
    """Check, fix (unsafe included), re-fix, and compare; exceptions other than SourceError propagate."""
    settings = settings or Settings()
    outcome = Outcome()
    try:
        result = check_source(path, source, rules, settings)
    except SourceError:
        outcome.parsed = False
        return outcome
    for diagnostic in result.reported:
        outcome.findings[diagnostic.code] = outcome.findings.get(diagnostic.code, 0) + 1
    if all(finding.fix is None for finding in result.findings):
        return outcome  # nothing to fix: fix_source would return the source as it is
    try:
        first = fix_source(path, source, rules, settings, unsafe=True)
    except SourceError as error:  # a clean refusal (e.g. LibCST cannot reproduce the file)
        outcome.refused = error.reason
        return outcome
    for diagnostic, reason in zip(first.result.diagnostics, first.not_applied, strict=True):
        if reason is not None and not reason.startswith("conflicts with"):
            where = f"{diagnostic.code} fix at {diagnostic.line}:{diagnostic.column}"
            outcome.problems.append(f"refused {where} (by the fixer's guard): {reason}")
    if first.source == source:
        return outcome
    outcome.fixed = first.source
    outcome.follow_ups = first.follow_ups
    try:
        compile(first.source, path, "exec", dont_inherit=True)
    except SyntaxError as error:
        if _compiles(source, path):
            outcome.problems.append(f"fixed source does not compile: {error}")
            return outcome
    outcome.problems.extend(_broken(result.module, first.source))
    outcome.problems.extend(trailing_whitespace(source, first.source))
    second = fix_source(path, first.source, rules, settings, unsafe=True)
    if second.source != first.source:
        outcome.problems.append("not idempotent:\n" + _diff(first.source, second.source))
    # Round by round, each change must sit where a finding of the text it was applied to is:
    # a fix may give rise to a new finding (pinning a loader makes its copies blocking).
    text = source
    for _ in range(MAX_ROUNDS):
        step = fix_source(path, text, rules, settings, unsafe=True, max_rounds=1)
        if step.source == text:
            break
        outcome.rounds += 1
        round_result = check_source(path, text, rules, settings)
        outcome.problems.extend(outside_findings(round_result, text, step.source))
        text = step.source
    if text != first.source:
        outcome.problems.append("rounds one by one end elsewhere:\n" + _diff(first.source, text))
    return outcome


def trailing_whitespace(before: bytes, after: bytes) -> list[str]:
    """Lines of `after` ending in whitespace that no line of `before` with the same text had (a
    line moved to another indentation keeps its own)."""

    def ending_in_space(text: bytes) -> Counter[str]:
        return Counter(line.strip() for line in _lines(text) if line.rstrip("\r\n") != line.rstrip())

    new = ending_in_space(after) - ending_in_space(before)
    return [f"trailing whitespace after the fix: {line!r}" for line in sorted(new)]


def _broken(original: cst.Module | None, fixed: bytes) -> list[str]:
    """Checked apart from the fixer's guard: lost comments, grammar newer than the oldest Python."""
    if original is None:
        return []
    try:
        problem = guard_problem(Survey(original, OLDEST_PYTHON), cst.parse_module(fixed), OLDEST_PYTHON)
    except cst.ParserSyntaxError as error:
        return [f"oldest-grammar failure: LibCST cannot parse the fixed code: {error.message}"]
    if problem is None:
        return []
    if "comment" in problem:
        return [f"lost comment: {problem}"]
    return [f"oldest-grammar failure: {problem}"]


def _compiles(source: bytes, path: str) -> bool:
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _diff(before: bytes, after: bytes) -> str:
    old = before.decode("utf-8", "replace").splitlines(keepends=True)
    new = after.decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, n=1))


def _lines(source: bytes) -> list[str]:
    """Lines as Python and LibCST count them: ended by LF, CRLF or CR only (not form feeds & co.)."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", source.decode("utf-8", "replace"))


def _squash(text: str) -> str:
    return re.sub(r"\s+|#[^\n]*|[()]", "", text)


def outside_findings(result: FileResult, before: bytes, after: bytes) -> list[str]:
    """Changes the fixer made away from every fixed finding (see the module docstring)."""
    module = result.module
    assert module is not None
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = []

    def enter(node: cst.CSTNode) -> None:
        if stack:
            parents[node] = stack[-1]
        stack.append(node)

    walk(module, enter, lambda node: stack.pop())
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    regions: list[tuple[int, int]] = []
    moved: list[str] = []
    for node in parents:
        if isinstance(node, (cst.Import, cst.ImportFrom)):  # the fixer tidies imports a fix left unused
            line = parents[node]
            regions.append((positions[line].start.line, positions[line].end.line))
    for finding, diagnostic in zip(result.findings, result.diagnostics, strict=True):
        if finding.fix is None or diagnostic.suppressed:
            continue
        span = positions[finding.node]
        start, end = span.start.line, span.end.line
        node: cst.CSTNode | None = finding.node
        while node is not None and not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            node = parents.get(node)
        if node is not None:
            statement = positions[node]
            start = min(start, statement.start.line)
            if isinstance(node, cst.SimpleStatementLine):
                end = max(end, statement.end.line)
        regions.append((start, end))
        moved.append(_squash(module.code_for_node(finding.node)))
    old, new = _lines(before), _lines(after)
    covered = {line for start, end in regions for line in range(start, end + 1)}
    problems = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "insert":
            # Between original lines i1 and i1 + 1 (1-based): inside a finding, an import, a hoist,
            # or TDL301's device variable.
            if i1 in covered and i1 + 1 in covered:
                continue
            inserted = "".join(new[j1:j2])
            if all(
                _IMPORT.match(line.strip())
                or _DEVICE_DEFINITION.match(line.strip())
                or line.strip() == "pass"
                for line in new[j1:j2]
                if line.strip()
            ):
                continue
            if any(text and text in _squash(inserted) for text in moved):
                continue
            problems.append(f"inserted outside any finding before line {i1 + 1}: {inserted!r}")
        # Changed or deleted: a blank line may go with a removed import (no more blank lines meet).
        elif not all(line in covered or not old[line - 1].strip() for line in range(i1 + 1, i2 + 1)):
            problems.append(
                f"changed lines {i1 + 1}-{i2} outside the fixed findings {regions}: "
                f"{''.join(old[i1:i2])!r} -> {''.join(new[j1:j2])!r}"
            )
    return problems
