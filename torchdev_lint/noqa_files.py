"""`check --add-noqa` and `check --report-unused-noqa`, one file at a time: read, check, then
place directives (written atomically, as fixes are) or judge the ones there.

Each function takes a path and the runner's options and returns plain data,
so the CLI can run files in worker processes (`parallel.map_files`).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchdev_lint.cache import CachedResult, entry_key
from torchdev_lint.catalog import RULES
from torchdev_lint.diagnostics import Diagnostic, FileReport, SourceError
from torchdev_lint.engine import FileResult, check_source
from torchdev_lint.files import read_source, write_atomic
from torchdev_lint.noqa import NoqaError, UnusedNoqa, apply_edits, noqa_edits, unused_codes
from torchdev_lint.notebooks import Notebook, is_notebook
from torchdev_lint.positions import LineIndex
from torchdev_lint.runner import rules_for

if TYPE_CHECKING:
    from torchdev_lint.runner import CheckOptions

_TDL_DIRECTIVE = re.compile(rb"#\s*noqa:\s?[^\r\n]*tdl", re.IGNORECASE)


@dataclass(frozen=True)
class NoqaAdded:
    """What `--add-noqa` did to one file."""

    path: str
    directives: int = 0  # lines that got a directive or more codes in one
    error: str | None = None


def _decode(path: str, source: bytes) -> tuple[str, str]:
    """The text and the encoding it round-trips through exactly (a BOM kept as `utf-8-sig`)."""
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(source).readline)[0]
        text = source.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise SourceError(path, f"cannot decode: {error}") from None
    if text.encode(encoding) != source:
        raise SourceError(path, f"cannot decode exactly as {encoding}")
    return text, encoding


def _compiles(source: bytes) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<noqa>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _checked(path: str, source: bytes, options: CheckOptions) -> tuple[bytes, Notebook | None, FileResult]:
    """What the engine reads (a notebook's code cells as one program), the notebook, and the
    check of it with the project's facts: as `runner.process_file` checks a file."""
    notebook = Notebook(path, source) if is_notebook(path) else None
    program = notebook.program_bytes if notebook is not None else source
    facts = options.project.of(path) if options.project is not None else None
    return (
        program,
        notebook,
        check_source(path, program, rules_for(path, options), options.settings, project=facts),
    )


def _cache_key(path: str, source: bytes, options: CheckOptions, with_edits: bool) -> str:
    """The key under which `check` caches this file's result (the runner's key)."""
    codes = [rule.code for rule in rules_for(path, options)]
    dependencies = options.project.digest(path) if options.project is not None else ""
    return entry_key(path, source, codes, options.settings, with_edits, dependencies)


def _cached_clean(path: str, source: bytes, options: CheckOptions) -> bool:
    """Whether the cache knows this very content to have nothing to report."""
    if options.cache is None:
        return False
    for with_edits in (False, True):
        cached = options.cache.load(_cache_key(path, source, options, with_edits))
        if cached is not None:
            return not cached.diagnostics and cached.error is None
    return False


def add_noqa_file(path: str, options: CheckOptions) -> NoqaAdded:
    """Silence every finding left in the file with a `# noqa: CODE` directive; never raises for bad input.

    A notebook gets its directives in the cells' sources; nothing else in it changes.
    A file the cache knows to be clean is not checked again; one found clean is
    cached as `check` would cache it.
    """
    notebook = None
    try:
        source = read_source(path)
        if _cached_clean(path, source, options):
            return NoqaAdded(path)
        program, notebook, result = _checked(path, source, options)
        findings = [(d.line, d.code) for d in result.reported]
        if not findings:
            if options.cache is not None:
                options.cache.store(_cache_key(path, source, options, False), CachedResult([], {}))
            return NoqaAdded(path)
        text, encoding = _decode(path, program)
        try:
            edits = noqa_edits(text, findings)
        except NoqaError as error:
            raise SourceError(path, f"cannot add noqa directives: {error}") from None
        changed = apply_edits(text, edits).encode(encoding)
        if not _compiles(changed) and _compiles(program):
            raise SourceError(path, "cannot add noqa directives: the file would not compile; nothing written")
        if notebook is not None:
            changed = notebook.rebuild(changed)
        if changed != source:
            write_atomic(path, changed)
        return NoqaAdded(path, len(edits))
    except SourceError as error:
        return NoqaAdded(path, error=str(notebook.explain(error) if notebook is not None else error))


def unused_noqa_file(path: str, options: CheckOptions) -> FileReport:
    """The file's directives for TDL codes that silence no finding, as diagnostics.

    Only files with such a directive are checked (again: the check's report
    leaves out the findings that directives silence). A file that cannot be
    read or parsed gives nothing here; the check reports it.
    """
    report = FileReport(path)
    try:
        source = read_source(path)
        if _TDL_DIRECTIVE.search(source) is None:
            return report
        program, notebook, result = _checked(path, source, options)
        text, _ = _decode(path, program)
    except SourceError:
        return report
    silenced = [(d.line, d.code) for d in result.diagnostics if d.suppressed]
    known = [rule.code for rule in RULES]
    selected = [rule.code for rule in rules_for(path, options)]
    lines = LineIndex(text)
    for unused in unused_codes(text, silenced, selected, known):
        why = "no finding here" if unused.known else "no rule has this code"
        report.diagnostics.append(
            Diagnostic(
                path=path,
                line=unused.line,
                column=unused.column + 1,
                end_line=unused.line,
                end_column=unused.end_column + 1,
                code=UnusedNoqa.code,
                name=UnusedNoqa.name,
                message=f"{UnusedNoqa.message} for {unused.code}: {why}",
            )
        )
        report.source_lines[unused.line] = lines.line(unused.line)
    if notebook is not None and report.diagnostics:
        notebook.locate(report, text)
    return report
