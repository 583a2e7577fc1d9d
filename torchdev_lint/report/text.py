"""Human output: flake8's concise line, and ruff-like text with a code frame and fix preview."""

from __future__ import annotations

from collections.abc import Mapping

from torchdev_lint.diagnostics import Diagnostic, Edit, FixInfo

BOLD, RED, CYAN, GREEN, DIM, RESET = "\033[1m", "\033[31m", "\033[36m", "\033[32m", "\033[2m", "\033[0m"


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


def concise(diagnostic: Diagnostic, color: bool = False) -> str:
    """flake8's line: `path:line:col: CODE message`."""
    location = _paint(f"{diagnostic.path}:{diagnostic.line}:{diagnostic.column}:", BOLD, color)
    return f"{location} {_paint(diagnostic.code, RED, color)} {_message(diagnostic)}"


def text(
    diagnostic: Diagnostic,
    source_lines: Mapping[tuple[str, int], str],
    *,
    color: bool = False,
    show_fixes: bool = False,
    unsafe_fixes: bool = False,
) -> str:
    """The concise line with a fix marker, the source line with a caret, and optionally the fix.

    `[*]` marks the findings that `--fix` fixes with the current settings.
    """
    marker = _paint("[*] ", CYAN, color) if fixable(diagnostic, unsafe_fixes) else ""
    location = _paint(f"{diagnostic.path}:{diagnostic.line}:{diagnostic.column}:", BOLD, color)
    head = f"{location} {_paint(diagnostic.code, RED, color)} {marker}{_message(diagnostic)}"
    source_line = source_lines.get((diagnostic.path, diagnostic.line))
    if source_line is None:
        return head
    line = source_line.expandtabs(1).rstrip("\r\n")
    end = diagnostic.end_column if diagnostic.end_line == diagnostic.line else len(line) + 1
    width = max(1, min(end, len(line) + 1) - diagnostic.column)
    gutter = " " * len(str(diagnostic.line))
    caret = " " * (diagnostic.column - 1) + _paint("^" * width, RED, color)
    frame = f"{head}\n{gutter} |\n{diagnostic.line} | {line}\n{gutter} | {caret}\n"
    if show_fixes and diagnostic.fix is not None and diagnostic.fix.edits:
        frame += _preview(diagnostic, source_lines, color)
    return frame


def _preview(diagnostic: Diagnostic, source_lines: Mapping[tuple[str, int], str], color: bool) -> str:
    """The lines the fix touches, before (-) and after (+)."""
    assert diagnostic.fix is not None
    first = min(e.line for e in diagnostic.fix.edits)
    last = max(e.end_line for e in diagnostic.fix.edits)
    before = [source_lines.get((diagnostic.path, n)) for n in range(first, last + 1)]
    if any(line is None for line in before):
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
        where = f"{follow_up.line}:{follow_up.column}"
        text_ += f"then, after this fix, {follow_up.code} at {where}: {follow_up.message}\n"
        if follow_up.fix is not None:
            title = f"  {follow_up.fix.safety} fix: {follow_up.fix.message}"
            text_ += _paint(title, CYAN, color) + "\n"
            for edit in follow_up.fix.edits:
                span = f"{edit.line}:{edit.column}-{edit.end_line}:{edit.end_column}"
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
