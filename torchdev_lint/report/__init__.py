"""Formatting diagnostics for people and machines; formatters never change them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from torchdev_lint.diagnostics import Diagnostic
from torchdev_lint.report.github import github
from torchdev_lint.report.sarif import sarif
from torchdev_lint.report.text import concise, text
from torchdev_lint.rule import Rule, rules_by_code
from torchdev_lint.runner import FileReport

FORMATS = ("text", "concise", "json", "sarif", "github")


def render(
    reports: Sequence[FileReport],
    fmt: str,
    *,
    rules: Sequence[type[Rule]] = (),
    color: bool = False,
    show_fixes: bool = False,
) -> str:
    """All diagnostics of a run in one format, ordered by path, line, column."""
    diagnostics = sorted((d for r in reports for d in r.diagnostics), key=Diagnostic.sort_key)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n"
    if fmt == "sarif":
        return json.dumps(sarif(diagnostics, rules), indent=2) + "\n"
    if fmt == "github":
        return "".join(github(d) + "\n" for d in diagnostics)
    if fmt == "concise":
        return "".join(concise(d, color) + "\n" for d in diagnostics)
    lines = {(r.path, n): s for r in reports for n, s in r.source_lines.items()}
    return "".join(text(d, lines, color=color, show_fixes=show_fixes) + "\n" for d in diagnostics)


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


def summary(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False) -> str:
    if not diagnostics:
        return "All checks passed!"
    safe = sum(1 for d in diagnostics if d.fix is not None and d.fix.safety == "safe")
    unsafe = sum(1 for d in diagnostics if d.fix is not None and d.fix.safety == "unsafe")
    noun = "error" if len(diagnostics) == 1 else "errors"
    text_ = f"Found {len(diagnostics)} {noun}."
    if unsafe_fixes and safe + unsafe:
        text_ += f"\n[*] {safe + unsafe} fixable with the `--fix` option."
    else:
        if safe:
            text_ += f"\n[*] {safe} fixable with the `--fix` option."
        if unsafe:
            text_ += f"\n{unsafe} hidden fixes can be enabled with the `--unsafe-fixes` option."
    return text_
