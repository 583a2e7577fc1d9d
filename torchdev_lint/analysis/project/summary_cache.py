"""Where pass 1's summaries (`analysis/project/summaries.py`) are cached on disk, by the file's content.

A summary is looked up before anything is parsed, so this module imports neither LibCST nor
the summarizer: a warm run reads JSON only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from torchdev_lint.analysis.project.pass_one_text import wants_summary
from torchdev_lint.diagnostics import SourceError

FOLDER = "summaries"
# A file's nn.Module classes alone (`summaries.module_classes`): what a file that only defines
# classes another file constructs tells the project, without a whole summary's walk.
CLASSES_FOLDER = "module_classes"
# Every field a cached summary must have (an entry written by an older tool lacks some).
_FIELDS = frozenset(
    {
        "functions",
        "sites",
        "aliases",
        "stars",
        "counts",
        "checkpoints",
        "batches",
        "loader_args",
        "forwards",
        "passed_on",
        "classes",
        "module_classes",
        "method_calls",
        "cuda_method_calls",
        "cuda_guards",
        "saved_files",
        "dataset_classes",
        "dataset_items",
        "dataset_calls",
        "returns",
        "cuda_defaults",
        "function_defaults",
        "constructions",
    }
)

Summary = dict[str, Any]


def entry(source: bytes, cache_directory: str | None, folder: str = FOLDER) -> str | None:
    """Where the summary (or what `folder` names) of a file holding `source` is cached (None: no cache)."""
    if cache_directory is None:
        return None
    from torchdev_lint.cache import summary_key

    return entry_for_key(summary_key(source), cache_directory, folder)


def entry_for_key(key: str, cache_directory: str, folder: str = FOLDER) -> str:
    """Where the summary (or what `folder` names) of key `key` (`cache.summary_key`) is cached."""
    return os.path.join(cache_directory, folder, key[:2], key + ".json")


def load(path: str) -> Summary | None:
    """The summary cached at `path`, or None when it is missing, unreadable or incomplete."""
    from torchdev_lint.cache import load_json

    data = load_json(path)
    return data if isinstance(data, dict) and _FIELDS <= data.keys() else None


def load_classes(path: str) -> dict[str, bool] | None:
    """The module classes cached at `path` (`CLASSES_FOLDER`), or None when missing or unreadable."""
    from torchdev_lint.cache import load_json

    data = load_json(path)
    valid = isinstance(data, dict) and all(isinstance(placed, bool) for placed in data.values())
    return data if valid else None


def cached(
    source: bytes,
    cache_directory: str | None,
    folder: str,
    load: Callable[[str], Any],
    make: Callable[[str, bytes], Any],
    path: str,
) -> Any:
    """What `make(path, source)` tells of a file holding `source`: from the cache under `folder`
    (`load` reads an entry, None when missing or incomplete), else made and stored; None where
    `make` cannot parse the file."""
    entry_path = entry(source, cache_directory, folder)
    found = load(entry_path) if entry_path is not None else None
    if found is None:
        try:
            found = make(path, source)
        except (SourceError, RecursionError):
            return None
        if entry_path is not None:
            store(entry_path, found)
    return found


def store(path: str, summary: Summary) -> None:
    from torchdev_lint.cache import store_json

    store_json(path, summary)


def needs_parse(source: bytes, cache_directory: str | None) -> bool:
    """Will pass 1 parse this checked file before any other is summarized: its text may hold a
    fact of its own, and no summary of it is cached? (The runner then checks it first and
    hands its summary to `project_facts`: one parse for both.)"""
    if not wants_summary(source):
        return False
    path = entry(source, cache_directory)
    return path is None or not os.path.exists(path)
