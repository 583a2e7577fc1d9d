"""IPython syntax in notebook cells that is not Python, and where it sits.

A line magic, shell escape or help request is found only where a logical line
starts (brackets, strings and continuations are tracked across the cell), so
`% 2` continuing an expression or `%d` in a string stays Python.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Cell magics that run their body as Python in the kernel's namespace: the body is analysed.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})

_ASSIGNED_MAGIC = re.compile(r"[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[%!]")
_CELL_MAGIC = re.compile(r"\s*%%(\w*)")


def line_break(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def masks(lines: Sequence[str]) -> list[str | None]:
    """Per line of a cell: None, or the indentation of the placeholder hiding it from the analysis.

    A line magic keeps its indentation (it may sit in a block); the body of a
    cell magic that is not Python is hidden whole, at the left margin.
    """
    masks: list[str | None] = [None] * len(lines)
    start = 0
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    magic = _CELL_MAGIC.match(lines[first]) if first < len(lines) else None
    if magic is not None:
        if magic[1] not in PYTHON_CELL_MAGICS:
            return [""] * len(lines)
        masks[first] = ""
        start = first + 1
    state = _State()
    continued = False  # a masked line ended in a backslash: IPython continues it
    for index in range(start, len(lines)):
        line = lines[index]
        if continued or (state.at_statement_start and _is_magic(line)):
            masks[index] = line[: len(line) - len(line.lstrip(" \t\f"))]
            continued = line.removesuffix(line_break(line)).endswith("\\")
        else:
            state.scan(line)
    return masks


def _is_magic(line: str) -> bool:
    """A logical line that IPython rewrites: `%magic`, `!shell`, `x = %magic`, `x = !shell`, `?x`, `x?`."""
    stripped = line.strip()
    if not stripped:
        return False
    if stripped[0] in "%!?" or _ASSIGNED_MAGIC.match(stripped):
        return True
    if stripped.endswith("?"):  # never Python: `?` outside a string or comment
        state = _State()
        state.scan(line)
        return not state.commented and state.quote is None and state.depth == 0
    return False


class _State:
    """Enough of Python's tokenizer to know where logical lines start: brackets, strings,
    comments and backslash continuations across the lines of a cell."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: str | None = None  # the open string's quote ("'", '"""', ...)
        self.raw = False
        self.continued = False  # the last line ended with a backslash
        self.commented = False  # the last line had a comment

    @property
    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def scan(self, line: str) -> None:
        body = line.rstrip("\r\n")
        self.continued = self.commented = False
        i = 0
        while i < len(body):
            char = body[i]
            if self.quote is not None:
                if char == "\\" and not self.raw:
                    i += 2
                    continue
                if body.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                i += 1
                continue
            if char == "#":
                self.commented = True
                break
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            elif char in "'\"":
                self.quote = char * 3 if body.startswith(char * 3, i) else char
                prefix = re.search(r"[A-Za-z]*\Z", body[:i])
                self.raw = prefix is not None and "r" in prefix[0].lower()
                i += len(self.quote)
                continue
            elif char == "\\" and i == len(body) - 1:
                self.continued = True
            i += 1
        if self.quote is not None and len(self.quote) == 1 and not body.endswith("\\"):
            self.quote = None  # an unterminated one-line string: a syntax error, not a string across lines
