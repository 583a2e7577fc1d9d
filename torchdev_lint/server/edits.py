"""Positions and text edits in the client's terms.

The engine counts lines as Python does (breaks are LF, CRLF and CR only, as
in LSP) and columns in code points; a client counts columns in the position
encoding agreed at `initialize` (UTF-16 code units unless it offers another).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from lsprotocol import types

from torchdev_lint.diagnostics import Diagnostic, Edit
from torchdev_lint.positions import LineIndex

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _units(text: str, encoding: str) -> int:
    """The length of `text` in the client's code units."""
    if encoding == types.PositionEncodingKind.Utf32:
        return len(text)
    if encoding == types.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class Positions:
    """Converts the engine's positions in one text to the client's."""

    def __init__(self, text: str, encoding: str) -> None:
        self.lines = LineIndex(text)
        self.encoding = encoding

    def at(self, line: int, column: int) -> types.Position:
        """The client position of a 1-based line and 1-based code-point column (as reports give them)."""
        return types.Position(line - 1, _units(self.lines.line(line)[: column - 1], self.encoding))

    def at_offset(self, offset: int) -> types.Position:
        line, column = self.lines.point(offset)
        return self.at(line, column + 1)

    def diagnostic_range(self, diagnostic: Diagnostic) -> types.Range:
        return types.Range(
            self.at(diagnostic.line, diagnostic.column), self.at(diagnostic.end_line, diagnostic.end_column)
        )

    def edits_of_fix(self, edits: Sequence[Edit]) -> list[types.TextEdit]:
        """A fix's edits, trimmed to what they change (a statement-level fix is reported as one
        edit of every line between its first and last change)."""
        text = self.lines.text
        pieces, position = [], 0
        for edit in sorted(edits, key=lambda e: (e.line, e.column)):
            start = self.lines.offset((edit.line, edit.column - 1))
            pieces += [text[position:start], edit.content]
            position = self.lines.offset((edit.end_line, edit.end_column - 1))
        pieces.append(text[position:])
        return minimal_edits(text, "".join(pieces), self)


def minimal_edits(before: str, after: str, positions: Positions) -> list[types.TextEdit]:
    """Edits that turn `before` (the text `positions` knows) into `after`, touching only what changed.

    Lines are matched first (so a fix elsewhere never rewrites the lines between),
    then each changed run of lines is trimmed to the characters that differ.
    """
    old, new = _LINE.findall(before), _LINE.findall(after)
    starts = [0]
    for line in old:
        starts.append(starts[-1] + len(line))
    edits = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, first, last, new_first, new_last in matcher.get_opcodes():
        if tag == "equal":
            continue
        start, end = starts[first], starts[last]
        replaced, content = before[start:end], "".join(new[new_first:new_last])
        prefix = _common_prefix(replaced, content)
        suffix = _common_prefix(replaced[prefix:][::-1], content[prefix:][::-1])
        start, end = start + prefix, end - suffix
        if _inside_crlf(before, start):
            start, prefix = start - 1, prefix - 1
        if _inside_crlf(before, end):
            end, suffix = end + 1, suffix - 1
        edits.append(
            types.TextEdit(
                types.Range(positions.at_offset(start), positions.at_offset(end)),
                content[prefix : len(content) - suffix],
            )
        )
    return edits


def _common_prefix(first: str, second: str) -> int:
    size = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        size += 1
    return size


def _inside_crlf(text: str, offset: int) -> bool:
    """Whether `offset` falls between the CR and LF of one line break (no position in LSP)."""
    return 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n"
