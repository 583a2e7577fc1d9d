"""Finding source files, reading them, and writing fixed files atomically."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Sequence

from torchdev_lint.config import glob_matches
from torchdev_lint.diagnostics import SourceError

try:
    import fcntl
except ImportError:  # Windows: no flock, so no cleanup of abandoned temporary files
    fcntl = None  # type: ignore[assignment]

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "__pycache__",
        "build",
        "dist",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".torchdev_lint_cache",
        "node_modules",
        ".eggs",
        "site-packages",
    }
)
PYTHON_SUFFIXES = (".py", ".pyi")
NOTEBOOK_SUFFIX = ".ipynb"


def is_excluded(path: str, patterns: Sequence[str], root: str = ".") -> bool:
    """True when the path (relative to `root`), or any of its parts, matches an exclude glob."""
    return any(glob_matches(path, pattern, root) for pattern in patterns)


def _is_virtualenv(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, "pyvenv.cfg"))


def discover(
    paths: Iterable[str],
    exclude: Sequence[str] = (),
    *,
    root: str = ".",
    respect_gitignore: bool = False,
    include_notebooks: bool = True,
) -> tuple[list[str], list[SourceError]]:
    """Python files under `paths`, sorted, and an error for each path that is missing.

    Files named explicitly are checked whatever their suffix (as flake8 does)
    unless an exclude glob matches them; directories are searched for
    `.py`/`.pyi` files (and `.ipynb` notebooks with `include_notebooks`)
    without following symlinks, so a symlink loop cannot trap the walk, and
    (with `respect_gitignore`) without the files git ignores.
    """
    suffixes = (*PYTHON_SUFFIXES, NOTEBOOK_SUFFIX) if include_notebooks else PYTHON_SUFFIXES
    found: list[str] = []
    errors: list[SourceError] = []
    for raw in paths:
        path = os.path.normpath(raw) if raw not in (".", "") else "."
        if os.path.isdir(path):
            walked = list(_walk(path, exclude, root, suffixes))
            if respect_gitignore:
                walked = _drop_git_ignored(path, walked)
            found.extend(walked)
        elif os.path.exists(path) or os.path.islink(path):
            if not is_excluded(path, exclude, root):
                found.append(path)
        else:
            errors.append(SourceError(raw, "no such file or directory"))
    return sorted(dict.fromkeys(found)), errors


def _walk(top: str, exclude: Sequence[str], root: str, suffixes: tuple[str, ...]) -> Iterable[str]:
    for directory, subdirs, files in os.walk(top):
        subdirs[:] = sorted(
            d
            for d in subdirs
            if d not in SKIPPED_DIRS
            and not d.endswith(".egg-info")
            and not is_excluded(os.path.join(directory, d), exclude, root)
            and not _is_virtualenv(os.path.join(directory, d))
        )
        for name in files:
            path = os.path.join(directory, name)
            if name.endswith(suffixes) and not is_excluded(path, exclude, root):
                yield path.removeprefix("./")


def _drop_git_ignored(top: str, files: list[str]) -> list[str]:
    """`files` minus those git ignores, asked of `git check-ignore` in one call.

    Outside a git work tree (or without git) nothing is dropped: .gitignore
    files mean nothing there. Nor when the folder named on the command line is
    itself ignored (`torchdev-lint check .venv/lib/.../torch`): asking for it
    by name overrides the ignore file, as naming a file does.
    """
    if not files:
        return files
    import subprocess  # only here: a run that reads no .gitignore need not load it

    names = [".", *(os.path.relpath(f, top) for f in files)]
    try:
        result = subprocess.run(
            ["git", "-C", top, "check-ignore", "--stdin", "-z"],
            input="\0".join(names) + "\0",
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return files
    if result.returncode not in (0, 1):  # 128: not a git repository
        return files
    ignored = {os.path.normpath(name) for name in result.stdout.split("\0") if name}
    if "." in ignored:
        return files
    return [f for f in files if os.path.normpath(os.path.relpath(f, top)) not in ignored]


def read_source(path: str) -> bytes:
    """The file's bytes. Opened without blocking and checked to be a regular file, so
    a FIFO or device named like a source file cannot hang the run."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SourceError(path, "file vanished before it could be read") from None
    except IsADirectoryError:
        raise SourceError(path, "is a directory") from None
    except OSError as error:
        raise SourceError(path, f"cannot read: {error.strerror or error}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SourceError(path, "is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise SourceError(path, "not a regular file")
        return read_all(fd, info.st_size)
    except OSError as error:
        raise SourceError(path, f"cannot read: {error.strerror or error}") from None
    finally:
        os.close(fd)


def read_all(fd: int, size_hint: int = 0) -> bytes:
    """Everything left in `fd`, in plain reads: a file object's buffering, terminal test and
    seeks would double the system calls of a run the cache answers."""
    chunks = []
    while chunk := os.read(fd, max(size_hint + 1, 1 << 16)):
        chunks.append(chunk)
    return b"".join(chunks)


TEMP_SUFFIX = ".tdl-tmp"


def write_atomic(path: str, data: bytes) -> None:
    """Replace the file's content in one step, keeping its permissions.

    The new content goes to a temporary file `.<name>.<random>.tdl-tmp` in the
    same directory, which is flushed to disk and renamed over the original: a
    reader (or a crash) sees the old file or the new one, never a mix. The
    temporary file is locked (flock) until it is renamed, so a writer killed
    midway leaves an unlocked one that `remove_stale_temp_files` of a later
    run removes. A read-only file is refused.
    """
    try:
        info = os.stat(path)
    except OSError as error:
        raise SourceError(path, f"cannot write: {error.strerror or error}") from None
    if not info.st_mode & stat.S_IWUSR:
        raise SourceError(path, "file is read-only; fixes not written")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = _locked_temp_file(directory, os.path.basename(path))
    except OSError as error:
        raise SourceError(path, f"cannot write: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "wb") as handle:  # open (so locked) until renamed
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.chmod(temp, stat.S_IMODE(info.st_mode))
            os.replace(temp, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(error, OSError):
            raise SourceError(path, f"cannot write: {error.strerror or error}") from None
        raise


def _locked_temp_file(directory: str, name: str) -> tuple[int, str]:
    """A new temporary file, created and locked; retried if a cleanup removed it before the lock."""
    import tempfile  # only for writing fixes: a check need not load it

    while True:
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=directory)
        if fcntl is None:
            return fd, temp
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            return fd, temp
        os.close(fd)


def remove_stale_temp_files(paths: Iterable[str]) -> None:
    """Remove temporary files that killed writers left next to `paths` (their lock is free).

    A live writer holds its temporary file's lock until the rename, and the
    lock dies with the process, so only abandoned files are removed. Without
    flock (Windows) nothing is removed.
    """
    if fcntl is None:
        return
    for directory in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                _remove_if_abandoned(os.path.join(directory, name))


def _remove_if_abandoned(temp: str) -> None:
    try:
        fd = os.open(temp, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.path.samestat(os.fstat(fd), os.stat(temp)):
            os.unlink(temp)
    except OSError:
        pass  # locked by a live writer, or already gone
    finally:
        os.close(fd)
