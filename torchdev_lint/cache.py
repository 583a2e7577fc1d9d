"""Per-file result cache: a re-run over unchanged files does no parsing at all.

An entry holds what the report of one checked file needs (remaining
diagnostics with their fix info, the source lines text output shows, or the
error that stopped the check). Its key (`entry_key`; with `summary_key`, the
key of a file's pass-1 summary, the only places keys are made) hashes the
file's path and bytes together with everything that changes results: the
tool's own code (its version and the size and modification time of each of
its sources, so that editing a rule invalidates the cache even without a
version bump), LibCST's version (it decides what parses and how code is
generated), the rules run on the file, the settings, whether fix edits were
computed, and a digest of what the file's result depends on in other files
(their pass-1 facts). Entries are single JSON files written atomically; one
that cannot be read or decoded is treated as a miss and overwritten, never an
error. Looking entries up needs neither LibCST nor the rules (see catalog.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple

from torchdev_lint import __version__
from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import Diagnostic, Edit, FileReport, FixInfo, SourceError
from torchdev_lint.files import read_all, read_source

FOLDER = ".torchdev_lint_cache"
# Bump when the entry layout changes.
FORMAT = 1


@cache
def tool_fingerprint() -> str:
    """The version plus the path, size and modification time of each of the package's sources.

    Size and time, as Python's own bytecode cache uses, not the bytes: reading and
    hashing the whole package would be a good part of a run the cache answers.
    """
    digest = hashlib.sha256(f"{__version__}/{FORMAT}".encode())
    package = os.path.dirname(os.path.abspath(__file__))
    sources = []
    for folder, subfolders, names in os.walk(package):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        sources += [os.path.join(folder, name) for name in names if name.endswith(".py")]
    for path in sorted(sources):
        with contextlib.suppress(OSError):
            info = os.stat(path)
            relative = os.path.relpath(path, package).replace(os.sep, "/")
            digest.update(f"{relative}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()


@cache
def libcst_version() -> str:
    """The installed LibCST's version, found without importing it (a run the cache answers never
    imports LibCST): the name of its distribution's metadata folder next to the package."""
    spec = importlib.util.find_spec("libcst")
    if spec is None or spec.origin is None:
        return "not installed"
    site = os.path.dirname(os.path.dirname(spec.origin))
    with contextlib.suppress(OSError):
        for name in os.listdir(site):
            if name.startswith("libcst-") and name.endswith((".dist-info", ".egg-info")):
                return name.removeprefix("libcst-").rsplit(".", 1)[0]
    from importlib.metadata import PackageNotFoundError, version  # slower; for unusual installs

    try:
        return version("libcst")
    except PackageNotFoundError:
        return "unknown"


@cache
def _header(
    fingerprint: str, libcst: str, codes: tuple[str, ...], settings: Settings, with_edits: bool
) -> bytes:
    """What the keys of one run share (computed once, not per file)."""
    return json.dumps([fingerprint, libcst, codes, repr(settings), with_edits]).encode()


def entry_key(
    path: str,
    source: bytes,
    codes: Sequence[str],
    settings: Settings,
    with_edits: bool,
    dependencies: str = "",
) -> str:
    """The cache entry of `path` holding `source`, checked with the rules `codes` and these settings.

    `dependencies` is a digest of the facts the file's result takes from other files (their
    summaries, not their text), so that an edit elsewhere that changes no fact it uses keeps
    the entry; empty while a check reads only the file itself.
    """
    header = _header(tool_fingerprint(), libcst_version(), tuple(codes), settings, with_edits)
    return hashlib.sha256(
        b"%s\0%s\0%s\0%s" % (header, dependencies.encode(), path.encode(errors="surrogateescape"), source)
    ).hexdigest()


def summary_key(source: bytes) -> str:
    """The key of the pass-1 summary of a file holding `source` (analysis/project/summaries.py): a
    function of its bytes, the tool's code and LibCST's version (the tree it is made from)."""
    return hashlib.sha256(
        b"%s\0%s\0%s" % (tool_fingerprint().encode(), libcst_version().encode(), source)
    ).hexdigest()


class CachedResult(NamedTuple):
    """A file's check outcome as stored."""

    diagnostics: list[Diagnostic]
    source_lines: dict[int, str]
    error: str | None = None


class ResultCache(NamedTuple):
    """A cache folder; plain data so that worker processes can receive it."""

    directory: str

    @classmethod
    def open(cls, directory: str) -> ResultCache | None:
        """The cache in `directory`, created with a `.gitignore`; None when it cannot be created."""
        try:
            os.makedirs(directory, exist_ok=True)
            ignore = os.path.join(directory, ".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w", encoding="utf-8") as handle:
                    handle.write("# Created by torchdev-lint.\n*\n")
        except OSError:
            return None
        return cls(directory)

    def report(
        self, path: str, codes: Sequence[str], settings: Settings, with_edits: bool, dependencies: str = ""
    ) -> FileReport | None:
        """The cached report of `path` as it is now, or None (also when it cannot be read)."""
        try:
            source = read_source(path)
        except SourceError:
            return None
        cached = self.load(entry_key(path, source, codes, settings, with_edits, dependencies))
        if cached is None:
            return None
        return FileReport(path, cached.diagnostics, cached.source_lines, error=cached.error)

    def _entry(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".json")

    def load(self, key: str) -> CachedResult | None:
        """The stored result, or None when absent or unreadable."""
        data = load_json(self._entry(key))
        try:
            return CachedResult(
                diagnostics=[_diagnostic(d) for d in data["diagnostics"]],
                source_lines={int(n): str(s) for n, s in data["source_lines"].items()},
                error=data["error"],
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def store(self, key: str, result: CachedResult) -> None:
        """Write atomically (temporary file + rename); a failure only costs the entry."""
        data = {
            "diagnostics": [d.to_json() for d in result.diagnostics],
            "source_lines": {str(n): s for n, s in result.source_lines.items()},
            "error": result.error,
        }
        store_json(self._entry(key), data)


def load_json(entry: str) -> Any:
    """A cache entry's data, or None when it is absent or unreadable (a miss, never an error)."""
    try:
        fd = os.open(entry, os.O_RDONLY)
        try:
            return json.loads(read_all(fd))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None


def store_json(entry: str, data: object) -> None:
    """Write a cache entry atomically (temporary file + rename); a failure only costs the entry."""
    import tempfile  # only on a miss: a run answered from the cache need not load it

    try:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(entry), suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(data, stream, separators=(",", ":"))
            os.replace(temporary, entry)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError:
        pass


def _diagnostic(data: dict[str, Any]) -> Diagnostic:  # parsed JSON from a cache file
    fix = data["fix"]
    info = None
    if fix is not None:
        if not isinstance(fix, dict):
            raise TypeError("fix must be an object")
        edits = tuple(
            Edit(e["line"], e["column"], e["end_line"], e["end_column"], e["content"], e.get("cell"))
            for e in fix["edits"]
        )
        follow_ups = tuple(_diagnostic(d) for d in fix.get("follow_ups", ()))
        info = FixInfo(fix["safety"], fix["message"], edits, follow_ups, fix.get("not_applied"))
    return Diagnostic(
        path=str(data["path"]),
        line=int(data["line"]),
        column=int(data["column"]),
        end_line=int(data["end_line"]),
        end_column=int(data["end_column"]),
        code=str(data["code"]),
        name=str(data["name"]),
        message=str(data["message"]),
        fix=info,
        cell=data.get("cell"),
    )
