"""One file's project facts kept with what pass 1 read to find them (the flake8 plugin's pass 1).

flake8 checks a file at a time. With the cache `check` wrote, the plugin's pass 1 reads the
summaries of every module the file leads to (44 files for accelerate's `accelerator.py`), a
third of the cost of parsing the file. That pass is a function of the bytes of the files it
reads, of which of them get a summary (the plugin parses no file but its own: another file's
summary comes from the cache or not at all) and of what the file system holds at each path the
project index asks about. So the facts are stored with all three and given again while every one
is unchanged: a read and a hash of each file, a look at each cache entry and each probed path.
Anything changed, missing or unreadable in the stored entry is a miss: pass 1 runs again.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from torchdev_lint.analysis.project import summary_cache
from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.analysis.project.index import path_kind
from torchdev_lint.analysis.project.project_facts import Parse, PassInputs, recorded_facts
from torchdev_lint.cache import load_json, store_json, summary_key, tool_fingerprint
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.files import read_source

FOLDER = "file_facts"


def file_facts(path: str, parse: Parse, cache_directory: str) -> FileFacts | None:
    """`project_facts([path], parse, cache_directory).of(path)`, where `parse` parses `path`
    only: from the entry kept for `path` when nothing pass 1 read has changed since."""
    if not path.endswith(".py"):
        return None
    target = os.path.abspath(path)
    entry = _entry(target, cache_directory)
    kept = _load(entry)
    if kept is not None and _unchanged(kept, target, cache_directory):
        return _facts(kept["facts"])
    facts, inputs = recorded_facts(path, parse, cache_directory)
    store_json(entry, _encoded(facts, inputs))
    return facts


def _entry(target: str, cache_directory: str) -> str:
    key = hashlib.sha256(f"{tool_fingerprint()}\0{target}".encode()).hexdigest()
    return os.path.join(cache_directory, FOLDER, key[:2], key + ".json")


def _encoded(facts: FileFacts | None, inputs: PassInputs) -> dict[str, Any]:
    return {
        "facts": None if facts is None else [sorted(member) for member in facts],
        "sources": {path: _key(source) for path, source in inputs.sources.items()},
        "summarized": inputs.summarized,
        "classified": inputs.classified,
        "probes": inputs.probes,
    }


def _key(source: bytes | None) -> str | None:
    return None if source is None else summary_key(source)


def _unchanged(kept: dict[str, Any], target: str, cache_directory: str) -> bool:
    """Would pass 1 read the same bytes, get the same summaries and find the same paths?"""
    for path, key in kept["sources"].items():
        try:
            now = _key(read_source(path))
        except SourceError:
            now = None
        if now != key:
            return False
        # The plugin parses its own file: any other gets its summary (or its module classes) from
        # the cache only.
        if path == target or key is None:
            continue
        for recorded, folder in (
            (kept["summarized"], summary_cache.FOLDER),
            (kept["classified"], summary_cache.CLASSES_FOLDER),
        ):
            if path in recorded:
                cached = os.path.exists(summary_cache.entry_for_key(key, cache_directory, folder))
                if cached != recorded[path]:
                    return False
    return all(path_kind(path) == kind for path, kind in kept["probes"].items())


def _facts(stored: list[list[Any]] | None) -> FileFacts | None:
    """The facts as stored: each member a sorted list, its tuples as lists (JSON has no tuples)."""
    if stored is None:
        return None
    return FileFacts._make(
        frozenset(tuple(item) if isinstance(item, list) else item for item in member) for member in stored
    )


def _load(entry: str) -> dict[str, Any] | None:
    data = load_json(entry)
    fields = ("facts", "sources", "summarized", "classified", "probes")
    if not isinstance(data, dict) or any(field not in data for field in fields):
        return None
    if data["facts"] is not None and len(data["facts"]) != len(FileFacts._fields):
        return None
    return data
