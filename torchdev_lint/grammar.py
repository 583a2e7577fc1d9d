"""What a fixed file must keep: it parses on the oldest Python the project supports, and keeps its comments.

The fixer checks every round of fixes against the text the round started from
(`guard_problem`) and drops the fixes that break either property, so a rule
bug can cost a fix but never a file. LibCST's native parser accepts every
grammar whatever `PartialParserConfig(python_version=...)` says (LibCST issue
#740), and the interpreter running the tool may be newer than the project's
oldest Python, so the constructs newer grammars added are detected here, on
the tree, by what each needs. The check is relative: a construct the original
text already used does not make a fix fail (that code evidently targets a
newer Python than declared).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections import Counter
from collections.abc import Sequence

import libcst as cst

from torchdev_lint.syntax import comments

PythonVersion = tuple[int, int]

# The oldest Python the tool supports; also the default floor for fixed files.
OLDEST_PYTHON: PythonVersion = (3, 10)


# A lower bound in a `requires-python` specifier: `>=3.9`, `~=3.10`, `==3.11.*`, `>3.8`.
_LOWER_BOUND = re.compile(r"(?:>=|~=|==|>)\s*(\d+)\.(\d+)")


def requires_python_floor(specifier: str) -> PythonVersion | None:
    """The oldest Python (major, minor) a `requires-python` specifier admits, or None if it names none."""
    bounds = [(int(major), int(minor)) for major, minor in _LOWER_BOUND.findall(specifier)]
    return max(bounds) if bounds else None


class _Survey(cst.CSTVisitor):
    """Counts the comments and the version-gated constructs of one tree."""

    def __init__(self, module: cst.Module, oldest: PythonVersion) -> None:
        super().__init__()
        self.module = module
        self.oldest = oldest
        self.comments: Counter[str] = Counter()
        self.too_new: Counter[str] = Counter()

    def _needs(self, version: PythonVersion, what: str) -> None:
        if self.oldest < version:
            self.too_new[f"{what} needs Python {version[0]}.{version[1]}"] += 1

    def visit_Comment(self, node: cst.Comment) -> None:
        self.comments[node.value] += 1

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        if self.oldest < (3, 12):
            for problem in _pre_312_fstring_problems(self.module, node):
                self._needs((3, 12), problem)

    def visit_Match(self, node: cst.Match) -> None:
        self._needs((3, 10), "a match statement")

    def visit_TryStar(self, node: cst.TryStar) -> None:
        self._needs((3, 11), "`except*`")

    def visit_Index(self, node: cst.Index) -> None:
        if node.star is not None:
            self._needs((3, 11), "a starred subscript")

    def visit_TypeAlias(self, node: cst.TypeAlias) -> None:
        self._needs((3, 12), "a `type` statement")

    def visit_TypeParameters(self, node: cst.TypeParameters) -> None:
        self._needs((3, 12), "type parameters")


def _pre_312_fstring_problems(module: cst.Module, node: cst.FormattedString) -> list[str]:
    """Why Python 3.10/3.11 would reject this f-string, which PEP 701 (3.12) allows.

    Before 3.12 an f-string is first read as a plain string literal, so no
    replacement field may contain the closing quote or (in a single-quoted one)
    a line break; its expression part may hold neither a backslash nor a comment.
    """
    quote = node.end
    problems = []
    for field in _replacement_fields(node.parts):
        text = module.code_for_node(field)
        if quote in text:
            problems.append(f"reusing the quote {quote} inside an f-string field")
        if len(quote) == 1 and ("\n" in text or "\r" in text):
            problems.append("a line break inside a single-quoted f-string field")
        around = (field.whitespace_before_expression, field.expression, field.whitespace_after_expression)
        if any("\\" in module.code_for_node(part) for part in around):
            problems.append("a backslash inside an f-string expression")
        if any(comments(part) for part in around):
            problems.append("a comment inside an f-string expression")
    return problems


def _replacement_fields(
    parts: Sequence[cst.BaseFormattedStringContent],
) -> list[cst.FormattedStringExpression]:
    """The replacement fields of an f-string, those nested in format specs included."""
    fields = []
    for part in parts:
        if isinstance(part, cst.FormattedStringExpression):
            fields.append(part)
            if part.format_spec:
                fields.extend(_replacement_fields(part.format_spec))
    return fields


class Survey:
    """The comments and the too-new constructs of a module, for comparing a round's before and after."""

    def __init__(self, module: cst.Module, oldest: PythonVersion) -> None:
        visitor = _Survey(module, oldest)
        module.visit(visitor)
        self.comments = visitor.comments
        self.too_new = visitor.too_new
        self.compile_error = _compile_error(module)


def _compile_error(module: cst.Module) -> str | None:
    """The running interpreter's syntax error for the module's text, or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like
            compile(module.bytes, "<fixed>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return f"{error.msg} at line {error.lineno}"
    except (ValueError, RecursionError, MemoryError) as error:
        return str(error) or type(error).__name__
    return None


def guard_problem(before: Survey, after: cst.Module, oldest: PythonVersion) -> str | None:
    """Why the fixed module `after` must not replace the one `before` describes, or None.

    It must compile (when the original did), use no construct too new for
    `oldest` that the original did not already use, and keep every comment.
    """
    survey = Survey(after, oldest)
    introduced = survey.too_new - before.too_new
    if introduced:
        problem = sorted(introduced)[0]
        return f"the fixed code would not parse on Python {oldest[0]}.{oldest[1]}: {problem}"
    if survey.compile_error is not None and before.compile_error is None:
        return f"the fixed code does not compile: {survey.compile_error}"
    lost = before.comments - survey.comments
    if lost:
        return f"the fix would drop the comment {sorted(lost)[0]!r}"
    return None
