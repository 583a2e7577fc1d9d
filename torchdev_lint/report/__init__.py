"""Formatting diagnostics for people and machines; formatters never change them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from torchdev_lint.diagnostics import Diagnostic
from torchdev_lint.rule import rules_by_code
from torchdev_lint.runner import FileReport

FORMATS = ("text", "concise", "json")


def concise(diagnostic: Diagnostic) -> str:
    """flake8's line: `path:line:col: CODE message`."""
    return f"{diagnostic.path}:{diagnostic.line}:{diagnostic.column}: {diagnostic.code} {diagnostic.message}"


def text(diagnostic: Diagnostic, source_line: str | None) -> str:
    """The concise line with a fix marker, then the source line with a caret under the finding."""
    marker = "[*] " if diagnostic.fix is not None else ""
    head = (
        f"{diagnostic.path}:{diagnostic.line}:{diagnostic.column}: "
        f"{diagnostic.code} {marker}{diagnostic.message}"
    )
    if source_line is None:
        return head
    line = source_line.expandtabs(1).rstrip("\r\n")
    end = diagnostic.end_column if diagnostic.end_line == diagnostic.line else len(line) + 1
    width = max(1, min(end, len(line) + 1) - diagnostic.column)
    gutter = " " * len(str(diagnostic.line))
    caret = " " * (diagnostic.column - 1) + "^" * width
    return f"{head}\n{gutter} |\n{diagnostic.line} | {line}\n{gutter} | {caret}\n"


def render(reports: Sequence[FileReport], fmt: str) -> str:
    """All diagnostics of a run in one format, ordered by path, line, column."""
    diagnostics = sorted((d for r in reports for d in r.diagnostics), key=Diagnostic.sort_key)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n"
    if fmt == "concise":
        return "".join(concise(d) + "\n" for d in diagnostics)
    lines = {(r.path, n): s for r in reports for n, s in r.source_lines.items()}
    return "".join(text(d, lines.get((d.path, d.line))) + "\n" for d in diagnostics)


def statistics(diagnostics: Sequence[Diagnostic]) -> str:
    """ruff-style counts per code, most frequent first."""
    counts = Counter(d.code for d in diagnostics)
    fixable = {d.code for d in diagnostics if d.fix is not None}
    rules = rules_by_code()
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(
        f"{count:>{width}}\t{code}\t{'[*]' if code in fixable else '[ ]'} {rules[code].name}\n"
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    )


def summary(diagnostics: Sequence[Diagnostic]) -> str:
    if not diagnostics:
        return "All checks passed!"
    safe = sum(1 for d in diagnostics if d.fix is not None and d.fix.safety == "safe")
    unsafe = sum(1 for d in diagnostics if d.fix is not None and d.fix.safety == "unsafe")
    noun = "error" if len(diagnostics) == 1 else "errors"
    text_ = f"Found {len(diagnostics)} {noun}."
    if safe:
        text_ += f"\n[*] {safe} fixable with the `--fix` option."
    if unsafe:
        text_ += f"\n{unsafe} hidden fixes can be enabled with the `--unsafe-fixes` option."
    return text_
