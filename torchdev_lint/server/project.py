"""The settings a document is checked with: those `torchdev-lint check` would use for its file.

The CLI reads the nearest pyproject.toml with a `[tool.torchdev-lint]` table
above the checked paths; for one document that is the table above the
document's own path. The parsed table is kept until the file changes on disk,
so a keystroke costs a walk up the folders (a few `stat` calls), not a TOML parse.

What a document takes from the rest of its project (`analysis/project/project_facts.py`)
comes from pass 1 over the whole project as saved (every file `check` would
find from the project folder), made when a document of it is first checked and
again after a save of one of its files, never per keystroke.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace

from torchdev_lint.analysis.project.index import ProjectIndex
from torchdev_lint.analysis.project.project_facts import ProjectPass, project_pass
from torchdev_lint.cache import FOLDER, ResultCache
from torchdev_lint.config import (
    LINE_LENGTH_FILES,
    ConfigError,
    FileConfig,
    Settings,
    codes_for,
    configured_line_length,
    find_config,
    load_config,
    oldest_python,
    select_rules,
)
from torchdev_lint.engine import parse
from torchdev_lint.files import discover, is_excluded
from torchdev_lint.grammar import PythonVersion
from torchdev_lint.rule import Rule
from torchdev_lint.runner import CheckOptions


@dataclass(frozen=True)
class Project:
    """What checking and fixing one file uses: its rules, settings and the oldest Python to keep."""

    config: FileConfig
    rules: tuple[type[Rule], ...]  # selected, minus those `per-file-ignores` turns off for the file
    settings: Settings
    oldest_python: PythonVersion
    excluded: bool  # `exclude`/`extend-exclude` name the file: the CLI would not check it
    cache_directory: str | None  # where the CLI keeps the project's summaries (None: not writable)


@dataclass(frozen=True)
class _Table:
    """A configuration file as read, with the selection and settings it gives every file."""

    config: FileConfig
    rules: tuple[type[Rule], ...]
    settings: Settings
    oldest_python: PythonVersion
    cache_directory: str | None


class Projects:
    """Resolves each document's project, re-reading a pyproject.toml only when it changed on disk,
    and keeps pass 1 of each project folder until one of its files is saved."""

    def __init__(self) -> None:
        self._tables: dict[str | None, tuple[tuple[int, int] | None, _Table]] = {}
        self._passes: dict[str, ProjectPass] = {}
        self._scratch: str | None = None  # summaries of projects without a configured cache
        # By folder: the line length found from there, with the stamps of the files it read.
        self._line_lengths: dict[str, tuple[tuple[tuple[int, int] | None, ...], int | None]] = {}

    def project_pass(self, path: str, project: Project) -> ProjectPass:
        """Pass 1 over the project folder of the file at `path`, as `torchdev-lint check` run there
        finds its files; without a project, over the files beside it (a file in a home folder must
        not read the whole tree below). Summaries are cached on disk."""
        scope = ProjectIndex().scope(path)  # a fresh index: folders and markers may have changed
        found = self._passes.get(scope)
        if found is None:
            found = project_pass(
                project_files(path, project), parse, project.cache_directory or self._scratch_directory()
            )
            self._passes[scope] = found
        return found

    def fix_options(
        self, path: str, project: Project, texts: Mapping[str, bytes]
    ) -> tuple[list[str], CheckOptions]:
        """The files of the project of the file at `path` (those `project_pass` reads) and the
        options `torchdev-lint check --diff` run on its folder would fix them with, reading
        `texts` (unsaved buffers, by path) instead of the disk."""
        scope = ProjectIndex().scope(path)
        table = self._table(project.config.path)
        config = table.config
        options = CheckOptions(
            rules=table.rules,
            settings=replace(table.settings, line_length=self._line_length(scope)),
            diff=True,
            per_file_ignores=config.per_file_ignores,
            root=config.root,
            with_edits=False,
            oldest_python=table.oldest_python,
            texts=texts,
        )
        return project_files(path, project), options

    def saved(self, path: str) -> list[str]:
        """A file was saved: the passes of the project folders holding it (returned) are made again
        when next asked."""
        dropped = [scope for scope in self._passes if inside(path, scope)]
        for scope in dropped:
            del self._passes[scope]
        return dropped

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _scratch_directory(self) -> str | None:
        if self._scratch is None:
            try:
                self._scratch = tempfile.mkdtemp(prefix="torchdev-lint-server-")
            except OSError:
                return None
        return self._scratch

    def for_path(self, path: str | None) -> Project:
        """The project of a file at `path` (None: a buffer without a file, checked with the defaults).

        Raises ConfigError when the configuration file is invalid, as the CLI does.
        """
        config_path = find_config([path]) if path is not None else None
        table = self._table(config_path)
        config = table.config
        rules = table.rules
        excluded = False
        if path is not None:
            codes = set(codes_for(path, [r.code for r in rules], config.per_file_ignores, config.root))
            rules = tuple(r for r in rules if r.code in codes)
            excluded = is_excluded(path, [*(config.exclude or ()), *config.extend_exclude], config.root)
        settings = table.settings
        if path is not None:
            settings = replace(settings, line_length=self._line_length(os.path.dirname(path)))
        return Project(config, rules, settings, table.oldest_python, excluded, table.cache_directory)

    def _line_length(self, folder: str) -> int | None:
        """The line length fixes keep to in `folder` (`configured_line_length`), looked for again
        only when one of the files it may read changed (a few `stat` calls per check)."""
        folder = os.path.abspath(folder)
        stamps = tuple(
            _file_stamp(os.path.join(d, n)) for d in _folders_up(folder) for n in LINE_LENGTH_FILES
        )
        known = self._line_lengths.get(folder)
        if known is not None and known[0] == stamps:
            return known[1]
        length = configured_line_length(folder)
        self._line_lengths[folder] = (stamps, length)
        return length

    def _table(self, config_path: str | None) -> _Table:
        stamp = _stamp(config_path)
        known = self._tables.get(config_path)
        if known is not None and known[0] == stamp:
            return known[1]
        config = load_config(config_path) if config_path is not None else FileConfig()
        table = _Table(
            config=config,
            rules=tuple(select_rules(config.select, config.ignore, config.extend_select)),
            settings=Settings(
                target_torch_version=config.target_torch_version or Settings.target_torch_version,
                device_policy=config.device_policy or Settings.device_policy,
            ),
            oldest_python=oldest_python(config),
            cache_directory=_cache_directory(config),
        )
        self._tables[config_path] = (stamp, table)
        return table


def project_files(path: str, project: Project) -> list[str]:
    """The Python files of the project folder of the file at `path`, as `torchdev-lint check` run
    there finds them; without a project, the files beside it (a file in a home folder must not
    read the whole tree below)."""
    index = ProjectIndex()
    scope = index.scope(path)
    config = project.config
    exclude = [*(config.exclude or ()), *config.extend_exclude]
    if index.root(path) is not None:
        files, _ = discover(
            [scope], exclude, root=config.root, respect_gitignore=True, include_notebooks=False
        )
        return files
    names = sorted(n for n in os.listdir(scope) if n.endswith(".py"))
    beside = [os.path.join(scope, n) for n in names]
    return [f for f in beside if os.path.isfile(f) and not is_excluded(f, exclude, config.root)]


def inside(path: str, folder: str) -> bool:
    """Is the file at `path` in `folder` or below?"""
    return os.path.abspath(path).startswith(os.path.join(folder, ""))


def _stamp(path: str | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        status = os.stat(path)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    return status.st_mtime_ns, status.st_size


def _folders_up(folder: str) -> list[str]:
    found = [folder]
    while os.path.dirname(found[-1]) != found[-1]:
        found.append(os.path.dirname(found[-1]))
    return found


def _file_stamp(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def _cache_directory(config: FileConfig) -> str | None:
    """The CLI's cache folder of a configured project; without a configuration file, none (the
    CLI would put it in the folder it runs in, which a server does not have)."""
    if config.path is None:
        return None
    cache = ResultCache.open(os.path.join(config.root, FOLDER))
    return cache.directory if cache is not None else None
