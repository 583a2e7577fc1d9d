"""Jupyter notebooks as one Python program, and back.

The code cells of a notebook, in order, are one program: what cell 2 binds,
cell 5 uses, as in the kernel. The program is what the engine and the fixer
see; this module turns a notebook into it and a fixed program back into the
notebook, and maps positions between the two. It does not analyse code.

The program holds a marker line before each code cell (`pass  # <tag>:N`, N
the cell's 1-based number among all cells, markdown included, as Jupyter
shows them) followed by the cell's lines, so every cell line is one program
line and columns stay the same. The marker is a statement, not a bare
comment: LibCST would attach a comment to the statement after it, so code a
fix inserts before a cell's first statement would land in the cell above. IPython syntax that is not Python is masked: a
line magic (`%matplotlib inline`, `x = %time f()`), a shell escape
(`!pip install x`, `files = !ls`) or a help request (`x?`, `?x`) becomes
`pass  # <tag>-magic` at the same indentation. A cell magic masks its whole
cell, except those that run their body as Python in the kernel (`%%time`,
`%%timeit`, `%%capture`, `%%prun`), where only the `%%` line is masked and
the body is analysed. Masked lines never produce findings and are never
altered: a fix that would move, re-indent or remove one, or that would
cross a cell boundary (move or remove a marker), is refused.

Writing back replaces only the JSON text of the `source` of cells whose text
changed, so every other byte of the file (other cells, outputs, execution
counts, metadata, the file's indentation, key order and escaping) stays
as it was, and a notebook diff shows only the fixed lines.
"""

from __future__ import annotations

import codecs
import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

from torchdev_lint.diagnostics import Diagnostic, Edit, FileReport, SourceError, line_key
from torchdev_lint.files import NOTEBOOK_SUFFIX
from torchdev_lint.notebook_json import escapes_non_ascii, source_json, source_spans
from torchdev_lint.notebook_magics import line_break, masks

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # a line with its break (Python's breaks)
_SYNTAX_AT = re.compile(r"\bat line (\d+), column (\d+)")


def is_notebook(path: str) -> bool:
    return path.endswith(NOTEBOOK_SUFFIX)


def split_lines(text: str) -> list[str]:
    """Lines with their breaks, split where Python splits them (LF, CRLF, CR)."""
    return _LINE.findall(text)


class Refused(Exception):
    """A fixed program cannot go back into the notebook; the message says why."""


# Reading the notebook ---------------------------------------------------------


@dataclass(frozen=True)
class _Cell:
    number: int  # 1-based among all cells
    text: str  # the cell's source as one string
    lines: tuple[str, ...]  # its lines, the last one given a line break (as the program holds it)
    placeholders: dict[int, str]  # by index in `lines`: the program line hiding a masked line
    span: tuple[int, int]  # where the JSON value of its `source` lies in the file's text

    @property
    def program_lines(self) -> list[str]:
        return [self.placeholders.get(index, line) for index, line in enumerate(self.lines)]


class Notebook:
    """A parsed notebook: its code cells, the program made of them, and the way back."""

    def __init__(self, path: str, raw: bytes) -> None:
        self.path = path
        self.bom = raw.startswith(codecs.BOM_UTF8)
        try:
            self.text = raw[len(codecs.BOM_UTF8) if self.bom else 0 :].decode("utf-8")
        except UnicodeDecodeError as error:
            reason = f"not a valid notebook: not UTF-8 ({error.reason} at byte {error.start})"
            raise SourceError(path, reason) from None
        try:
            self.data = json.loads(self.text)
        except ValueError as error:
            raise SourceError(path, f"not a valid notebook: invalid JSON: {error}") from None
        except RecursionError:
            raise SourceError(path, "not a valid notebook: JSON nested too deeply") from None
        _check_structure(path, self.data, self.text)
        spans = source_spans(path, self.text)
        self.tag = _unused_tag(self.text)
        self.cells: list[_Cell] = []
        if _is_python(self.data):
            for index, cell in enumerate(self.data["cells"]):
                if cell.get("cell_type") == "code":
                    self.cells.append(self._cell(index + 1, _joined(cell["source"]), spans[index]))
        self.program = "".join(self._marker(cell.number) + "".join(cell.program_lines) for cell in self.cells)

    def _cell(self, number: int, text: str, span: tuple[int, int]) -> _Cell:
        lines = split_lines(text)
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        placeholders = {
            index: f"{indent}pass  # {self.tag}-magic{line_break(line)}"
            for index, (line, indent) in enumerate(zip(lines, masks(lines), strict=True))
            if indent is not None
        }
        return _Cell(number, text, tuple(lines), placeholders, span)

    # The program ------------------------------------------------------------

    def _marker(self, number: int) -> str:
        return f"pass  # {self.tag}:{number}\n"

    @property
    def program_bytes(self) -> bytes:
        return self.program.encode("utf-8")

    def cell_texts(self, program: str) -> list[str]:
        """Each code cell's text in `program` (a fixed version of `self.program`), magics restored.

        Raises Refused when the program no longer has the notebook's shape: a
        marker moved, changed or gone (an edit across a cell boundary), or a
        masked line changed, moved to another cell or re-indented.
        """
        segments: list[list[str]] = []
        leading: list[str] = []
        numbers = []
        marker = re.compile(rf"pass  # {re.escape(self.tag)}:(\d+)\n")
        for line in split_lines(program):
            found = marker.fullmatch(line)
            if found:
                numbers.append(int(found[1]))
                segments.append([])
            elif f"# {self.tag}:" in line:
                raise Refused("it would cross a cell boundary")
            else:
                (segments[-1] if segments else leading).append(line)
        if numbers != [cell.number for cell in self.cells]:
            raise Refused("it would cross a cell boundary")
        if segments:
            segments[0][:0] = leading
        elif leading:
            raise Refused("it would add code outside the notebook's code cells")
        return [self._restore(cell, lines) for cell, lines in zip(self.cells, segments, strict=True)]

    def _restore(self, cell: _Cell, lines: list[str]) -> str:
        """The cell's text from its program lines: placeholders back to the magics they hide."""
        hidden = iter((cell.placeholders[index], cell.lines[index]) for index in sorted(cell.placeholders))
        restored = []
        for line in lines:
            if f"# {self.tag}-magic" in line:
                placeholder, original = next(hidden, ("", ""))
                if line != placeholder:
                    raise Refused("it would change an IPython magic")
                line = original
            restored.append(line)
        if next(hidden, None) is not None:
            raise Refused("it would remove an IPython magic")
        text = "".join(restored)
        return text if cell.text.endswith(("\n", "\r")) else text.removesuffix("\n")

    def guard(self, program: str) -> str | None:
        """Why a fixed program cannot go back into the notebook, or None (for the fixer's guard)."""
        try:
            self.cell_texts(program)
        except Refused as reason:
            return str(reason)
        return None

    # Writing back -------------------------------------------------------------

    def rebuild(self, program: bytes) -> bytes:
        """The notebook file holding a fixed program: only changed cells' `source` values rewritten."""
        try:
            texts = self.cell_texts(program.decode("utf-8"))
        except Refused as reason:
            raise SourceError(self.path, f"cannot write the fixed notebook: {reason}") from None
        changed = [(cell, text) for cell, text in zip(self.cells, texts, strict=True) if text != cell.text]
        if not changed:
            return (codecs.BOM_UTF8 if self.bom else b"") + self.text.encode("utf-8")
        out = []
        position = 0
        ascii_only = escapes_non_ascii(self.text)
        for cell, text in changed:
            start, end = cell.span
            out += [self.text[position:start], source_json(self.text, cell.span, text, ascii_only)]
            position = end
        out.append(self.text[position:])
        new_text = "".join(out)
        self._check_written(new_text, {cell.number: text for cell, text in changed})
        return (codecs.BOM_UTF8 if self.bom else b"") + new_text.encode("utf-8")

    def _check_written(self, new_text: str, sources: dict[int, str]) -> None:
        """The rewritten file must read as the notebook with just those sources changed."""
        written = json.loads(new_text)
        for number, text in sources.items():
            if _joined(written["cells"][number - 1]["source"]) != text:
                raise SourceError(self.path, f"cannot write the fixed notebook: cell {number} came out wrong")
            written["cells"][number - 1]["source"] = self.data["cells"][number - 1]["source"]
        if written != self.data:
            raise SourceError(self.path, "cannot write the fixed notebook: other content would change")

    # Positions ----------------------------------------------------------------

    def positions(self, program: str) -> CellPositions:
        """Where each line of `program` (this notebook's program, fixed or not) lies in the cells."""
        return CellPositions(self.tag, program)

    def locate(self, report: FileReport, program: str) -> None:
        """Turn a report about `program` into one about the notebook: cell-relative positions
        (fix edits included), and source lines keyed by cell."""
        where = self.positions(program)
        report.diagnostics = [self._located(d, program, where) for d in report.diagnostics]
        lines = {}
        for number, text in report.source_lines.items():
            cell, line = where.cell_line(number)
            if cell:
                lines[line_key(line, cell)] = text
        report.source_lines = lines

    def _located(self, diagnostic: Diagnostic, program: str, where: CellPositions) -> Diagnostic:
        cell, line = where.cell_line(diagnostic.line)
        end_cell, end_line = where.cell_line(diagnostic.end_line)
        end_column = diagnostic.end_column
        if end_cell != cell:  # cannot happen for a node of one cell; keep the report sane anyway
            end_line, end_column = line, diagnostic.column
        fix = diagnostic.fix
        if fix is not None and fix.edits:
            try:
                after = _apply_edits(program, fix.edits)
                edits = self._cell_edits(program, after)
                follow_ups = tuple(self._located(d, after, self.positions(after)) for d in fix.follow_ups)
                fix = replace(fix, edits=edits, follow_ups=follow_ups)
            except Refused as reason:
                fix = replace(fix, edits=(), follow_ups=(), not_applied=fix.not_applied or str(reason))
        elif fix is not None and fix.follow_ups:
            fix = replace(fix, follow_ups=())  # positioned in a text this report cannot map
        return replace(
            diagnostic, line=line, end_line=end_line, end_column=end_column, cell=cell or None, fix=fix
        )

    def _cell_edits(self, before: str, after: str) -> tuple[Edit, ...]:
        """One edit per changed cell (its first to its last changed character), cell-relative."""
        edits = []
        for cell, old, new in zip(self.cells, self.cell_texts(before), self.cell_texts(after), strict=True):
            if old == new:
                continue
            start = 0
            while start < min(len(old), len(new)) and old[start] == new[start]:
                start += 1
            old_end, new_end = len(old), len(new)
            while old_end > start and new_end > start and old[old_end - 1] == new[new_end - 1]:
                old_end -= 1
                new_end -= 1
            (line, column), (end_line, end_column) = _point(old, start), _point(old, old_end)
            edits.append(Edit(line, column, end_line, end_column, new[start:new_end], cell=cell.number))
        return tuple(edits)

    def explain(self, error: SourceError) -> SourceError:
        """A parse error about the program, restated with the cell and the line in it."""
        found = _SYNTAX_AT.search(error.reason)
        if found is None:
            return error
        cell, line = self.positions(self.program).cell_line(int(found[1]))
        if not cell:
            return error
        where = f"in cell {cell} at line {line}, column {found[2]}"
        return SourceError(error.path, error.reason[: found.start()] + where + error.reason[found.end() :])


class CellPositions:
    """Program lines ↔ (cell number, line in the cell), read from the markers of a program.

    Reports map findings with `cell_line`; a tool that edits cells by their
    positions (`--add-noqa`) finds their program lines with `program_line`.
    Lines a fix put above the first marker belong to the first code cell, as
    `Notebook.cell_texts` has it.
    """

    def __init__(self, tag: str, program: str) -> None:
        marker = re.compile(rf"pass  # {re.escape(tag)}:(\d+)")
        lines = split_lines(program)
        found = [marker.fullmatch(text.rstrip("\r\n")) for text in lines]
        first = next((int(match[1]) for match in found if match), 0)
        self._cells: list[tuple[int, int]] = []  # per program line: (cell, line in cell); (0, 0): a marker
        self._lines: dict[tuple[int, int], int] = {}
        cell, line = first, 0
        for number, match in enumerate(found, start=1):
            if match:
                cell = int(match[1])
                line = line if cell == first else 0
                self._cells.append((0, 0))
                continue
            line += 1
            self._cells.append((cell, line))
            self._lines[(cell, line)] = number

    def cell_line(self, program_line: int) -> tuple[int, int]:
        """The (cell, line) of a 1-based program line; (0, 0) for a marker or a line past the end."""
        if 1 <= program_line <= len(self._cells):
            return self._cells[program_line - 1]
        return (0, 0)

    def program_line(self, cell: int, line: int) -> int:
        """The 1-based program line of 1-based `line` of cell number `cell` (KeyError if it has none)."""
        return self._lines[(cell, line)]


def _check_structure(path: str, data: object, text: str) -> None:
    """Refuse what is not an nbformat 4 notebook with a reason (nbformat validates further where installed)."""

    def refuse(reason: str) -> SourceError:
        return SourceError(path, f"not a valid notebook: {reason}")

    if not isinstance(data, dict):
        raise refuse("the JSON is not an object")
    if "worksheets" in data:
        raise refuse("nbformat 3 is not supported (convert with `jupyter nbconvert --to notebook`)")
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise refuse('no "cells" list')
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise refuse(f"cell {number} has no cell_type")
        source = cell.get("source")
        if not isinstance(source, str) and not (
            isinstance(source, list) and all(isinstance(line, str) for line in source)
        ):
            raise refuse(f"cell {number} has no source text")
    problem = _nbformat_problem(text)
    if problem is not None:
        raise refuse(problem)


def _nbformat_problem(text: str) -> str | None:
    """nbformat's schema verdict on the notebook, or None (also when nbformat is not installed).

    Validated on a fresh parse: nbformat adds missing cell ids to what it validates.
    """
    try:
        import nbformat
    except ImportError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # missing cell ids: Jupyter adds them on save
        try:
            nbformat.validate(json.loads(text), relax_add_props=True)
        except nbformat.ValidationError as error:
            where = "/".join(str(part) for part in error.absolute_path) or "top level"
            message = str(error.message).splitlines()[0]
            if len(message) > 100:
                message = message[:99] + "…"
            return f"nbformat schema: at {where}: {message}"
        except Exception:  # noqa: BLE001 - e.g. a version nbformat does not know: our own checks passed
            return None
    return None


def _is_python(data: dict[str, object]) -> bool:
    """Whether the notebook's kernel language is Python (assumed when the metadata does not say)."""
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return True
    for key, field in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(field), str):
            return table[field].lower() in ("python", "python3", "ipython", "ipython3")
    return True


def _joined(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)


def _unused_tag(text: str) -> str:
    """A marker tag that occurs nowhere in the notebook's text."""
    tag, number = "torchdev-lint-cell", 0
    while tag in text:
        number += 1
        tag = f"torchdev-lint-cell-{number}"
    return tag


# Edits ----------------------------------------------------------------------------------


def _point(text: str, offset: int) -> tuple[int, int]:
    """The 1-based (line, column) of an offset in `text`."""
    lines = split_lines(text[:offset])
    if not lines or lines[-1].endswith(("\n", "\r")):
        return len(lines) + 1, 1
    return len(lines), len(lines[-1]) + 1


def _apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """`text` with 1-based (line, column) edits applied."""
    starts = [0]
    for line in split_lines(text):
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[min(line, len(starts)) - 1] + column - 1

    for edit in sorted(edits, key=lambda e: (e.line, e.column), reverse=True):
        start, end = offset(edit.line, edit.column), offset(edit.end_line, edit.end_column)
        text = text[:start] + edit.content + text[end:]
    return text
