"""What a check produces: findings, their fixes and the text edits a fix makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FixSafety = Literal["safe", "unsafe"]
FixAvailability = Literal["never", "sometimes", "always"]


@dataclass(frozen=True)
class Edit:
    """Replace the text from (line, column) up to (end_line, end_column) by `content`.

    Lines and columns are 1-based; the end is exclusive, as in LSP and ruff's JSON.
    """

    line: int
    column: int
    end_line: int
    end_column: int
    content: str
    # In a notebook: the cell's 1-based number (lines and columns are then relative to the cell).
    cell: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            **({"cell": self.cell} if self.cell is not None else {}),
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "content": self.content,
        }


@dataclass(frozen=True)
class FixInfo:
    """A fix as reported: how safe it is, what it does, and the edits it makes."""

    safety: FixSafety
    message: str
    edits: tuple[Edit, ...] = ()
    # Findings this fix gives rise to, positioned in the text after it (the fixer fixes them next).
    follow_ups: tuple[Diagnostic, ...] = ()
    # Why the fixer did not apply this fix (it would break the file or conflicts with another fix).
    not_applied: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "safety": self.safety,
            "message": self.message,
            "edits": [edit.to_json() for edit in self.edits],
            "follow_ups": [diagnostic.to_json() for diagnostic in self.follow_ups],
            "not_applied": self.not_applied,
        }


@dataclass(frozen=True)
class Diagnostic:
    """One finding at a 1-based position in one file."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    fix: FixInfo | None = None
    suppressed: bool = field(default=False, compare=False)
    # In a notebook: the cell's 1-based number among all cells (line and column are then relative to it).
    cell: int | None = None

    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            **({"cell": self.cell} if self.cell is not None else {}),
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "fix": self.fix.to_json() if self.fix else None,
        }


@dataclass
class FileReport:
    """The outcome for one file: remaining findings, fixes, or the error that stopped it.

    `source_lines` holds the lines that text output shows (code frames, fix previews),
    keyed by `line_key`.
    """

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source_lines: dict[int, str] = field(default_factory=dict)
    fixed: int = 0  # fixes applied (or, with --diff, that would be), follow-ups included
    follow_ups: int = 0  # of them, fixes of findings that other fixes gave rise to
    diff: str = ""
    fixed_source: bytes | None = None  # with --diff, the fixed text when the fixes changed the file
    error: str | None = None


def line_key(line: int, cell: int | None = None) -> int:
    """The key of a line in `FileReport.source_lines`: a notebook numbers lines per cell, so the cell
    number goes above the line's bits."""
    return line if cell is None else cell << 32 | line


class SourceError(Exception):
    """A file that cannot be read, decoded or parsed; the message names the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
