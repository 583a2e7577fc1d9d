"""Checking or fixing one file end to end: read, analyse, fix, write.

Each file is processed independently and the result is plain data, so the
CLI can run files in any order (or in parallel) and still print
deterministically. Project facts (pass 1) come first; a check shares its
parse with pass 1: the files pass 1 must parse are checked first and
summarized from the same tree (see `_first_pass`).
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

import libcst as cst

from torchdev_lint.analysis.project.facts_memo import kept_facts
from torchdev_lint.analysis.project.file_facts import FileFacts, ProjectFacts
from torchdev_lint.analysis.project.project_facts import Summary, project_facts
from torchdev_lint.analysis.project.summary_cache import needs_parse
from torchdev_lint.cache import CachedResult, ResultCache, entry_key
from torchdev_lint.config import Settings, codes_for
from torchdev_lint.diagnostics import FileReport, SourceError
from torchdev_lint.engine import check_source, parse, parse_with_python_tree
from torchdev_lint.files import read_source, remove_stale_temp_files, write_atomic
from torchdev_lint.fixes import add_edits, fix_source, with_follow_ups
from torchdev_lint.grammar import OLDEST_PYTHON, PythonVersion
from torchdev_lint.notebooks import Notebook, is_notebook
from torchdev_lint.parallel import map_files
from torchdev_lint.report.text import frame_lines
from torchdev_lint.rule import Rule


@dataclass(frozen=True)
class CheckOptions:
    """What to do with each file."""

    rules: tuple[type[Rule], ...]
    settings: Settings = Settings()
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    # `per-file-ignores` (glob, selectors) pairs, globs relative to `root`.
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    root: str = "."
    # Compute each fix's text edits (JSON, SARIF and fix previews show them).
    with_edits: bool = True
    cache: ResultCache | None = None
    # Fixed files must parse on this Python (the project's `requires-python` lower bound).
    oldest_python: PythonVersion = OLDEST_PYTHON
    # Facts from other files of the project (pass 1, see `with_project`); None: each file alone.
    project: ProjectFacts | None = None
    # Texts to read instead of the disk, by path as given: `--diff`'s fixes of earlier rounds
    # (nothing is written), the language server's unsaved buffers.
    texts: Mapping[str, bytes] = field(default_factory=dict)


# Set (non-empty) in the environment, each file is checked on its own, without pass 1: an
# internal switch for measuring what the project analysis costs (benchmarks/bench.py), not a
# user option. It takes effect where files are checked; a run the cache answers whole still
# keys its lookups on the project facts (a miss then only costs the check).
NO_PROJECT = "TORCHDEV_LINT_NO_PROJECT"

# Fixing rounds over the project (`_fix_to_fixed_point`): a fix reaching another file's facts adds
# one; this bounds a pathological cascade, whose remaining findings are then reported as usual.
MAX_PROJECT_ROUNDS = 5


def with_project(paths: Sequence[str], options: CheckOptions) -> CheckOptions:
    """The options with the project facts of `paths` (pass 1; summaries cached with the results)."""
    if options.project is not None or os.environ.get(NO_PROJECT):
        return options
    directory = options.cache.directory if options.cache is not None else None
    texts = {os.path.abspath(path): text for path, text in options.texts.items()}
    return replace(options, project=project_facts(paths, parse, directory, texts=texts))


def rules_for(path: str, options: CheckOptions) -> tuple[type[Rule], ...]:
    """The selected rules minus those `per-file-ignores` turns off for this file."""
    if not options.per_file_ignores:
        return options.rules
    codes = set(codes_for(path, [r.code for r in options.rules], options.per_file_ignores, options.root))
    return tuple(r for r in options.rules if r.code in codes)


def process_file(path: str, options: CheckOptions, *, use_cached: bool = True) -> FileReport:
    """Check (and with options.fix, fix) one file; never raises for bad input.

    With a cache, a check is answered from it when the file is unchanged and
    its result stored otherwise; fixing never reads the cache (a stale entry
    must not hide a finding to fix) but stores the result for the fixed file.
    """
    return _process(path, options, use_cached)[0]


def summarized_check(path: str, options: CheckOptions) -> tuple[FileReport, Summary | None, _Questions]:
    """The check of `path` before the project facts are known (without the cache), its pass-1
    summary made from the same tree (None when the check did not parse it: pass 1 then parses
    it itself), and what the check asked of the facts."""
    asked = _AskedFacts()
    report, module = _process(path, options, False, asked=asked.facts)
    if module is None:
        return report, None, asked.questions
    from torchdev_lint.analysis.project.summaries import summarize

    try:
        return report, summarize(module, os.path.abspath(path)), asked.questions
    except RecursionError:
        return report, None, asked.questions


def _process(
    path: str,
    options: CheckOptions,
    use_cached: bool,
    source: bytes | None = None,
    tree: cst.Module | None = None,
    asked: FileFacts | None = None,
    python_tree: ast.Module | None = None,
) -> tuple[FileReport, cst.Module | None]:
    """`process_file`, with the tree a check parsed (None when fixing or not parsed). `source`:
    the file's bytes when pass 1 read them, `tree` LibCST's tree of them when it parsed them
    (a check then does not parse again) and `python_tree` CPython's; `asked`: facts to check with
    before the project's are known (`_AskedFacts`; the report is cached as the one without facts)."""
    report = FileReport(path)
    rules = rules_for(path, options)
    module: cst.Module | None = None
    try:
        if source is None:
            source = options.texts.get(path)
        if source is None:
            source = read_source(path)
    except SourceError as error:
        report.error = str(error)
        return report, None
    cache = options.cache
    checking = not (options.fix or options.diff)
    facts = options.project.of(path) if options.project is not None else None
    dependencies = facts.digest if facts is not None else ""
    key = None
    if asked is not None:
        facts = asked  # the report is the one without facts: cached with no dependencies
    if cache is not None and checking:
        key = entry_key(
            path, source, [r.code for r in rules], options.settings, options.with_edits, dependencies
        )
        cached = cache.load(key) if use_cached else None
        if cached is not None:
            return FileReport(path, cached.diagnostics, cached.source_lines, error=cached.error), None
    notebook: Notebook | None = None
    try:
        program = source  # what the engine reads: a notebook's code cells as one program
        if is_notebook(path):
            notebook = Notebook(path, source)
            program = notebook.program_bytes
        if checking:
            given = tree if notebook is None else None
            result = check_source(
                path,
                program,
                rules,
                options.settings,
                project=facts,
                module=given,
                python_tree=python_tree if given is not None else None,
            )
            module = result.module
            if options.with_edits:
                add_edits(result)
                diagnostics = with_follow_ups(result, rules, options.settings)
            else:
                diagnostics = result.reported
        else:
            outcome = fix_source(
                path,
                program,
                rules,
                options.settings,
                unsafe=options.unsafe_fixes,
                oldest_python=options.oldest_python,
                guard=notebook.guard if notebook is not None else None,
                project=facts,
            )
            if notebook is not None:
                outcome = replace(outcome, source=notebook.rebuild(outcome.source))
            result = outcome.result
            diagnostics = outcome.reported
            if outcome.source != source:
                if options.diff:
                    report.diff = unified_diff(path, source, outcome.source)
                    report.fixed_source = outcome.source
                else:
                    try:
                        write_atomic(path, outcome.source)
                    except SourceError as error:
                        # Nothing was written: what the file holds is still to report.
                        report.error = str(error)
                        result = check_source(path, program, rules, options.settings, project=facts)
                        if options.with_edits:
                            add_edits(result)
                        diagnostics = result.reported
                if report.error is None:
                    report.fixed = outcome.applied
                    report.follow_ups = outcome.follow_ups
            if cache is not None and not options.diff and report.error is None:
                # The fixer's last check (without edits) is the check of what the file now holds.
                key = entry_key(
                    path, outcome.source, [r.code for r in rules], options.settings, False, dependencies
                )
    except SourceError as error:
        report.error = str(notebook.explain(error) if notebook is not None else error)
        if key is not None and cache is not None:
            cache.store(key, CachedResult([], {}, report.error))
        return report, None
    report.diagnostics = diagnostics
    lines = result.lines
    if lines is not None and report.diagnostics:
        for diagnostic in report.diagnostics:
            # for the code frame, and then for the fix preview of `--show-fixes`
            wanted = {n for n in frame_lines(diagnostic.line, diagnostic.end_line) if n is not None}
            if diagnostic.fix is not None:
                wanted.update(n for e in diagnostic.fix.edits for n in range(e.line, e.end_line + 1))
            for number in wanted:
                if number <= len(lines.starts):
                    report.source_lines[number] = lines.line(number)
        if notebook is not None:
            notebook.locate(report, lines.text)
    if key is not None and cache is not None:
        cache.store(key, CachedResult(report.diagnostics, report.source_lines))
    return report, module


def cached_report(path: str, options: CheckOptions) -> FileReport | None:
    """The cached report of an unchanged file, or None (also when it cannot be read)."""
    if options.cache is None or options.fix or options.diff:
        return None
    codes = [r.code for r in rules_for(path, options)]
    dependencies = options.project.digest(path) if options.project is not None else ""
    return options.cache.report(path, codes, options.settings, options.with_edits, dependencies)


def unified_diff(path: str, before: bytes, after: bytes) -> str:
    """The diff `patch` applies to `before` to get `after` exactly, as `git diff` writes it.

    Lines end at LF only (a CR stays part of its line, form feeds do not split
    one), and a last line without a newline is marked as such.
    """
    old, new = _diff_lines(before), _diff_lines(after)
    out = []
    for line in difflib.unified_diff(old, new, fromfile=f"a/{path}", tofile=f"b/{path}"):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def _diff_lines(source: bytes) -> list[str]:
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(source).readline)[0]
    except SyntaxError:
        encoding = "utf-8"
    text = source.decode(encoding, errors="replace")
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def process_files(paths: Sequence[str], options: CheckOptions, jobs: int = 1) -> list[FileReport]:
    """Reports in the order of `paths`, whatever `jobs` is.

    With more than one job, cache hits are answered here and only the files
    left to check go to worker processes.
    """
    return process_files_with_facts(paths, options, jobs)[0]


def process_files_with_facts(
    paths: Sequence[str], options: CheckOptions, jobs: int = 1
) -> tuple[list[FileReport], ProjectFacts | None]:
    """`process_files`, and the project facts of a check (None when fixing: the files changed),
    for what else the run asks of the same files."""
    reports, used = _process_files(paths, options, jobs)
    return reports, None if options.fix or options.diff else used.project


def _process_files(
    paths: Sequence[str], options: CheckOptions, jobs: int
) -> tuple[list[FileReport], CheckOptions]:
    """The reports, and the options the files were checked with (with the project facts)."""
    if options.fix or options.diff:
        if not options.diff:
            remove_stale_temp_files(paths)  # left by a fixer that was killed while writing
        return _fix_to_fixed_point(paths, options, jobs)
    # Once here: workers receive the facts with the options.
    options, done = _first_pass(paths, options, jobs)
    return _reports(paths, options, jobs, done), options


def _fix_to_fixed_point(
    paths: Sequence[str], options: CheckOptions, jobs: int
) -> tuple[list[FileReport], CheckOptions]:
    """Fix, then recompute the project facts and fix again every file whose facts changed, until
    no file changes: a fix in one file can make another file's fix safe or give it a finding
    (pinning a loader here makes the copies of its batches there worth making non-blocking), and
    a second run must change nothing. Each file's report sums its fixes over the rounds and holds
    what remains after the last one. With `--diff` nothing is written: each round reads the texts
    the earlier ones fixed, and a file's diff goes from its text on disk to its last fixed text."""
    given = options.project
    options = with_project(paths, options)
    reports = dict(zip(paths, _reports(paths, options, jobs, {}), strict=True))
    changed = any(report.fixed for report in reports.values())
    for _ in range(MAX_PROJECT_ROUNDS - 1):
        before = options.project
        # Facts handed in by the caller, or none at all (`NO_PROJECT`): nothing to recompute.
        if not changed or given is not None or before is None:
            break
        if options.diff:
            fixed = {path: r.fixed_source for path, r in reports.items() if r.fixed_source is not None}
            options = replace(options, texts={**options.texts, **fixed})
        options = with_project(paths, replace(options, project=None))
        after = options.project
        assert after is not None  # `with_project` made facts for these paths a round ago
        todo = [
            path
            for path in dict.fromkeys(paths)
            if reports[path].error is None and before.digest(path) != after.digest(path)
        ]
        changed = False
        for path, report in zip(todo, _reports(todo, options, jobs, {}), strict=True):
            changed = changed or report.fixed > 0
            earlier = reports[path]
            report.fixed += earlier.fixed
            report.follow_ups += earlier.follow_ups
            if report.fixed_source is None:  # unchanged this round (`--diff`): the earlier diff holds
                report.fixed_source, report.diff = earlier.fixed_source, earlier.diff
            elif earlier.fixed_source is not None:
                report.diff = unified_diff(path, read_source(path), report.fixed_source)
            reports[path] = report
    return [reports[path] for path in paths], options


def _reports(
    paths: Sequence[str], options: CheckOptions, jobs: int, done: dict[str, FileReport]
) -> list[FileReport]:
    """Process the files of `paths` not in `done`; the reports in the order of `paths`."""
    todo = [path for path in dict.fromkeys(paths) if path not in done]
    if jobs <= 1 or len(todo) < 2:
        done.update((path, process_file(path, options)) for path in todo)
        return [done[path] for path in paths]
    for path in todo:
        cached = cached_report(path, options)
        if cached is not None:
            done[path] = cached
    todo = [path for path in todo if path not in done]
    # Workers do not look the cache up again: it was just consulted here.
    check = partial(process_file, options=options, use_cached=False)
    done.update(zip(todo, map_files(check, todo, jobs), strict=True))
    return [done[path] for path in paths]


def _first_pass(
    paths: Sequence[str], options: CheckOptions, jobs: int
) -> tuple[CheckOptions, dict[str, FileReport]]:
    """Pass 1 for a check, sharing its parses with the checks: a checked file pass 1 parses is
    checked from the same tree, without project facts, and summarized from it. Once the facts
    are known, the reports of those that have none are final; the others are checked again
    with theirs. With workers, the files pass 1 parses first are checked so by the workers
    (those of later rounds are parsed here and checked again there); a serial run checks every
    file pass 1 parses once (`_SharedParses`)."""
    if os.environ.get(NO_PROJECT):
        return replace(options, project=None), {}  # even facts the CLI's cache lookup computed
    if options.project is not None:
        return options, {}
    directory = options.cache.directory if options.cache is not None else None
    if jobs <= 1:
        shared = _SharedParses(paths, options)
        options = replace(options, project=_pass_one(paths, shared.parse, directory, keep_tree=shared.keep))
        return options, shared.reports_with(options)
    first = [path for path in dict.fromkeys(paths) if path.endswith(".py") and _needs_parse(path, directory)]
    found = map_files(partial(summarized_check, options=options), first, jobs)
    summaries = {os.path.abspath(p): s for p, (_, s, _) in zip(first, found, strict=True) if s is not None}
    options = replace(options, project=_pass_one(paths, parse, directory, summaries=summaries))
    done = {}
    for path, (report, _, questions) in zip(first, found, strict=True):
        if _final(path, report, questions, options):
            done[path] = report
    return options, done


# The source bytes whose LibCST trees a serial run keeps from pass 1 until the facts are known
# (a tree takes some 30 to 60 times its file's size, and pass 1 can parse hundreds of a large
# project's files). Beyond this, a file is checked at once from its tree with facts that record
# what the check asks of them (`_AskedFacts`), and checked again (parsed again) only if its
# facts answer one of those questions otherwise.
_KEPT_SOURCE_BYTES = 256 * 1024
# Beside them, the source bytes of files pass 1 is told to keep (`_SharedParses.keep`).
_KEPT_FOR_FACTS_BYTES = 512 * 1024


class _SharedParses:
    """Pass 1's parse in a serial run, shared with the checks: the tree of each checked file it
    parses is kept for the file's check with its facts, within `_KEPT_SOURCE_BYTES`; beyond,
    the file is checked at once from the tree, asking empty facts that record the questions."""

    def __init__(self, paths: Sequence[str], options: CheckOptions) -> None:
        self._checked = {os.path.abspath(path): path for path in paths}
        self._options = options
        self._budget = _KEPT_SOURCE_BYTES
        self._keep: set[str] = set()  # kept first (`keep`), within a budget of their own
        self._budget_to_keep = _KEPT_FOR_FACTS_BYTES
        self._kept: dict[str, tuple[bytes, cst.Module, ast.Module | None]] = {}
        # checked at once: the source, the report and what the check asked of the facts
        self._reports: dict[str, tuple[bytes, FileReport, _Questions]] = {}

    def parse(self, path: str, source: bytes) -> cst.Module:
        """`project_facts`' parse (absolute paths; raises SourceError). A tree kept is given
        again (pass 1 may read a file for its module classes, then summarize it)."""
        checked = self._checked.get(path)
        kept = self._kept.get(checked) if checked is not None else None
        if kept is not None and kept[0] == source:
            return kept[1]
        module, python_tree = parse_with_python_tree(path, source)
        if checked is None or checked in self._kept or checked in self._reports:
            return module
        if path in self._keep and len(source) <= self._budget_to_keep:
            self._budget_to_keep -= len(source)
            self._kept[checked] = (source, module, python_tree)
        elif len(source) <= self._budget:
            self._budget -= len(source)
            self._kept[checked] = (source, module, python_tree)
        else:
            asked = _AskedFacts()
            report = _process(checked, self._options, False, source, module, asked.facts, python_tree)[0]
            self._reports[checked] = (source, report, asked.questions)
        return module

    def keep(self, path: str) -> None:
        """Keep the tree of checked file `path` (absolute) within `_KEPT_FOR_FACTS_BYTES`: its
        facts are known only at the end of pass 1 and are likely to change what its check finds
        (checked at once, it would be parsed and checked again)."""
        self._keep.add(path)

    def reports_with(self, options: CheckOptions) -> dict[str, FileReport]:
        """The reports of these files, now that `options` hold the project facts: each kept
        tree checked with its facts; a report checked at once kept where the facts answer
        every question its check asked as no facts do."""
        assert options.project is not None
        done = {}
        while self._kept:
            path, (source, tree, python_tree) = self._kept.popitem()  # each tree freed once checked
            done[path] = _process(path, options, True, source, tree, python_tree=python_tree)[0]
        for path, (source, report, questions) in self._reports.items():
            if _final(path, report, questions, options, source):
                done[path] = report
        return done


class _Questions(NamedTuple):
    """What a check asked of its facts (`_AskedFacts`): per field, the members looked up, and
    the fields read whole (iterated, sized, compared, combined)."""

    members: dict[str, set[Any]]
    whole: set[str]

    def same_answers(self, facts: FileFacts) -> bool:
        """Do `facts` answer every question as no facts do (a field read whole empty, no member
        looked up present)? A check is deterministic and sees its facts only through these
        fields, so the check with them then finds exactly the same."""
        for name, present in facts._asdict().items():
            if present and (name in self.whole or not present.isdisjoint(self.members.get(name, ()))):
                return False
        return True


class _AskedFacts:
    """Empty facts for a check made before the project's are known, recording its questions."""

    def __init__(self) -> None:
        self.questions = _Questions({}, set())
        self.facts = FileFacts(*(_Recording(self.questions, field) for field in FileFacts._fields))


class _Recording(frozenset):
    """An empty fact field that records what is asked of it."""

    _asked: _Questions
    _field: str

    def __new__(cls, asked: _Questions, field: str) -> _Recording:
        recording = super().__new__(cls)
        recording._asked, recording._field = asked, field
        return recording

    def __contains__(self, member: object) -> bool:
        self._asked.members.setdefault(self._field, set()).add(member)
        return False


def _read_whole(name: str) -> Any:
    def method(self: _Recording, *args: Any) -> Any:
        self._asked.whole.add(self._field)
        return getattr(frozenset, name)(self, *args)

    return method


# Every other way to read a set reads it whole (`in` is the only lookup of one member).
for _name in (
    "__iter__ __len__ __bool__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __and__ __rand__ "
    "__or__ __ror__ __sub__ __rsub__ __xor__ __rxor__ __reduce__ __repr__ copy difference intersection "
    "isdisjoint issubset issuperset symmetric_difference union"
).split():
    if hasattr(frozenset, _name):
        setattr(_Recording, _name, _read_whole(_name))


def _pass_one(
    paths: Sequence[str],
    parse: Callable[[str, bytes], cst.Module],
    directory: str | None,
    *,
    summaries: Mapping[str, Summary] | None = None,
    keep_tree: Callable[[str], None] | None = None,
) -> ProjectFacts:
    """Pass 1 of a check; with a cache, kept with what it read, so that the next run over the
    same files finds its facts without a pass while none of that changed (`facts_memo`)."""
    if directory is None:
        return project_facts(paths, parse, directory, summaries, keep_tree=keep_tree)
    return kept_facts(paths, parse, directory, summaries=summaries, keep_tree=keep_tree)


def _final(
    path: str, report: FileReport, questions: _Questions, options: CheckOptions, source: bytes | None = None
) -> bool:
    """Is the report of a check made before the facts were known final, now that `options` hold
    them? A final report of a file with facts is cached under its key with them."""
    assert options.project is not None
    facts = options.project.of(path)
    if facts is None:
        return True  # cached so by its check
    if report.error is not None or not questions.same_answers(facts):
        return False
    if options.cache is not None:
        try:
            source = read_source(path) if source is None else source
        except SourceError:
            return False
        codes = [r.code for r in rules_for(path, options)]
        key = entry_key(path, source, codes, options.settings, options.with_edits, facts.digest)
        options.cache.store(key, CachedResult(report.diagnostics, report.source_lines))
    return True


def _needs_parse(path: str, cache_directory: str | None) -> bool:
    try:
        return needs_parse(read_source(path), cache_directory)
    except SourceError:
        return False
