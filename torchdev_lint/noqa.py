"""`# noqa` directives: which findings they silence, where new ones go, and which are unused.

Reading follows flake8, so that `torchdev-lint check` and the flake8 plugin
agree: flake8's own pattern (codes are letters then digits, a colon with at
most one space after it, so `# noqa:  X` and `# noqa: TDL` are blanket
directives), with the spelling loosened where flake8 is strict (`#noqa`, any
case of `noqa` and of the codes; the plugin drops what `check` silences).
flake8 looks for a directive in the physical lines that a multi-line string
or a backslash continuation joins; `check` looks in every line of the
statement (its logical line), which includes those, so whatever flake8
silences `check` silences too.

Writing works on text (a file's or a notebook program's): `noqa_edits` gives
the line edits that add or extend a directive for each finding, placed where
a comment is legal and silences the finding.
"""

from __future__ import annotations

import bisect
import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from torchdev_lint.positions import LineIndex
from torchdev_lint.rule import Rule

# flake8's NOQA_INLINE_REGEXP with `#\s*` for `# `: every directive flake8 sees is seen here.
NOQA = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>(?:[A-Z]+[0-9]+(?:[,\s]+)?)+))?", re.IGNORECASE)
_SEPARATORS = re.compile(r"[,\s]+")
_NOQA_WORD = re.compile("noqa", re.IGNORECASE)
PREFIX = "TDL"


def directive_codes(match: re.Match[str]) -> list[str] | None:
    """The codes of a directive as written; None for a blanket `# noqa`."""
    codes = match.group("codes")
    return None if codes is None else [c for c in _SEPARATORS.split(codes) if c]


def silences(match: re.Match[str], code: str) -> bool:
    """flake8's semantics, without its case sensitivity: bare silences all, codes match by prefix."""
    codes = directive_codes(match)
    return codes is None or any(code.startswith(c.upper()) for c in codes)


def is_suppressed(line: str, code: str) -> bool:
    """Whether a directive in this one line silences `code`."""
    return any(silences(match, code) for match in NOQA.finditer(line))


@dataclass(frozen=True)
class _Layout:
    """What the tokenizer says about a text's lines."""

    # (first line, last line) of each statement (logical line), in order; 1-based, inclusive.
    statements: list[tuple[int, int]]
    # Lines whose end lies inside a token (a multi-line string): no comment can end them.
    inside: frozenset[int]
    # The comment that ends a line: its 0-based column and its text.
    comments: dict[int, tuple[int, str]]

    def statement(self, line: int) -> tuple[int, int] | None:
        """The statement whose lines include `line`."""
        index = bisect.bisect_right(self.statements, line, key=lambda statement: statement[0]) - 1
        if index >= 0 and self.statements[index][1] >= line:
            return self.statements[index]
        return None


def _layout(text: str) -> _Layout | None:
    """One tokenizer pass over `text`; None when it cannot be tokenized.

    Lines are numbered as `LineIndex` numbers them: universal newlines make
    `\\r` and `\\r\\n` line breaks for the tokenizer too.
    """
    statements: list[tuple[int, int]] = []
    inside: set[int] = set()
    comments: dict[int, tuple[int, str]] = {}
    first: int | None = None
    fstrings: list[int] = []  # start lines of the f-strings open (tokenized apart from Python 3.12 on)
    skipped = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline=None).readline):
            kind, (start, column), end = token.type, token.start, token.end[0]
            if kind == tokenize.NEWLINE:
                if first is not None:
                    statements.append((first, start))
                first = None
            elif kind == tokenize.COMMENT:
                comments[start] = (column, token.string)
            elif kind not in skipped:
                if first is None:
                    first = start
                inside.update(range(start, end))
                name = tokenize.tok_name[kind]
                if name == "FSTRING_START":
                    fstrings.append(start)
                elif name == "FSTRING_END" and fstrings:
                    inside.update(range(fstrings.pop(), start))
    except (tokenize.TokenError, SyntaxError):
        return None
    return _Layout(statements, frozenset(inside), comments)


class Directives:
    """The `# noqa` directives of one text, and which findings they silence.

    A finding is silenced by a directive in any line of its statement. The
    tokenizer runs only when a line of the text silences the finding's code
    (most directives name other tools' codes) and it is not the finding's own.
    """

    def __init__(self, lines: LineIndex) -> None:
        self.lines = lines
        self.present = NOQA.search(lines.text) is not None
        # code -> the lines whose directives silence it, in order.
        self._silencing: dict[str, list[int]] = {}

    @cached_property
    def layout(self) -> _Layout | None:
        return _layout(self.lines.text)

    def statement_lines(self, line: int) -> range:
        """The lines of the statement that `line` belongs to (just `line` when unknown)."""
        statement = self.layout.statement(line) if self.layout is not None else None
        return range(statement[0], statement[1] + 1) if statement else range(line, line + 1)

    @cached_property
    def _directive_lines(self) -> list[int]:
        """The lines that mention `noqa` (every line a directive can be read from), in order."""
        found = {self.lines.point(m.start())[0] for m in _NOQA_WORD.finditer(self.lines.text)}
        return sorted(found)

    def suppresses(self, line: int, code: str) -> bool:
        if not self.present:
            return False
        silencing = self._silencing.get(code)
        if silencing is None:
            silencing = [n for n in self._directive_lines if is_suppressed(self.lines.line(n), code)]
            self._silencing[code] = silencing
        if not silencing or line in silencing:
            return bool(silencing)
        statement = self.statement_lines(line)
        return any(n in statement for n in silencing)


# Adding directives ------------------------------------------------------------


@dataclass(frozen=True)
class LineEdit:
    """Replace columns [start, end) of 1-based line `line` (without its break) by `text`."""

    line: int
    start: int
    end: int
    text: str


class NoqaError(Exception):
    """Directives cannot be placed in this text; the message says why."""


def noqa_edits(text: str, findings: Iterable[tuple[int, str]]) -> list[LineEdit]:
    """The edits that silence each (line, code) finding of `text`, one per line changed.

    A finding's directive goes at the end of its own line when a comment can
    end that line; otherwise (the line ends inside a multi-line string, or in
    a backslash continuation) at the end of its statement's last line, which
    always can. Codes join an existing directive there (sorted); a line with
    another comment gets the directive after it.
    """
    lines = LineIndex(text)
    layout = _layout(text)
    if layout is None:
        raise NoqaError("cannot be tokenized")
    wanted: dict[int, set[str]] = {}
    for line, code in findings:
        target = _target(line, lines, layout)
        if target is None:
            raise NoqaError(f"line {line} lies in no statement")
        wanted.setdefault(target, set()).add(code)
    edits = []
    for line, codes in sorted(wanted.items()):
        edit = _directive_edit(lines.line(line), line, codes, layout.comments.get(line))
        if edit is not None:
            edits.append(edit)
    return edits


def _target(line: int, lines: LineIndex, layout: _Layout) -> int | None:
    """The line whose end takes the directive for a finding on `line`."""
    statement = layout.statement(line)
    if statement is None:
        return None
    if line not in layout.inside and (line in layout.comments or not lines.line(line).endswith("\\")):
        return line
    return statement[1]


def _directive_edit(
    text: str, line: int, codes: set[str], comment: tuple[int, str] | None
) -> LineEdit | None:
    """The edit of one line that makes it silence `codes`; None when it already does."""
    missing = {code for code in codes if not is_suppressed(text, code)}
    if not missing:
        return None
    if comment is not None:
        column, body = comment
        merged = _merged(body.rstrip(), missing)
        if merged is not None and all(is_suppressed(merged, code) for code in missing):
            return LineEdit(line, column, column + len(body), merged)
        end = column + len(body.rstrip())
    else:
        end = len(text.rstrip(" \t"))
    return LineEdit(line, end, len(text), f"  # noqa: {', '.join(sorted(missing))}")


def _merged(comment: str, codes: set[str]) -> str | None:
    """`comment` with `codes` joined to the codes of its first directive; None if it has none."""
    match = NOQA.search(comment)
    present = directive_codes(match) if match is not None else None
    if match is None or present is None:
        return None
    start = match.start("codes")
    end = start + len(match.group("codes").rstrip(", \t"))
    merged = sorted({*present, *codes}, key=lambda code: (code.upper(), code))
    return f"{comment[:start]}{', '.join(merged)}{comment[end:]}"


def apply_edits(text: str, edits: Sequence[LineEdit]) -> str:
    """`text` with the (non-overlapping) line edits made; line breaks and all else kept."""
    lines = LineIndex(text)
    pieces = []
    position = 0
    for edit in sorted(edits, key=lambda e: (e.line, e.start)):
        start = lines.offset((edit.line, edit.start))
        pieces += [text[position:start], edit.text]
        position = lines.offset((edit.line, edit.end))
    pieces.append(text[position:])
    return "".join(pieces)


# Unused directives ------------------------------------------------------------


class UnusedNoqa(Rule):
    """What `check --report-unused-noqa` reports. Not a rule the engine runs (it judges the
    other rules' results), but described like one, so that SARIF can list it."""

    code = "NOQA"
    name = "unused-noqa"
    message = "Unused `noqa` directive"
    default_enabled = False
    docs = """
    ## What it does
    With `--report-unused-noqa`, reports each TDL code in a `# noqa: ...` comment that silences
    no finding of its statement (or that no rule has). Blanket `# noqa` comments, other tools'
    codes and codes of rules that did not run are never reported.

    ## Why it matters
    A suppression whose finding is gone (the code was fixed, or the rule got more precise) would
    silently hide the next real finding on that line.

    ## Example
    ```python
    state = torch.load(path, map_location="cpu")  # noqa: TDL101
    ```

    ## Use instead
    ```python
    state = torch.load(path, map_location="cpu")
    ```

    ## Fix safety
    No fix: remove the code (or the comment) by hand.
    """


@dataclass(frozen=True)
class UnusedCode:
    """A TDL code in a directive that silences no finding."""

    line: int
    column: int  # 0-based column of the directive
    end_column: int
    code: str
    known: bool  # whether any rule has a code it matches


def unused_codes(
    text: str,
    silenced: Iterable[tuple[int, str]],
    selected: Sequence[str],
    known: Sequence[str],
) -> list[UnusedCode]:
    """The TDL codes of the comment directives in `text` that silence none of the `silenced`
    (line, code) findings.

    Only codes whose every matching rule is `selected` are judged: a code of a
    rule that did not run cannot be called unused. Blanket directives and
    other tools' codes are never reported; text inside strings is not a
    directive here.
    """
    if NOQA.search(text) is None:
        return []
    layout = _layout(text)
    if layout is None:
        return []
    by_statement: dict[tuple[int, int], list[str]] = {}
    for line, code in silenced:
        statement = layout.statement(line) or (line, line)
        by_statement.setdefault(statement, []).append(code)
    chosen = set(selected)
    unused = []
    for line, (column, comment) in sorted(layout.comments.items()):
        for match in NOQA.finditer(comment):
            statement = layout.statement(line) or (line, line)
            findings = by_statement.get(statement, [])
            for code in directive_codes(match) or ():
                upper = code.upper()
                if not upper.startswith(PREFIX):
                    continue
                matching = [k for k in known if k.startswith(upper)]
                if not all(k in chosen for k in matching):
                    continue
                if not any(f.startswith(upper) for f in findings):
                    unused.append(
                        UnusedCode(line, column + match.start(), column + match.end(), code, bool(matching))
                    )
    return unused
