"""A CUDA device default no constructor call overrides, across the project (TDL301, issue 13).

From the summaries' `cuda_defaults`, `function_defaults` and `constructions`
(`analysis/project/constructor_defaults.py`), once `project_facts._Pass` resolves what each text
names: for each class (and module-level function) of a checked file, the `__init__` (function)
parameters whose CUDA default is never overridden. That holds when the project constructs the
class (calls the function) at least once and no call passes the parameter (by position or keyword;
`*args`/`**kwargs` pass everything). Unknown (no fact) when the class or function is used as a
value anywhere (a subclass, whose `super().__init__(...)` may pass it; `pool.map(load, files)`;
`partial(Encoder, ...)`; stored, passed or returned), when a package `__init__.py` of a
distributed library exports it (a library's public class is constructed by its users, not by
the project; a research repository's `models/__init__.py` exporting its classes to `train.py`
does not count), or when a file that names it could not be parsed. LibCST-free, like the rest
of the propagation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.file_facts import FileFacts
    from torchdev_lint.analysis.project.index import ProjectIndex

Summary = dict[str, Any]
Target = tuple[str, str]
Resolve = Callable[[str, list[Any]], Target | None]

# How many package levels above a class's module may re-export it.
_MAX_PACKAGE_DEPTH = 4
# Text a file defining such a class or function must hold: a CUDA default (`device="cuda"`, `device:
# str = "cuda:0"`, `device=torch.device("cuda")`; on one line) in the parameters of a `def` (after the
# `def name(` and before its `):` or `) ->`).
_DEF_TEXT = re.compile(rb"\bdef[ \t]+\w+[ \t]*\(")
_SIGNATURE_END = re.compile(rb"\)[ \t]*(?::|->)")
_DEFAULT_TEXT = re.compile(
    rb"""=[ \t]*(?:torch\.device\([ \t]*)?["']cuda(?::\d+)?["'][ \t]*\)?[ \t]*[,)\n#]"""
)


def may_define(source: bytes) -> bool:
    """Can the text define a class or function with a CUDA default (a cheap test, before parsing)?"""
    if b"cuda" not in source:
        return False
    for default in _DEFAULT_TEXT.finditer(source):
        start = source.rfind(b"def ", 0, default.start())
        opened = _DEF_TEXT.match(source, start) if start >= 0 else None
        if opened is not None and not _SIGNATURE_END.search(source, opened.end(), default.start()):
            return True
    return False


def classes(summaries: Mapping[str, Summary]) -> set[Target]:
    """The classes and functions with a CUDA default: files naming them must be read (their callers)."""
    return {(path, name) for path, summary in summaries.items() for name in _defaults(summary)}


def _defaults(summary: Summary) -> dict[str, list[list[Any]]]:
    """A file's CUDA defaults, by class (of its `__init__`) and by module-level function."""
    return {**summary["function_defaults"], **summary["cuda_defaults"]}


def with_defaults(
    facts: dict[str, FileFacts],
    summaries: Mapping[str, Summary],
    resolve: Resolve,
    unreadable: list[bytes],
    index: ProjectIndex,
) -> dict[str, FileFacts]:
    """`facts` with `cuda_defaults` set: (class, parameter) of each file whose default no call overrides."""
    found = never_overridden(summaries, resolve, unreadable, index)
    return {path: known._replace(cuda_defaults=found.get(path, frozenset())) for path, known in facts.items()}


def never_overridden(
    summaries: Mapping[str, Summary], resolve: Resolve, unreadable: list[bytes], index: ProjectIndex
) -> dict[str, frozenset[tuple[str, str]]]:
    """For each file: (class, parameter) of its CUDA defaults that no construction overrides."""
    candidates = classes(summaries)
    if not candidates:
        return {}
    names = _names(summaries, candidates, resolve)
    calls: dict[Target, list[list[Any]]] = {}
    escaped: set[Target] = set()
    for path, summary in summaries.items():
        constructions = summary["constructions"]
        for text, reference in constructions["refs"].items():
            target = resolve(path, reference) if _last(reference) in names else None
            if target not in candidates:
                continue
            assert target is not None
            noted = constructions["calls"].get(text, ())
            if text in summary["cuda_sites"] and target[1] in summaries[target[0]]["function_defaults"]:
                noted = [["*"]] * len(noted)  # a function's calls that all run only where CUDA is
            calls.setdefault(target, []).extend(noted)
            if text in constructions["escapes"]:
                escaped.add(target)
        # Calls and values of a class are noted under class-like names only: `from enc import
        # TextEncoder as te` hides them.
        aliases = [(name, ref) for name, ref in summary["aliases"].items() if _last(ref) in names]
        lowercase = [reference for name, reference in aliases if not name[:1].isupper()]
        escaped.update(
            target
            for reference in lowercase
            if (target := resolve(path, reference)) in candidates
            and target[1] in summaries[target[0]]["cuda_defaults"]
        )
        if os.path.basename(path) == "__init__.py" and index.distributed(os.path.dirname(path)):
            escaped.update(_exported(path, summary, [ref for _, ref in aliases], candidates, resolve))
    escaped.update(target for target in candidates - escaped if _package_exports(target, resolve, index))
    found: dict[str, set[tuple[str, str]]] = {}
    for target in candidates - escaped:
        path, name = target
        word = re.compile(rb"\b%s\b" % re.escape(name.encode()))
        if not calls.get(target) or any(word.search(source) for source in unreadable):
            continue
        for position, parameter in _defaults(summaries[path])[name]:
            if not any(_passes(slots, position, parameter) for slots in calls[target]):
                found.setdefault(path, set()).add((name, parameter))
    return {path: frozenset(pairs) for path, pairs in found.items()}


def _names(summaries: Mapping[str, Summary], candidates: set[Target], resolve: Resolve) -> set[str]:
    """The names the candidate classes go by: their own and those they are imported under
    (`from .encoder import TextEncoder as Encoder`). Only references ending in one of these are
    resolved: resolving one can make pass 1 read its module, and every summary holds many."""
    names = {name for _, name in candidates}
    changed = True
    while changed:
        changed = False
        for path, summary in summaries.items():
            for alias, reference in summary["aliases"].items():
                if (
                    alias not in names
                    and _last(reference) in names
                    and resolve(path, reference) in candidates
                ):
                    names.add(alias)
                    changed = True
    return names


def _last(reference: list[Any]) -> str:
    """The name a reference ends with: `TextEncoder` of `["module", 1, "encoder.TextEncoder"]`."""
    return str(reference[-1]).rsplit(".", 1)[-1]


def _exported(
    path: str, summary: Summary, aliases: list[list[Any]], candidates: set[Target], resolve: Resolve
) -> set[Target]:
    """The candidate classes a package `__init__.py` re-exports (by name, or by `import *`)."""
    found = {resolve(path, reference) for reference in aliases}
    return {target for target in found if target in candidates}


def _package_exports(target: Target, resolve: Resolve, index: ProjectIndex) -> bool:
    """Does a distributed package holding the class's module have it as an attribute (`from
    .encoder import *` or `import TextEncoder` in its `__init__.py`)? Asking reads that
    `__init__.py` in the next round of pass 1 (its text need not name the class)."""
    path, name = target
    folder = os.path.dirname(path)
    for level in range(1, _MAX_PACKAGE_DEPTH + 1):
        if not index.is_package(folder):
            return False
        if index.distributed(folder) and resolve(path, ["module", level, name]) == target:
            return True
        folder = os.path.dirname(folder)
    return False


def _passes(slots: list[Any], position: int | None, parameter: str) -> bool:
    """Does a call with these slots pass the parameter (at `position`, counting `self`)?"""
    if slots == ["*"]:
        return True
    count, keywords = slots
    return parameter in keywords or (position is not None and count >= position)
