"""Formatting diagnostics for people and machines; formatters never change them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from torchdev_lint.diagnostics import Diagnostic, FileReport
from torchdev_lint.report.github import github
from torchdev_lint.report.text import concise, fixable, text

FORMATS = ("text", "concise", "json", "sarif", "github")


def render(
    reports: Sequence[FileReport],
    fmt: str,
    *,
    selected: Sequence[str] = (),
    color: bool = False,
    show_fixes: bool = False,
    unsafe_fixes: bool = False,
) -> str:
    """All diagnostics of a run in one format, ordered by path, line, column.

    `selected` are the codes of the rules run (SARIF lists them all, findings or not).
    """
    diagnostics = sorted((d for r in reports for d in r.diagnostics), key=Diagnostic.sort_key)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n"
    if fmt == "sarif":
        from torchdev_lint.report.sarif import sarif  # imports the rules, for their documentation

        return json.dumps(sarif(diagnostics, selected), indent=2) + "\n"
    if fmt == "github":
        return "".join(github(d) + "\n" for d in diagnostics)
    if fmt == "concise":
        return "".join(concise(d, color) + "\n" for d in diagnostics)
    lines = {(r.path, n): s for r in reports for n, s in r.source_lines.items()}
    return "".join(
        text(d, lines, color=color, show_fixes=show_fixes, unsafe_fixes=unsafe_fixes) + "\n"
        for d in diagnostics
    )


def statistics(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False) -> str:
    """ruff-style counts per code, most frequent first.

    The fix column says whether `--fix` fixes that code's findings with the
    current settings: `[*]` all of them, `[-]` some, `[ ]` none.
    """
    counts = Counter(d.code for d in diagnostics)
    fixed = Counter(d.code for d in diagnostics if fixable(d, unsafe_fixes))
    names = {d.code: d.name for d in diagnostics}
    width = max((len(str(n)) for n in counts.values()), default=1)

    def column(code: str) -> str:
        return "[*]" if fixed[code] == counts[code] else "[-]" if fixed[code] else "[ ]"

    return "".join(
        f"{count:>{width}}\t{code}\t{column(code)} {names[code]}\n"
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    )


def plural(count: int, noun: str) -> str:
    """`1 finding`, `2 findings`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def summary(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False) -> str:
    """What was found and what `--fix` would fix, as ruff says it: the `[*]` findings, and
    how many more `--unsafe-fixes` would fix."""
    if not diagnostics:
        return "All checks passed!"
    text_ = f"Found {plural(len(diagnostics), 'finding')}."
    fixes = sum(1 for d in diagnostics if fixable(d, unsafe_fixes))
    hidden = sum(1 for d in diagnostics if fixable(d, True)) - fixes
    if fixes or hidden:
        text_ += f"\n[*] {fixes} fixable with --fix"
        text_ += f" ({hidden} more with --unsafe-fixes)." if hidden else "."
    return text_
