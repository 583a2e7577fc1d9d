"""Applying fixes: the text edits a fix makes, and fixing a file (choose compatible fixes, check
what they write, apply them together, repeat).

The engine reports findings with their fixes as node replacements; everything
that turns those into text lives here, so data flows one way (this module
uses the engine, never the reverse). `add_edits` gives a check's fixes their
text edits, for the outputs that show them.

The order is defined so that fixing in steps gives the same file as fixing at
once: safe fixes are applied round by round until none is left, and only then
(with `unsafe`) safe and unsafe ones together. Each round applies every fix
whose span overlaps no other chosen fix; a fix that lost such a conflict is
found again on the re-check and applied in a later round. A fix may give rise
to a new finding (pinning a loader's memory makes its copies worth making
non-blocking): such follow-ups are fixed in later rounds too and counted
apart. Before a round's result is kept, `grammar.guard_problem` checks it: a
fix that would break the file (not parse on the oldest supported Python,
drop a comment) is left out and its finding reported as not fixed, with why.

Around a round's fixes the fixer tidies what they leave (`Tidy`): imports
whose last use they removed go (`fix_imports`), and calls they make too long
for the project's line length are wrapped (`fix_wrap`). The text edits a fix
reports include both, so an editor applying them gets what `--fix` writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import Diagnostic, Edit, SourceError
from torchdev_lint.engine import FileResult, Finding, check_module, check_source
from torchdev_lint.fix_imports import imported_names, names_read, remove_unused_imports
from torchdev_lint.fix_wrap import too_long, wrap_long_calls
from torchdev_lint.grammar import OLDEST_PYTHON, PythonVersion, Survey, guard_problem
from torchdev_lint.positions import LineIndex, Point
from torchdev_lint.rule import Fix, Rule

# Rounds are few in practice (a conflict or a follow-up adds one); this bounds pathological cascades.
MAX_ROUNDS = 10


@dataclass
class _Record:
    """What the fixer knows about one finding across rounds."""

    follow_up: bool  # it appeared only after an earlier round's fixes
    not_applied: str | None = None  # why its fix was refused or never applied


@dataclass
class FixOutcome:
    """The fixed source and what happened to the findings."""

    source: bytes
    applied: int  # fixes applied, follow-ups included
    result: FileResult  # the check of the final source: what remains
    follow_ups: int = 0  # of `applied`, fixes of findings that earlier fixes gave rise to
    # Aligned with `result.diagnostics`: why a remaining finding's fix was not applied, or None.
    not_applied: list[str | None] = field(default_factory=list)

    @property
    def reported(self) -> list[Diagnostic]:
        """The remaining unsuppressed diagnostics, each saying why its fix was not applied if it was not."""
        reasons = self.not_applied or [None] * len(self.result.diagnostics)
        return [
            _with_reason(diagnostic, reason)
            for diagnostic, reason in zip(self.result.diagnostics, reasons, strict=True)
            if not diagnostic.suppressed
        ]


def _with_reason(diagnostic: Diagnostic, reason: str | None) -> Diagnostic:
    if reason is None or diagnostic.fix is None:
        return diagnostic
    return replace(diagnostic, fix=replace(diagnostic.fix, not_applied=reason))


class _Replacer(cst.CSTTransformer):
    """Replaces nodes (by id) in one transform and remembers what each original node became, to
    follow findings across rounds."""

    def __init__(self, replacements: Mapping[int, object]) -> None:
        self.replacements = replacements
        self.became: dict[int, object] = {}

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        result = self.replacements.get(id(original_node), updated_node)
        self.became[id(original_node)] = result
        return result

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None


@dataclass(frozen=True)
class Tidy:
    """What the fixer tidies around the fixes of one file: `imports`, remove the imports whose
    last use they removed (not in a package's `__init__.py` or a stub, whose imports are its
    interface, nor names other files of the project import from it, `kept_imports`); `line_length`, wrap the calls they make longer than it (`fix_wrap`), judged
    against the text they apply to (`positions` of the replaced nodes and `lines`)."""

    imports: bool = True
    kept_imports: frozenset[str] = frozenset()  # names other files import from this module
    line_length: int | None = None
    positions: Mapping[int, tuple[Point, Point]] = field(default_factory=dict)
    lines: LineIndex | None = None


def tidy_for(result: FileResult, settings: Settings | None = None) -> Tidy:
    """How to tidy the fixes of a check's findings (settings: the check's own by default)."""
    name = os.path.basename(result.path)
    settings = settings or result.settings
    return Tidy(
        imports=name != "__init__.py" and not name.endswith(".pyi"),
        kept_imports=result.project.imported_names if result.project is not None else frozenset(),
        line_length=settings.line_length if settings is not None else None,
        positions=result.positions,
        lines=result.lines,
    )


Became = dict[int, object]  # by id of a node of the tree fixes applied to: the node it became


def _apply(module: cst.Module, fixes: Sequence[Fix], tidy: Tidy | None = None) -> tuple[cst.Module, Became]:
    replacer = _Replacer(
        {id(old): _parenthesized(old, new) for fix in fixes for old, new in fix.replacements.items()}
    )
    fixed = module.visit(replacer)
    became = replacer.became
    if tidy is None:
        return fixed, became
    limit, lines = tidy.line_length, tidy.lines
    long = too_long(module, fixes, tidy.positions, lines, limit) if limit is not None and lines else []
    if long and limit is not None:
        wrapped = wrap_long_calls(fixed, [became[id(old)] for old in long], set(became), limit)
        if wrapped:
            rewrap = _Replacer({id(call): new for call, new in wrapped.items()})
            fixed = fixed.visit(rewrap)
            became = _composed(became, rewrap.became)
    if tidy.imports:
        replaced = [old for fix in fixes for old in fix.replacements]
        gone = names_read(replaced) - names_read(new for fix in fixes for new in fix.replacements.values())
        candidates = (gone & imported_names(module)) - tidy.kept_imports if gone else set()
        removed = remove_unused_imports(module, fixed, became, candidates) if candidates else None
        if removed is not None:
            fixed, later = removed
            became = _composed(became, later)
    return fixed, became


def _parenthesized(old: cst.CSTNode, new: object) -> object:
    """`new` in the parentheses of the expression it replaces, where it has none of its own: the
    parentheses lie outside the replaced span (`(` / `x.to(d)` / `)` keeps its lines)."""
    if (
        isinstance(old, cst.BaseExpression)
        and old.lpar
        and isinstance(new, cst.BaseExpression)
        and not new.lpar
        and not isinstance(new, (cst.StarredElement, cst.Param))
    ):
        return new.with_changes(lpar=old.lpar, rpar=old.rpar)
    return new


def _composed(first: Became, second: Became) -> Became:
    """What each node became through two transforms (`second` applied to `first`'s result)."""
    return {key: second.get(id(node), node) for key, node in first.items()}


def _tidies(module: cst.Module, fix: Fix, tidy: Tidy) -> bool:
    """Whether tidying may change what the fix alone writes (cheap: the text around it, names)."""
    limit, lines = tidy.line_length, tidy.lines
    if limit is not None and lines is not None and too_long(module, [fix], tidy.positions, lines, limit):
        return True
    if not tidy.imports:
        return False
    gone = names_read(fix.replacements) - names_read(fix.replacements.values())
    return bool(gone and gone & imported_names(module))


def apply_fixes(module: cst.Module, fixes: Sequence[Fix], tidy: Tidy | None = None) -> cst.Module:
    """Apply non-overlapping fixes in one transform (then tidy, see `Tidy`)."""
    return _apply(module, fixes, tidy)[0]


def add_edits(result: FileResult, settings: Settings | None = None) -> None:
    """Give each fix of a check its text edits (`check_source` leaves them out: computing them
    re-generates code once per fix, and only JSON, SARIF and fix previews show them), tidied as
    the fixer tidies it alone (`Tidy`; settings: the check's own by default)."""
    module, lines = result.module, result.lines
    if module is None or lines is None:
        return
    tidy = tidy_for(result, settings)
    result.diagnostics = [
        diagnostic
        if finding.fix is None or diagnostic.fix is None
        else replace(
            diagnostic,
            fix=replace(diagnostic.fix, edits=fix_edits(module, finding.fix, result.positions, lines, tidy)),
        )
        for finding, diagnostic in zip(result.findings, result.diagnostics, strict=True)
    ]


def fix_edits(
    module: cst.Module,
    fix: Fix,
    positions: Mapping[int, tuple[Point, Point]],
    lines: LineIndex,
    tidy: Tidy | None = None,
) -> tuple[Edit, ...]:
    """The text edits a fix makes (tidied as the fixer tidies it alone, with `tidy`).

    An expression replaced by another one-line expression is an edit of the
    old one's span, generated from the new node alone. A fix that adds, removes or
    replaces statements (whose text depends on indentation and the lines
    around them), or that tidying changes, is found by diffing the code before
    and after applying it.
    """
    if tidy is not None and _tidies(module, fix, tidy):
        return _diffed_edits(module, fix, lines, tidy)
    edits = []
    for old, new in fix.replacements.items():
        text = _expression_text(module, old, new)
        if text is None:
            return _diffed_edits(module, fix, lines, tidy)
        start, end = positions[id(old)]
        edits.append(_edit(lines, start, end, text))
    return tuple(sorted(edits, key=lambda edit: (edit.line, edit.column)))


def _expression_text(module: cst.Module, old: cst.CSTNode, new: object) -> str | None:
    """The code that replaces `old`'s span (which excludes its parentheses), or None if not an expression."""
    if not isinstance(old, cst.BaseExpression) or not isinstance(new, cst.BaseExpression):
        return None
    if new.lpar and (new.lpar != old.lpar or new.rpar != old.rpar):
        return None  # parentheses changed: they lie outside the span (none: the old ones stay)
    text = module.code_for_node(new.with_changes(lpar=(), rpar=()))
    if "\n" in text or "\r" in text:
        return None  # continuation lines are indented by the block around them: generate in place
    return text


def _diffed_edits(module: cst.Module, fix: Fix, lines: LineIndex, tidy: Tidy | None) -> tuple[Edit, ...]:
    before = module.code
    after = apply_fixes(module, [fix], tidy).code
    start = 0
    limit = min(len(before), len(after))
    while start < limit and before[start] == after[start]:
        start += 1
    end_before, end_after = len(before), len(after)
    while end_before > start and end_after > start and before[end_before - 1] == after[end_after - 1]:
        end_before -= 1
        end_after -= 1
    if start == end_before and start == end_after:
        return ()
    return (_edit(lines, lines.point(start), lines.point(end_before), after[start:end_after]),)


def _edit(lines: LineIndex, start: Point, end: Point, content: str) -> Edit:
    """An edit between two (1-based line, 0-based column) points, in the 1-based form reports use."""
    return Edit(start[0], start[1] + 1, end[0], end[1] + 1, content)


class _Ledger:
    """Follows findings from round to round by node identity (a transform copies every node).

    A finding of a later round is the same finding as one of the round before
    when its node is what that finding's node became (or the very same node,
    reused by a fix's replacement); otherwise it is a follow-up.
    """

    def __init__(self, result: FileResult) -> None:
        self.records = {_key(finding): _Record(follow_up=False) for finding in result.findings}
        self._alive: list[object] = []  # keeps old trees alive so that node ids are not reused

    def record(self, finding: Finding) -> _Record:
        return self.records[_key(finding)]

    def advance(
        self, before: FileResult, applied: Sequence[Finding], became: Became, after: FileResult
    ) -> None:
        self._alive.append((before, became))
        done = {id(finding) for finding in applied}
        carried: dict[tuple[str, int], _Record] = {}
        for finding in before.findings:
            if id(finding) in done:
                continue
            record = self.record(finding)
            carried[(finding.rule.code, id(finding.node))] = record
            node = became.get(id(finding.node))
            if node is not None:
                carried[(finding.rule.code, id(node))] = record
        self.records = {_key(f): carried.get(_key(f)) or _Record(follow_up=True) for f in after.findings}


def _key(finding: Finding) -> tuple[str, int]:
    return (finding.rule.code, id(finding.node))


def fix_source(
    path: str,
    source: bytes,
    rules: Sequence[type[Rule]],
    settings: Settings,
    *,
    unsafe: bool = False,
    max_rounds: int = MAX_ROUNDS,
    oldest_python: PythonVersion = OLDEST_PYTHON,
    guard: Callable[[str], str | None] | None = None,
    project: FileFacts | None = None,
) -> FixOutcome:
    """Apply safe (and with `unsafe` then also unsafe) fixes until none is left to apply.

    `max_rounds=1` applies only fixes of findings in `source` itself, not those
    that earlier fixes give rise to (the fuzz tests check each round apart).
    `guard(code)` says why fixed code must not be kept, or None: fixes it
    objects to are refused like those that break the grammar (a notebook's
    program must keep its cells and magics).
    """
    result = check_source(path, source, rules, settings, project=project)
    if result.module is None:
        return FixOutcome(source, 0, result)
    ledger = _Ledger(result)
    applied = follow_ups = rounds = 0
    try:
        for allow_unsafe in (False, True) if unsafe else (False,):
            while rounds < max_rounds:
                chosen, losers = _choose(result, ledger, allow_unsafe)
                if not chosen:
                    break
                if applied == 0 and result.module.bytes != source:
                    # LibCST drops form feeds and a final lone CR: writing would change other lines.
                    raise SourceError(path, "cannot fix: LibCST does not reproduce this file exactly")
                tidy = tidy_for(result, settings)
                module, became, kept = _apply_guarded(
                    result.module, chosen, ledger, oldest_python, guard, tidy
                )
                if not kept:
                    continue  # every chosen fix was refused (and recorded so): choose again
                rounds += 1
                for loser, winner in losers:
                    ledger.record(loser).not_applied = f"conflicts with {winner}"
                applied += len(kept)
                follow_ups += sum(ledger.record(finding).follow_up for finding in kept)
                after = check_module(path, module, rules, settings, project=project)
                ledger.advance(result, kept, became, after)
                result = after
        new_source = source if applied == 0 or result.module is None else result.module.bytes
    except RecursionError:  # LibCST's transformer and code generation recurse
        raise SourceError(path, "too deeply nested to fix") from None
    not_applied = [ledger.record(finding).not_applied for finding in result.findings]
    return FixOutcome(new_source, applied, result, follow_ups, not_applied)


def with_follow_ups(result: FileResult, rules: Sequence[type[Rule]], settings: Settings) -> list[Diagnostic]:
    """`result.reported`, each fix listing the findings that applying it gives rise to.

    The fixer fixes such follow-ups in later rounds; a report of what `--fix`
    does shows them with the fix that causes them, positioned in the text
    after that fix alone (one level: follow-ups of follow-ups are not listed).
    Costs one more check per file with fixes, and one per fix where a
    follow-up exists. Safety is ignored (it is a setting, not part of a check).
    """
    module = result.module
    if module is None or not any(f.fix is not None for f in result.findings):
        return result.reported
    try:
        caused = _follow_ups(module, result, rules, settings)
    except (RecursionError, SourceError):  # too deep to fix: the fixer refuses such files anyway
        return result.reported
    reported = []
    for finding, diagnostic in zip(result.findings, result.diagnostics, strict=True):
        if diagnostic.suppressed:
            continue
        if caused.get(id(finding)) and diagnostic.fix is not None:
            diagnostic = replace(diagnostic, fix=replace(diagnostic.fix, follow_ups=caused[id(finding)]))
        reported.append(diagnostic)
    return reported


def _follow_ups(
    module: cst.Module, result: FileResult, rules: Sequence[type[Rule]], settings: Settings
) -> dict[int, tuple[Diagnostic, ...]]:
    """By id of a finding of `result`: the findings its fix alone gives rise to (only where any fix does)."""
    ledger = _Ledger(result)
    tidy = tidy_for(result, settings)
    chosen, _ = _choose(result, ledger, unsafe=True)
    together, became = _apply(module, [f.fix for f in chosen if f.fix is not None], tidy)
    after = check_module(result.path, together, rules, settings, project=result.project)
    ledger.advance(result, chosen, became, after)
    if not _new_findings(after, ledger):
        return {}
    caused = {}
    for finding in chosen:
        assert finding.fix is not None
        alone, became = _apply(module, [finding.fix], tidy)
        after = check_module(result.path, alone, rules, settings, project=result.project)
        add_edits(after, settings)
        own = _Ledger(result)
        own.advance(result, [finding], became, after)
        caused[id(finding)] = tuple(_new_findings(after, own))
    return caused


def _new_findings(result: FileResult, ledger: _Ledger) -> list[Diagnostic]:
    """The unsuppressed diagnostics of `result` that the ledger does not know from the round before."""
    return [
        diagnostic
        for finding, diagnostic in zip(result.findings, result.diagnostics, strict=True)
        if ledger.record(finding).follow_up and not diagnostic.suppressed
    ]


def _choose(
    result: FileResult, ledger: _Ledger, unsafe: bool
) -> tuple[list[Finding], list[tuple[Finding, str]]]:
    """Findings whose fixes to apply together (allowed by safety, not suppressed, not refused, spans
    disjoint), and the findings that lost a conflict, with the winner as `CODE at L:C`."""
    chosen: list[Finding] = []
    taken: list[tuple[tuple[int, int], tuple[int, int], Diagnostic]] = []
    losers: list[tuple[Finding, str]] = []
    for finding, diagnostic in zip(result.findings, result.diagnostics, strict=True):
        fix = finding.fix
        if fix is None or diagnostic.suppressed or (fix.safety == "unsafe" and not unsafe):
            continue
        record = ledger.record(finding)
        if record.not_applied is not None and not record.not_applied.startswith("conflicts with"):
            continue  # refused by the guard in an earlier round
        spans = [result.positions[id(node)] for node in fix.replacements]
        start = min(span[0] for span in spans)
        end = max(span[1] for span in spans)
        winner = next((w for s, e, w in taken if start <= e and s <= end), None)
        if winner is not None:
            losers.append((finding, f"{winner.code} at {winner.line}:{winner.column}"))
            continue
        taken.append((start, end, diagnostic))
        chosen.append(finding)
    return chosen, losers


def _apply_guarded(
    module: cst.Module,
    chosen: list[Finding],
    ledger: _Ledger,
    oldest: PythonVersion,
    guard: Callable[[str], str | None] | None = None,
    tidy: Tidy | None = None,
) -> tuple[cst.Module, Became, list[Finding]]:
    """Apply the chosen fixes, leaving out those that break the file; refused findings are recorded."""
    before = Survey(module, oldest)

    def problem_of(fixed: cst.Module) -> str | None:
        return (guard(fixed.code) if guard is not None else None) or guard_problem(before, fixed, oldest)

    fixed, became = _apply(module, [f.fix for f in chosen if f.fix is not None], tidy)
    if problem_of(fixed) is None:
        return fixed, became, chosen
    # Find the culprits: first each fix alone, then (for fixes that only break together) one by one.
    kept: list[Finding] = []
    for finding in chosen:
        assert finding.fix is not None
        problem = problem_of(_apply(module, [finding.fix], tidy)[0])
        if problem is None:
            kept.append(finding)
        else:
            ledger.record(finding).not_applied = problem
    fixed, became = _apply(module, [f.fix for f in kept if f.fix is not None], tidy)
    if problem_of(fixed) is not None:
        together: list[Finding] = []
        for finding in kept:
            trial = [f.fix for f in (*together, finding) if f.fix is not None]
            problem = problem_of(_apply(module, trial, tidy)[0])
            if problem is None:
                together.append(finding)
            else:
                ledger.record(finding).not_applied = problem
        kept = together
        fixed, became = _apply(module, [f.fix for f in kept if f.fix is not None], tidy)
    return fixed, became, kept
