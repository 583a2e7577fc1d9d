"""Open documents and checking their text: the engine and the fixer, handed a buffer instead of a file.

Nothing here speaks LSP or touches the event loop: checks run on a worker
thread, and each result carries the version of the text it was made from, so
a result that a newer change overtook can be recognised and dropped.
"""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.config import ConfigError
from torchdev_lint.diagnostics import Diagnostic, Edit, SourceError
from torchdev_lint.engine import FileResult, Finding, check_source, parse
from torchdev_lint.fixes import fix_edits, fix_source, tidy_for
from torchdev_lint.runner import MAX_PROJECT_ROUNDS
from torchdev_lint.server.project import Project, Projects

if TYPE_CHECKING:
    import libcst as cst

    from torchdev_lint.analysis.project.project_facts import ProjectPass


@dataclass(frozen=True)
class Lint:
    """One check of one version of a document, with its parsed tree (code actions reuse it)."""

    version: int
    text: str
    diagnostics: tuple[Diagnostic, ...] = ()
    project: Project | None = None
    facts: FileFacts | None = None
    # Why the text was not checked: a syntax error, an invalid configuration.
    error: str | None = None
    result: FileResult | None = field(default=None, repr=False)
    findings: tuple[Finding, ...] = field(default=(), repr=False)  # aligned with `diagnostics`

    def fix_edits(self, index: int) -> tuple[Edit, ...]:
        """The text edits of the fix of `diagnostics[index]`, computed on demand: a check leaves
        them out, since generating them costs a code generation per fix and only a code action
        for that finding needs them."""
        finding, result = self.findings[index], self.result
        if finding.fix is None or result is None or result.module is None or result.lines is None:
            return ()
        return fix_edits(result.module, finding.fix, result.positions, result.lines, tidy_for(result))


@dataclass
class Document:
    """What the server keeps about an open document: its latest text and its latest check."""

    uri: str
    path: str | None  # None for a buffer that is no file (`untitled:`)
    text: str
    version: int
    lint: Lint | None = None
    # The scheduled or running check (an asyncio task), replaced on every change.
    pending: object | None = field(default=None, repr=False)


def path_of(uri: str) -> str | None:
    """The file system path of a `file:` URI; None for other schemes."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if re.match(r"/[A-Za-z]:", path):  # file:///C:/x on Windows
        path = path[1:]
    return path


def lint(document: Document, version: int, text: str, projects: Projects) -> Lint:
    """Check `text` (version `version` of the document) as `torchdev-lint check` would check its file."""
    try:
        project = projects.for_path(document.path)
    except ConfigError as error:
        return Lint(version, text, error=str(error))
    if project.excluded:
        return Lint(version, text, project=project)
    name = document.path or document.uri
    passed = None
    if document.path is not None and os.path.isfile(document.path):  # else `check` cannot see it
        passed = projects.project_pass(document.path, project)
    try:
        last = document.lint
        if (
            last is not None
            and (last.text, last.project, last.error) == (text, project, None)
            and last.result is not None
            and _facts(passed, name, last.result.module, text) == last.facts
        ):
            return replace(last, version=version)  # saved as last checked: the same check again
        # The facts of the file as saved, then of the buffer's own summary (from the same tree):
        # they differ only when the edit changed what the file calls or defines.
        guess = passed.of(name) if passed is not None else None
        result = check_source(name, text, project.rules, project.settings, project=guess)
        facts = _facts(passed, name, result.module, text)
        if facts != guess:
            module = result.module or parse(name, text)
            result = check_source(name, text, project.rules, project.settings, project=facts, module=module)
    except SourceError as error:
        return Lint(version, text, project=project, error=error.reason)
    reported = [(f, d) for f, d in zip(result.findings, result.diagnostics, strict=True) if not d.suppressed]
    return Lint(
        version,
        text,
        tuple(d for _, d in reported),
        project,
        facts,
        result=result,
        findings=tuple(f for f, _ in reported),
    )


def _facts(passed: ProjectPass | None, path: str, module: cst.Module | None, text: str) -> FileFacts | None:
    """What the buffer takes from its project: pass 1's facts with the summary of its own text."""
    if passed is None:
        return None
    from torchdev_lint.analysis.project.summaries import summarize

    try:
        tree = module if module is not None else parse(path, text)
        return passed.facts_with(path, summarize(tree, os.path.abspath(path)))
    except (SourceError, RecursionError):
        return passed.of(path)


def fix_all(document: Document, lint: Lint, projects: Projects) -> str | None:
    """The checked text with every safe fix applied as `--fix` applies them; None when nothing changes.

    Fixed until the document's own facts stop changing, as `--fix` fixes a file again when its
    fixes changed what the project tells it (the other files stay as they are: the
    `torchdev-lint.fixProject` command fixes those)."""
    project = lint.project
    if project is None or project.excluded or lint.error is not None:
        return None
    name = document.path or document.uri
    passed = None
    if document.path is not None and os.path.isfile(document.path):
        passed = projects.project_pass(document.path, project)
    encoding = declared_encoding(lint.text)
    text, facts = lint.text, lint.facts
    try:
        for _ in range(MAX_PROJECT_ROUNDS):
            outcome = fix_source(
                name,
                text.encode(encoding),
                project.rules,
                project.settings,
                oldest_python=project.oldest_python,
                project=facts,
            )
            fixed = outcome.source.decode(encoding)
            refreshed = _facts(passed, name, outcome.result.module, fixed)
            text, changed = fixed, fixed != text
            if not changed or refreshed == facts:
                break
            facts = refreshed
    except (SourceError, UnicodeError):
        return None
    return text if text != lint.text else None


_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)


def declared_encoding(text: str) -> str:
    """The encoding the text's coding cookie declares (the fixer re-encodes with it), else UTF-8."""
    for line in text.splitlines()[:2]:
        match = _CODING.match(line)
        if match is not None:
            try:
                return codecs.lookup(match.group(1)).name
            except LookupError:
                return "utf-8"
        if line.strip() and not line.lstrip().startswith("#"):
            break
    return "utf-8"
