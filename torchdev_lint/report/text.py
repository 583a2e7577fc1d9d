"""Human output: flake8's concise line, and ruff-like text with a code frame and fix preview."""

from __future__ import annotations

import re
from collections.abc import Mapping

from torchdev_lint.diagnostics import Diagnostic, Edit, FixInfo, line_key

BOLD, RED, CYAN, GREEN, RESET = "\033[1m", "\033[31m", "\033[36m", "\033[32m", "\033[0m"


def _paint(value: str, style: str, color: bool) -> str:
    return f"{style}{value}{RESET}" if color else value


def fixable(diagnostic: Diagnostic, unsafe_fixes: bool) -> bool:
    """Whether `--fix` applies this finding's fix with these settings (and did not refuse it)."""
    fix = diagnostic.fix
    return fix is not None and fix.not_applied is None and (fix.safety == "safe" or unsafe_fixes)


def _message(diagnostic: Diagnostic) -> str:
    """The message, and why the fixer left the finding if it tried and refused its fix."""
    if diagnostic.fix is not None and diagnostic.fix.not_applied is not None:
        return f"{diagnostic.message} (fix not applied: {diagnostic.fix.not_applied})"
    return diagnostic.message


def location(diagnostic: Diagnostic) -> str:
    """`path:line:col`, or `path:cell N:line:col` in a notebook (the line counted in the cell)."""
    cell = f"cell {diagnostic.cell}:" if diagnostic.cell is not None else ""
    return f"{diagnostic.path}:{cell}{diagnostic.line}:{diagnostic.column}"


def concise(diagnostic: Diagnostic, color: bool = False) -> str:
    """flake8's line: `path:line:col: CODE message` (`path:cell N:line:col: ...` in a notebook)."""
    where = _paint(f"{location(diagnostic)}:", BOLD, color)
    return f"{where} {_paint(diagnostic.code, RED, color)} {_message(diagnostic)}"


# A code frame shows at most this many lines of a multi-line finding (and `...` for the rest).
MAX_FRAME_LINES = 10


def frame_lines(line: int, end_line: int) -> list[int | None]:
    """The line numbers the code frame of a finding from `line` to `end_line` shows.

    All of them up to MAX_FRAME_LINES; beyond, the first and the last few (the
    reported part often ends the span, as in `.cuda()` after a long call), with
    None where lines are left out.
    """
    if end_line - line < MAX_FRAME_LINES:
        return list(range(line, max(line, end_line) + 1))
    head = MAX_FRAME_LINES // 2 - 1
    tail = MAX_FRAME_LINES - head - 1
    return [*range(line, line + head), None, *range(end_line - tail + 1, end_line + 1)]


def text(
    diagnostic: Diagnostic,
    source_lines: Mapping[tuple[str, int], str],
    *,
    color: bool = False,
    show_fixes: bool = False,
    unsafe_fixes: bool = False,
) -> str:
    """The concise line with a fix marker, the source lines with carets, and optionally the fix.

    `[*]` marks the findings that `--fix` fixes with the current settings. A
    finding over several lines shows them all (capped, see `frame_lines`), with
    carets under the start of the first and the end of the last.
    """
    marker = _paint("[*] ", CYAN, color) if fixable(diagnostic, unsafe_fixes) else ""
    where = _paint(f"{location(diagnostic)}:", BOLD, color)
    head = f"{where} {_paint(diagnostic.code, RED, color)} {marker}{_message(diagnostic)}"
    shown: list[tuple[int, str] | None] = []
    for number in frame_lines(diagnostic.line, diagnostic.end_line):
        if number is None:
            shown.append(None)
            continue
        source_line = source_lines.get((diagnostic.path, line_key(number, diagnostic.cell)))
        if source_line is None:  # not stored: end the frame at the last line there is
            break
        shown.append((number, source_line.expandtabs(1).rstrip("\r\n")))
    if not shown:
        return head
    last = max(item[0] for item in shown if item is not None)
    gutter = " " * len(str(last))
    rows = [f"{gutter} |"]
    for item in shown:
        if item is None:
            rows.append("...")
            continue
        number, line = item
        rows.append(f"{number:>{len(gutter)}} | {line}")
        start = diagnostic.column if number == diagnostic.line else len(line) - len(line.lstrip()) + 1
        end = diagnostic.end_column if number == diagnostic.end_line else len(line) + 1
        if number in (diagnostic.line, last):
            width = max(1, min(end, len(line) + 1) - start)
            rows.append(f"{gutter} | " + " " * (start - 1) + _paint("^" * width, RED, color))
    frame = f"{head}\n" + "\n".join(rows) + "\n"
    if show_fixes and diagnostic.fix is not None and diagnostic.fix.edits:
        frame += _preview(diagnostic, source_lines, color)
    return frame


def _preview(diagnostic: Diagnostic, source_lines: Mapping[tuple[str, int], str], color: bool) -> str:
    """The lines the fix touches, before (-) and after (+); only the title for a fix of other cells."""
    assert diagnostic.fix is not None
    first = min(e.line for e in diagnostic.fix.edits)
    last = max(e.end_line for e in diagnostic.fix.edits)
    cell = diagnostic.cell
    before = [source_lines.get((diagnostic.path, line_key(n, cell))) for n in range(first, last + 1)]
    if any(line is None for line in before) or any(e.cell != cell for e in diagnostic.fix.edits):
        return f"{diagnostic.fix.safety} fix: {diagnostic.fix.message}\n"
    old = "\n".join(line.rstrip("\r\n") for line in before if line is not None)
    new = _apply(old, first, diagnostic.fix.edits)
    title = f"{diagnostic.fix.safety} fix: {diagnostic.fix.message}"
    removed = "".join(_paint(f"  - {line}", RED, color) + "\n" for line in old.split("\n"))
    added = "".join(_paint(f"  + {line}", GREEN, color) + "\n" for line in new.split("\n"))
    return f"{_paint(title, CYAN, color)}\n{removed}{added}{_follow_ups(diagnostic.fix, color)}"


def _follow_ups(fix: FixInfo, color: bool) -> str:
    """The findings this fix gives rise to and their fixes, positioned in the text after this fix."""
    text_ = ""
    for follow_up in fix.follow_ups:
        where = location(follow_up).removeprefix(f"{follow_up.path}:")
        text_ += f"then, after this fix, {follow_up.code} at {where}: {follow_up.message}\n"
        if follow_up.fix is not None:
            title = f"  {follow_up.fix.safety} fix: {follow_up.fix.message}"
            text_ += _paint(title, CYAN, color) + "\n"
            for edit in follow_up.fix.edits:
                cell = f"cell {edit.cell}:" if edit.cell is not None else ""
                span = f"{cell}{edit.line}:{edit.column}-{edit.end_line}:{edit.end_column}"
                text_ += _paint(f"  {span} becomes {edit.content!r}", GREEN, color) + "\n"
    return text_


def _apply(text_: str, first_line: int, edits: tuple[Edit, ...]) -> str:
    """Apply 1-based (line, column) edits to a block of lines that starts at `first_line`."""
    lines = text_.split("\n")

    def offset(line: int, column: int) -> int:
        return sum(len(item) + 1 for item in lines[: line - first_line]) + column - 1

    for edit in sorted(edits, key=lambda e: (e.line, e.column), reverse=True):
        start, end = offset(edit.line, edit.column), offset(edit.end_line, edit.end_column)
        text_ = text_[:start] + edit.content.replace("\r\n", "\n") + text_[end:]
    return text_


_INLINE_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")


def plain_text(markdown: str) -> str:
    """A rule page for the terminal: headings underlined, code blocks indented, no markdown marks."""
    out: list[str] = []
    prose: list[str] = []

    def flush() -> None:
        # Inline marks may span lines (a `code span` broken by the wrap), so whole paragraphs at once.
        text_ = _LINK.sub(r"\1 (\2)", _BOLD.sub(r"\1", _INLINE_CODE.sub(r"\1", "\n".join(prose))))
        for line in text_.split("\n") if prose else ():
            heading = re.fullmatch(r"(#+) (.*)", line)
            if heading:
                out.extend((heading[2], ("=" if len(heading[1]) == 1 else "-") * len(heading[2])))
            else:
                out.append(line)
        prose.clear()

    in_code = False
    for line in markdown.split("\n"):
        if line.startswith("```"):
            flush()
            in_code = not in_code
        elif in_code:
            out.append(f"    {line}" if line else "")
        else:
            prose.append(line)
    flush()
    return "\n".join(out)
