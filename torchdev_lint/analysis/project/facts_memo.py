"""Project facts kept with what pass 1 read to find them: a warm `check`, and the flake8 plugin.

flake8 checks a file at a time. With the cache `check` wrote, the plugin's pass 1 reads the
summaries of every module the file leads to (44 files for accelerate's `accelerator.py`), a
third of the cost of parsing the file; a warm `check` reads every summary of the project and
runs the fixed point over them (most of its run). That pass is a function of the bytes of the
files it reads, of which of them get a summary (a parse is refused but for the files the caller
parses itself: another file's summary comes from the cache or not at all) and of what the file
system holds at each path the project index asks about. So the facts are stored with all three
and given again while every one is unchanged: a read and a hash of each file, a look at each
cache entry and each probed path. Anything changed, missing or unreadable in the stored entry
is a miss: pass 1 runs again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn

from torchdev_lint.analysis.project import summary_cache
from torchdev_lint.analysis.project.file_facts import FileFacts, ProjectFacts
from torchdev_lint.analysis.project.index import path_kind
from torchdev_lint.analysis.project.pass_one_text import wants_summary
from torchdev_lint.analysis.project.project_facts import Parse, PassInputs, Summary, project_facts
from torchdev_lint.cache import load_json, store_json, summary_key, tool_fingerprint
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.files import read_source

FOLDER = "file_facts"


def file_facts(path: str, parse: Parse, cache_directory: str) -> FileFacts | None:
    """`project_facts([path], parse, cache_directory).of(path)`, where `parse` parses `path`
    only: from the entry kept for `path` when nothing pass 1 read has changed since."""
    if not path.endswith(".py"):
        return None
    return kept_facts([path], parse, cache_directory, parsed=os.path.abspath(path)).of(path)


def kept_facts(
    paths: Iterable[str],
    parse: Parse | None,
    cache_directory: str,
    *,
    parsed: str | None = None,
    summaries: Mapping[str, Summary] | None = None,
    keep_tree: Callable[[str], None] | None = None,
) -> ProjectFacts:
    """`project_facts(paths, parse, cache_directory, summaries, keep_tree=keep_tree)`: from the
    entry kept for these paths when nothing pass 1 read has changed since, else from the pass
    (and kept). Where `parse` refuses files (SourceError) but `parsed` (absolute), a summary
    cached then but gone now is a change. Passes that parse the same files share entries: a parse
    gives the summary the cache holds for the same text, and without `parse` the pass stops
    rather than read a file as unreadable.

    Without `parse` the pass reads the cache alone and raises NotCached where it would parse a
    file; at once where the kept entry shows a file summarized then whose current text has no
    summary cached (most of a pass would run before it stops there)."""
    given = {os.path.abspath(path): path for path in paths if path.endswith(".py")}
    entry = _entry(sorted(given), parsed, cache_directory)
    kept = _load(entry)
    now: _Read = {}  # each file the kept pass read, read and hashed at most once here
    if kept is not None and _unchanged(kept, now, parsed, cache_directory):
        stored = kept["facts"]
        return ProjectFacts({given[path]: _facts(stored[path]) for path in given if path in stored})
    stale = next(_uncached_summaries(kept, now, cache_directory), None) if kept and parse is None else None
    if stale is not None:
        raise NotCached(stale)
    inputs = PassInputs.empty()
    found = project_facts(
        paths, parse or _refuse, cache_directory, summaries, keep_tree=keep_tree, inputs=inputs
    )
    store_json(entry, _encoded({os.path.abspath(path): facts for path, facts in found.files.items()}, inputs))
    return found


class NotCached(Exception):
    """Pass 1 from the cache alone would parse a file (`kept_facts` without a parse)."""


def _refuse(path: str, source: bytes) -> NoReturn:
    raise NotCached(path)


# A file's bytes now and their summary key (both None: unreadable), by path.
_Read = dict[str, tuple[bytes | None, str | None]]


def _current(path: str, now: _Read) -> tuple[bytes | None, str | None]:
    found = now.get(path)
    if found is None:
        try:
            source: bytes | None = read_source(path)
        except SourceError:
            source = None
        found = now[path] = (source, _key(source))
    return found


def _uncached_summaries(kept: dict[str, Any], now: _Read, cache_directory: str) -> Iterator[str]:
    """The files the kept pass read for a summary (or for their module classes), or whose text
    changed since and now wants a summary (`wants_summary`), with nothing cached for their
    current text."""
    for path, then in kept["sources"].items():
        source, key = _current(path, now)
        if source is None or key is None:
            continue
        for folder, wanted in (
            (summary_cache.FOLDER, kept["summarized"].get(path) or (key != then and wants_summary(source))),
            (summary_cache.CLASSES_FOLDER, kept["classified"].get(path)),
        ):
            if wanted and not os.path.exists(summary_cache.entry_for_key(key, cache_directory, folder)):
                yield path


def _entry(targets: list[str], parsed: str | None, cache_directory: str) -> str:
    """Keyed on what the pass may parse too: a pass that refuses a file reads it as unreadable,
    which one that parses it must not be given (the plugin's entry for a `check` of its file)."""
    named = [tool_fingerprint(), parsed or "", *targets]
    key = hashlib.sha256("\0".join(named).encode()).hexdigest()
    return os.path.join(cache_directory, FOLDER, key[:2], key + ".json")


def _encoded(facts: dict[str, FileFacts], inputs: PassInputs) -> dict[str, Any]:
    return {
        "facts": {path: [sorted(member) for member in found] for path, found in facts.items()},
        "sources": {path: _key(source) for path, source in inputs.sources.items()},
        "summarized": inputs.summarized,
        "classified": inputs.classified,
        "probes": inputs.probes,
    }


def _key(source: bytes | None) -> str | None:
    return None if source is None else summary_key(source)


def _unchanged(kept: dict[str, Any], now: _Read, parsed: str | None, cache_directory: str) -> bool:
    """Would pass 1 read the same bytes, get the same summaries and find the same paths?"""
    for path, key in kept["sources"].items():
        if _current(path, now)[1] != key:
            return False
        # The file the caller parses itself: any other gets its summary (or its module classes)
        # from the cache only.
        if path == parsed or key is None:
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


def _facts(stored: list[list[Any]]) -> FileFacts:
    """The facts as stored: each member a sorted list, its tuples as lists (JSON has no tuples)."""
    return FileFacts._make(
        frozenset(tuple(item) if isinstance(item, list) else item for item in member) for member in stored
    )


def _load(entry: str) -> dict[str, Any] | None:
    data = load_json(entry)
    fields = ("facts", "sources", "summarized", "classified", "probes")
    if not isinstance(data, dict) or any(field not in data for field in fields):
        return None
    facts = data["facts"]
    if not isinstance(facts, dict) or any(
        not isinstance(stored, list) or len(stored) != len(FileFacts._fields) for stored in facts.values()
    ):
        return None
    return data
