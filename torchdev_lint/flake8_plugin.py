"""flake8 entry point (prefix TDL): flake8's protocol around the same engine.

flake8 handles the final select/ignore decision itself, and `# noqa` too,
though case-sensitively: the plugin leaves out what `check` suppresses, so
`# noqa: tdl1` silences both. Opt-in
rules are added to its default ignore list so they stay off under the default
selection, and the plugin runs only the rules that `torchdev-lint check`
would run for the same `--select`/`--extend-select`: a prefix such as
`--select TDL` enables the default rules, an opt-in rule needs its full code.
That keeps `flake8 --select TDL` and `torchdev-lint check --select TDL`
reporting the same findings.

flake8 hands the plugin one file. Facts from the rest of the project (a CUDA
gate in another file, a helper that saves or moves what it is given) come
from the summaries `torchdev-lint check` left in the project's cache folder
(`.torchdev_lint_cache` in the project root, or `--torchdev-cache-dir`): pass 1
runs over this file with those summaries and parses no other file. A file
whose summary is not cached for its current text (never checked, or edited
since) stays unknown, so its facts are missing, never wrong; without a cache
folder, or when flake8's text is not the file's (an unsaved buffer on stdin),
the file is checked on its own. The facts found are kept in the cache folder with
what pass 1 read (`analysis/project/facts_memo.py`): the next run over an unchanged file
and unchanged imports gets them without the pass.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import tokenize
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import libcst as cst

from torchdev_lint import __version__
from torchdev_lint.analysis.project.facts_memo import file_facts
from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.analysis.project.summary_cache import FOLDER as SUMMARIES
from torchdev_lint.cache import FOLDER
from torchdev_lint.config import ConfigError, Settings, find_config, parse_version, select_rules
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source, parse
from torchdev_lint.files import read_source
from torchdev_lint.rule import Rule, all_rules

PREFIX = "TDL"
# Folder of a checked file -> the cache folder of its project (None: there is none).
_CACHE_FOLDERS: dict[str, str | None] = {}


def _ours(selectors: Sequence[str] | None) -> list[str] | None:
    """The flake8 selectors that can match a TDL code (`T`, `TDL`, `TDL2`, `TDL201`)."""
    if selectors is None:
        return None
    chosen = [s.strip().upper() for s in selectors]
    return [s for s in chosen if s and (PREFIX.startswith(s) or s.startswith(PREFIX))]


class TorchDevLintPlugin:
    name = "torchdev-lint"
    version = __version__

    rules: ClassVar[tuple[type[Rule], ...] | None] = None
    settings: ClassVar[Settings] = Settings()
    # flake8 matches noqa codes case-sensitively; `check` does not. The plugin
    # drops what `check` would suppress, so both report the same lines.
    honour_noqa: ClassVar[bool] = True
    # `--torchdev-cache-dir`; None: each file's project root holds `.torchdev_lint_cache`.
    cache_directory: ClassVar[str | None] = None

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        self.tree = tree
        self.filename = filename
        self.lines = lines

    @classmethod
    def add_options(cls, option_manager: Any) -> None:
        option_manager.add_option(
            "--torchdev-target-torch-version",
            default=None,
            parse_from_config=True,
            help="oldest torch version the checked code supports, e.g. 2.4 (default: 2.6)",
        )
        option_manager.add_option(
            "--torchdev-cache-dir",
            default=None,
            parse_from_config=True,
            help="the cache folder `torchdev-lint check --cache-dir` wrote, to read project facts from "
            "(default: .torchdev_lint_cache in the project root)",
        )
        option_manager.extend_default_ignore([r.code for r in all_rules() if not r.default_enabled])

    @classmethod
    def parse_options(cls, options: argparse.Namespace) -> None:
        version = getattr(options, "torchdev_target_torch_version", None)
        try:
            cls.settings = Settings(target_torch_version=parse_version(version)) if version else Settings()
        except ConfigError as error:
            raise SystemExit(f"flake8: torchdev-target-torch-version: {error}") from None
        select = _ours(getattr(options, "select", None))
        extend = _ours(getattr(options, "extend_select", None)) or []
        cls.rules = tuple(select_rules(select, (), extend))
        cls.honour_noqa = not getattr(options, "disable_noqa", False)
        cls.cache_directory = getattr(options, "torchdev_cache_dir", None)

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        rules = self.rules if self.rules is not None else select_rules()
        source = "".join(self.lines)
        # flake8's own `ast` tree is reused, not built again.
        tree = self.tree if isinstance(self.tree, ast.Module) else None
        parsed: list[cst.Module] = []
        try:
            facts = self._project_facts(source, tree, parsed)
            # The lines are the pre-check: a file without any selected rule's trigger text
            # gets no LibCST tree (unless pass 1 parsed it already, or it has project facts).
            result = check_source(
                self.filename,
                source,
                rules,
                self.settings,
                python_tree=tree,
                project=facts,
                module=parsed[0] if parsed else None,
                fixes=False,  # flake8 shows no fix: findings only, the same as `check`'s
            )
        except SourceError:
            return  # flake8 reports syntax errors itself (E999)
        for diagnostic in result.diagnostics:
            if diagnostic.suppressed and self.honour_noqa:
                continue
            yield (
                diagnostic.line,
                diagnostic.column - 1,
                f"{diagnostic.code} {diagnostic.message}",
                type(self),
            )

    def _project_facts(
        self, source: str, tree: ast.Module | None, parsed: list[cst.Module]
    ) -> FileFacts | None:
        """This file's facts from the summaries in the project cache (see the module docstring);
        a parse of this file that pass 1 needs is appended to `parsed`, for the check to reuse."""
        folder = self.cache_directory or _project_cache(self.filename)
        if folder is None or not os.path.isdir(os.path.join(folder, SUMMARIES)):
            return None
        if not _is_file_text(self.filename, source):
            return None
        target = os.path.abspath(self.filename)

        def parse_this_file_only(path: str, data: bytes) -> cst.Module:
            if os.path.abspath(path) != target:
                raise SourceError(path, "not summarized in the cache: flake8 parses only the file it checks")
            parsed.append(parse(self.filename, source, tree))
            return parsed[-1]

        return file_facts(self.filename, parse_this_file_only, folder)


def _project_cache(filename: str) -> str | None:
    """Where `torchdev-lint check` run in the file's project keeps its cache: the project root
    (the folder of the nearest pyproject.toml with a `[tool.torchdev-lint]` table, else the
    current folder, as for `check`), once per folder."""
    directory = os.path.dirname(os.path.abspath(filename))
    if directory not in _CACHE_FOLDERS:
        found = find_config([filename])
        root = os.path.dirname(os.path.abspath(found)) if found is not None else os.getcwd()
        folder = os.path.join(root, FOLDER)
        _CACHE_FOLDERS[directory] = folder if os.path.isdir(folder) else None
    return _CACHE_FOLDERS[directory]


def _is_file_text(filename: str, text: str) -> bool:
    """Does the file on disk hold `text` (as flake8 decoded it: newlines made `\n`)? Summaries are
    looked up by the file's bytes, so a buffer that differs from them gets no project facts."""
    try:
        data = read_source(filename)
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        on_disk = data.decode(encoding)
    except (SourceError, SyntaxError, UnicodeDecodeError, LookupError):
        return False
    return _newlines(on_disk) == _newlines(text)


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
