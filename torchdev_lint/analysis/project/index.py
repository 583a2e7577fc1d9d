"""The project index: which file a project's own import names, as Python would find it.

A project is the folder holding the nearest `pyproject.toml`, `setup.py`,
`setup.cfg` or `.git` above a checked file. An absolute import is looked up
where Python would look when the file runs: beside the file (a script run as
`python tools/train.py` imports `utils` from `tools/`), above the topmost
package holding the file, at the project root, and in its `src/` folder.
Regular packages, namespace folders and modules are all found; anything
found nowhere (torch, numpy, the standard library) is third-party and stays
opaque. The index asks only the file system (answers cached, and kept in `probes`:
pass 1's answer depends on nothing else of the file system, see `analysis/project/facts_memo.py`),
never parses.
An installed package (below a `site-packages` or `dist-packages` folder) is in no
project, whatever lies above it (a virtual environment inside a repository).
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Packaging metadata: a project with one is a library others install (and import from).
_DISTRIBUTION_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")
_INSTALLED = ("site-packages", "dist-packages")
_INIT = "__init__.py"


class Located(NamedTuple):
    """Where a dotted import path leads: a module file and the attribute path left inside it
    (`("pkg/utils.py", ("init_distributed_mode",))`); no file for a namespace folder."""

    file: str | None
    attributes: tuple[str, ...]


class ProjectIndex:
    """Module lookup for the files of one run (any number of projects)."""

    def __init__(self) -> None:
        self._roots: dict[str, str | None] = {}
        self._search: dict[str, tuple[str, ...]] = {}
        self._kinds: dict[str, int] = {}
        self._distributed: dict[str, bool] = {}
        # (importing file, level, dotted) -> where it leads: pass 1 asks thousands of times.
        self._located: dict[tuple[str, int, str], Located | None] = {}
        self._located_from: dict[tuple[str, int, str], Located | None] = {}  # by the file's folder

    def root(self, path: str) -> str | None:
        """The project folder of `path`: the nearest folder above it with a project marker."""
        folder = os.path.dirname(os.path.abspath(path))
        seen = []
        found: str | None = None
        while True:
            if folder in self._roots:
                found = self._roots[folder]
                break
            if os.path.basename(folder) in _INSTALLED:
                break
            seen.append(folder)
            if any(self._kind(os.path.join(folder, marker)) for marker in ROOT_MARKERS):
                found = folder
                break
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        for visited in seen:
            self._roots[visited] = found
        return found

    def scope(self, path: str) -> str:
        """The folder whose files a check of `path` may read: its project, or without one the
        file's own folder (scripts beside each other)."""
        root = self.root(path)
        return root if root is not None else os.path.dirname(os.path.abspath(path))

    def search_path(self, path: str) -> tuple[str, ...]:
        """Where an absolute import in `path` is looked up, in order."""
        folder = os.path.dirname(os.path.abspath(path))
        found = self._search.get(folder)
        if found is None:
            top = folder
            while self._kind(os.path.join(top, _INIT)) == _FILE and os.path.dirname(top) != top:
                top = os.path.dirname(top)
            root = self.root(path)
            candidates = [folder, top]
            if root is not None:
                candidates += [root, os.path.join(root, "src")]
            found = tuple(dict.fromkeys(c for c in candidates if self._kind(c) == _FOLDER))
            self._search[folder] = found
        return found

    def locate(self, path: str, level: int, dotted: str) -> Located | None:
        """The module that `dotted` (relative by `level` dots) names from `path`, or None when
        it is not the project's own (third-party, missing, or above the file system root)."""
        key = (path, level, dotted)
        if key not in self._located:
            # What an import names depends on the importing file's folder only: the files of a
            # folder share their lookups (`import torch` is looked for once per folder).
            shared = (os.path.dirname(path), level, dotted)
            if shared not in self._located_from:
                self._located_from[shared] = self._locate(path, level, dotted)
            self._located[key] = self._located_from[shared]
        return self._located[key]

    def _locate(self, path: str, level: int, dotted: str) -> Located | None:
        parts = tuple(part for part in dotted.split(".") if part)
        if level:
            folder = os.path.dirname(os.path.abspath(path))
            for _ in range(level - 1):
                parent = os.path.dirname(folder)
                if parent == folder:
                    return None
                folder = parent
            return self._walk(folder, parts, relative=True)
        for folder in self.search_path(path):
            found = self._walk(folder, parts, relative=False)
            if found is not None:
                return found
        return self._own_package(path, parts)

    def _own_package(self, path: str, parts: tuple[str, ...]) -> Located | None:
        """`pytorch_tabnet.utils` imported from `pytorch_tabnet/tab_model.py` where the folder
        has no `__init__.py` (a namespace package, as some wheels ship it): the folder the file
        lives in, or one above it, named like the import's first part is that package."""
        folder = os.path.dirname(os.path.abspath(path))
        while parts and os.path.dirname(folder) != folder:
            if os.path.basename(folder) == parts[0]:
                return self._walk(os.path.dirname(folder), parts, relative=False)
            folder = os.path.dirname(folder)
        return None

    def _walk(self, folder: str, parts: tuple[str, ...], *, relative: bool) -> Located | None:
        """Descend `parts` from `folder` as Python's path finder would: a regular package before
        a module of the same name, a namespace folder last; the rest are attributes."""
        if not parts:
            return Located(self._package_file(folder), ()) if relative else None
        for index, part in enumerate(parts):
            candidate = os.path.join(folder, part)
            if self._kind(os.path.join(candidate, _INIT)) == _FILE:
                folder = candidate
            elif self._kind(candidate + ".py") == _FILE:
                return Located(candidate + ".py", parts[index + 1 :])
            elif self._kind(candidate) == _FOLDER:
                folder = candidate
            elif index == 0 and not relative:
                return None  # not found here: another folder of the search path, or third-party
            else:
                return Located(self._package_file(folder), parts[index:])
        return Located(self._package_file(folder), ())

    def is_package(self, folder: str) -> bool:
        """Is `folder` a regular package (it holds an `__init__.py`)?"""
        return self._package_file(folder) is not None

    def distributed(self, folder: str) -> bool:
        """Is the package folder part of a library others install: under `site-packages`, or in a
        project whose root (the nearest folder with a project marker) has packaging metadata?"""
        found = self._distributed.get(folder)
        if found is None:
            if os.path.basename(folder) in _INSTALLED:
                found = True
            elif any(self._kind(os.path.join(folder, marker)) for marker in _DISTRIBUTION_MARKERS):
                found = True
            else:
                parent = os.path.dirname(folder)
                if parent == folder or self._kind(os.path.join(folder, ".git")):
                    found = False
                else:
                    found = self.distributed(parent)
            self._distributed[folder] = found
        return found

    @property
    def probes(self) -> dict[str, int]:
        """Every path asked about so far and what was there (`path_kind`); not to be changed."""
        return self._kinds

    def _package_file(self, folder: str) -> str | None:
        init = os.path.join(folder, _INIT)
        return init if self._kind(init) == _FILE else None

    def _kind(self, path: str) -> int:
        kind = self._kinds.get(path)
        if kind is None:
            kind = self._kinds[path] = path_kind(path)
        return kind


_MISSING, _FILE, _FOLDER = 0, 1, 2


def path_kind(path: str) -> int:
    """What the file system holds at `path`: a folder, a file, or nothing (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return _MISSING
    return _FOLDER if stat.S_ISDIR(mode) else _FILE
