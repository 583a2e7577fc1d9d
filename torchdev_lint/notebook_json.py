"""Where each cell's `source` sits in a notebook's JSON text, and its new JSON laid out as the old.

Writing back splices only these spans, so every other byte of the file stays.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from json.decoder import scanstring  # type: ignore[attr-defined]  # public at run time, not in typeshed

from torchdev_lint.diagnostics import SourceError

_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")
_SPACE = re.compile(r"[ \t\n\r]*")
_NON_ASCII_ESCAPE = re.compile(
    r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})"
)


def source_spans(path: str, text: str) -> dict[int, tuple[int, int]]:
    """The text span of the `source` value of each cell, by cell index (the text is valid JSON)."""
    spans: dict[int, tuple[int, int]] = {}
    try:
        _walk_json(text, _skip_space(text, 0), (), spans)
    except RecursionError:
        raise SourceError(path, "not a valid notebook: JSON nested too deeply") from None
    return spans


def _skip_space(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]  # matches everywhere


def _walk_json(text: str, i: int, where: tuple[object, ...], spans: dict[int, tuple[int, int]]) -> int:
    """Skip the JSON value at `i`, recording the spans of `cells[k].source`; the index after it.

    A repeated key counts last, as json.loads takes it.
    """
    char = text[i]
    if char == '"':
        return scanstring(text, i + 1)[1]
    if char not in "[{":
        return _SCALAR.match(text, i).end()  # type: ignore[union-attr]  # valid JSON
    closing = "]" if char == "[" else "}"
    i = _skip_space(text, i + 1)
    index = 0
    while text[i] != closing:
        key: object = index
        if char == "{":
            key, i = scanstring(text, i + 1)
            i = _skip_space(text, _skip_space(text, i) + 1)  # past the colon
        index += 1
        start = i
        i = _walk_json(text, i, (*where, key), spans)
        if key == "source" and len(where) == 2 and where[0] == "cells" and isinstance(where[1], int):
            spans[where[1]] = (start, i)
        i = _skip_space(text, i)
        if text[i] == ",":
            i = _skip_space(text, i + 1)
    return i + 1


def escapes_non_ascii(text: str) -> bool:
    """Whether the file writes non-ASCII characters as `\\u` escapes (json.dumps' ensure_ascii)."""
    if not text.isascii():
        return False
    return _NON_ASCII_ESCAPE.search(text) is not None


def source_json(document: str, span: tuple[int, int], text: str, ascii_only: bool) -> str:
    """The JSON of a cell's new source, laid out as its old value (at `span` of `document`) was.

    A string stays a string; a list gets one line per item (split as Jupyter
    splits sources), with the old value's indentation and separators, and the
    lines the cell kept reuse their old JSON text.
    """
    old = document[span[0] : span[1]]
    if old.startswith('"'):
        return json.dumps(text, ensure_ascii=ascii_only)
    spans = list(_list_items(old))
    kept: dict[str, str] = {}
    for start, end in spans:
        kept.setdefault(json.loads(old[start:end]), old[start:end])
    items = [kept.get(line) or json.dumps(line, ensure_ascii=ascii_only) for line in text.splitlines(True)]
    if not items:
        return "[]"
    if not spans:  # the cell was empty: lay the list out as the file lays out others
        if "\n" not in document:
            return json.dumps(text.splitlines(True), ensure_ascii=ascii_only)
        indent = _line_indent(document, span[0])
        opening, separator, closing = f"\n{indent}{_indent_unit(document)}", None, f"\n{indent}"
    else:
        opening, closing = old[1 : spans[0][0]], old[spans[-1][1] : -1]
        separator = old[spans[0][1] : spans[1][0]] if len(spans) > 1 else None
    return "[" + opening + (separator or "," + opening).join(items) + closing + "]"


def _list_items(value: str) -> Iterator[tuple[int, int]]:
    """The spans of the strings of a JSON list of strings."""
    i = _skip_space(value, 1)
    while value[i] == '"':
        end = scanstring(value, i + 1)[1]
        yield i, end
        i = _skip_space(value, end)
        if value[i] == ",":
            i = _skip_space(value, i + 1)


def _line_indent(text: str, offset: int) -> str:
    """The leading whitespace of the line holding `offset`."""
    start = text.rfind("\n", 0, offset) + 1
    return re.match(r"[ \t]*", text[start:]).group()  # type: ignore[union-attr]  # matches everywhere


def _indent_unit(text: str) -> str:
    """One level of the file's JSON indentation (that of its second line; Jupyter's is one space)."""
    found = re.search(r"\n([ \t]+)", text)
    return found[1] if found else " "
