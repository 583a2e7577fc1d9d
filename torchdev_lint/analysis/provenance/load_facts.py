"""TDL101's project facts from the summaries, without LibCST (a warm run imports none).

- `HostProof`: one least fixed point (from nothing: recursion alone proves nothing) over the
  host facts of the summaries' conditions (`analysis/provenance/host_facts.py` makes their keys): the
  project functions that return host data (summary field `returns`,
  `analysis/provenance/returned_values.py`) and the paths the project saves only from host memory
  (summary field `saved_files`, `analysis/provenance/saved_files.py`), each depending on the other: a
  save of what a load of such a path yields is host data too. An import of a name a project
  package re-exports names a third-party module when the package's `__init__` binds it by
  `import module` (`Library`, resolved by `project_facts`).
- `host_loads`: for each checked file, the `local_key`s of its `torch.load` paths that every
  `torch.save` of the project that may write them (the same shape, an unknown part standing
  for any one part) writes from host memory; `needles`: text a file loading one must hold.
- `host_sites`: for each checked file, the callee texts naming a function returning host
  data; `wanted_names`: the callee names the host conditions of saves wait on (pass 1 reads
  the modules defining them).
- `dataset_bases` (`analysis/data/dataset_bases.py` makes the summary field): for each
  checked file, the base texts that name a project class deriving from a torch Dataset;
  `may_need`: text a file needing that fact must hold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

Shape = list[Any]
Reference = list[Any]
Target = tuple[str, str]
# What a reference of a summary names, project-wide (a file and a name), or None when unknown.
Canonical = Callable[[str, Reference], str | None]
# The project class a base reference of a file names (its module summarized on demand), or None.
Locate = Callable[[str, Reference], Target | None]
# Does the function a reference of a file names return host data (`HostProof.returning`)?
ReturnsHost = Callable[[str, Reference], bool]
# The third-party module the import `(level, dotted)` of a file names, through the re-exports of
# project packages (`from . import k2`, the package's `__init__` doing `import k2`), or None.
Library = Callable[[str, int, str], str | None]

# The keys of a condition besides callee references (`["module", ...]`, `["here", ...]`,
# `["star", ...]`: the callee returns host data): `[EXTERNAL, level, dotted, library]`, the
# import names the third-party module; `[LOADED, shape]`, the project saves the path only from
# host memory.
EXTERNAL = "external"
LOADED = "loaded"
_CALLEES = frozenset({"module", "here", "star"})
_ANY = None  # a path token: what is not known, any text

# A file may need the fact: it calls a torch loader and defines a class with a base.
_CLASS_WITH_BASE = re.compile(rb"^[ \t]*class[ \t]+\w+[ \t]*\([ \t]*[A-Za-z_]", re.MULTILINE)
_LOAD_TEXT = re.compile(rb"\b(?:torch|jit)\.load\s*\(")


def may_need(source: bytes) -> bool:
    return bool(_LOAD_TEXT.search(source) and _CLASS_WITH_BASE.search(source))


def local_key(shape: Shape) -> str:
    """The shape as the file writes it (references by their text): what a rule asks with."""
    return json.dumps([part[:2] if isinstance(part, list) else part for part in shape])


def host_loads(
    summaries: dict[str, dict[str, Any]], checked: Iterable[str], proof: HostProof
) -> dict[str, frozenset[str]]:
    """For each checked file, the `local_key`s of its loads whose path every `torch.save` of the
    project that may write it (at least one) writes from host memory."""
    found = {}
    for path in checked:
        known = summaries.get(path)
        loads = known.get("saved_files", {}).get("loads", ()) if known is not None else ()
        keys = frozenset(local_key(shape) for shape in loads if proof.saved_on_host(path, shape))
        if keys:
            found[path] = keys
    return found


def needles(summaries: dict[str, dict[str, Any]]) -> set[bytes]:
    """Text a file loading a host-saved path must hold (a literal of the path, or the name of
    its constant or key): only such files need parsing to learn their loads."""
    found = set()
    for summary in summaries.values():
        for shape, on_host in summary.get("saved_files", {}).get("saves", ()):
            if not on_host:
                continue
            # A piece between separators: `/` may stand for a join (`d / "L.pt"`, `os.path.join`).
            words = [w for part in shape if isinstance(part, str) for w in part.split("/") if w.strip("._-")]
            words += [part[1].rsplit(".", 1)[-1] for part in shape if isinstance(part, list)]
            if words:
                found.add(max(words, key=len).encode())
    return found


class HostProof:
    """The host facts the project's summaries prove, to a least fixed point (see the module doc)."""

    def __init__(
        self, summaries: dict[str, dict[str, Any]], locate: Locate, canonical: Canonical, library: Library
    ) -> None:
        self._locate, self._canonical, self._library = locate, canonical, library
        self._saves = [
            (path, tokens, on_host)
            for path, summary in summaries.items()
            for shape, on_host in summary.get("saved_files", {}).get("saves", ())
            if (tokens := _path_tokens(path, shape, canonical)) is not None
        ]
        self._writers: dict[tuple[Any, ...], list[int]] = {}  # load tokens: the saves that may write it
        self.returning: set[Target] = set()
        self._loaded: set[tuple[Any, ...]] = set()  # load tokens proven host-saved
        pending = [
            (path, qualname, condition)
            for path, summary in summaries.items()
            for qualname, condition in summary.get("returns", {}).items()
        ]
        conditions = [(path, c) for path, _, c in pending] + [
            (path, on_host) for path, _, on_host in self._saves if isinstance(on_host, list)
        ]
        loads = {
            tokens
            for path, condition in conditions
            for key in condition
            if key[0] == LOADED and (tokens := _path_tokens(path, key[1], canonical)) is not None
        }
        while True:
            proved = [(p, q) for p, q, condition in pending if all(self._holds(p, key) for key in condition)]
            saved = [tokens for tokens in loads - self._loaded if self._saved_on_host(tokens)]
            if not proved and not saved:
                return
            self.returning.update(proved)
            self._loaded.update(saved)
            pending = [entry for entry in pending if (entry[0], entry[1]) not in self.returning]

    def returns_host(self, path: str, reference: Reference) -> bool:
        return self._locate(path, reference) in self.returning

    def saved_on_host(self, path: str, shape: Shape) -> bool:
        """Does every save that may write this load's path (at least one) write host data?"""
        tokens = _path_tokens(path, shape, self._canonical)
        return tokens is not None and self._saved_on_host(tokens)

    def _saved_on_host(self, tokens: tuple[Any, ...]) -> bool:
        writers = self._writers.get(tokens)
        if writers is None:
            writers = self._writers[tokens] = [
                index for index, save in enumerate(self._saves) if may_be_same_file(tokens, save[1])
            ]
        return bool(writers) and all(self._save_holds(index) for index in writers)

    def _save_holds(self, index: int) -> bool:
        """A save's host fact: True, False, or the keys that must hold."""
        path, _, on_host = self._saves[index]
        return on_host if isinstance(on_host, bool) else all(self._holds(path, key) for key in on_host)

    def _holds(self, path: str, key: list[Any]) -> bool:
        if key[0] in _CALLEES:
            return self._locate(path, key) in self.returning
        if key[0] == EXTERNAL:
            return self._library(path, key[1], key[2]) == key[3]
        if key[0] == LOADED:
            return _path_tokens(path, key[1], self._canonical) in self._loaded
        return False


def libraries_asked(summary: dict[str, Any]) -> dict[tuple[int, str], str]:
    """The imports `(level, dotted)` a file's host conditions need to name a third-party module,
    with that module."""
    conditions = [c for _, c in summary.get("saved_files", {}).get("saves", ()) if isinstance(c, list)]
    conditions += summary.get("returns", {}).values()
    return {(key[1], key[2]): key[3] for condition in conditions for key in condition if key[0] == EXTERNAL}


def host_sites(
    summaries: dict[str, dict[str, Any]], checked: Iterable[str], returns_host: ReturnsHost
) -> dict[str, frozenset[str]]:
    """For each checked file, the callee texts it writes (`features`, `utils.load_table`,
    `self.encode`) that name a project function returning host data."""
    found = {}
    for path in checked:
        sites = summaries.get(path, {}).get("sites", {})
        texts = frozenset(
            text
            for text, reference in sites.items()
            if reference is not None and returns_host(path, reference)
        )
        if texts:
            found[path] = texts
    return found


def wanted_names(summaries: dict[str, dict[str, Any]], canonical: Canonical) -> set[str]:
    """The names of the project callees the host conditions of the project's saves wait on,
    followed through the functions of the files read so far (by name: a superset is harmless;
    `torch.load` or another library's function is no project callee)."""
    conditions: dict[str, list[tuple[str, list[Reference]]]] = {}
    for path, summary in summaries.items():
        for qualname, condition in summary.get("returns", {}).items():
            conditions.setdefault(qualname.rsplit(".", 1)[-1], []).append((path, condition))
    work = [
        (path, reference)
        for path, summary in summaries.items()
        for _, condition in summary.get("saved_files", {}).get("saves", ())
        if isinstance(condition, list)
        for reference in condition
        if reference[0] in _CALLEES
    ]
    names: set[str] = set()
    while work:
        path, reference = work.pop()
        name = reference[-1].rsplit(".", 1)[-1]
        target = canonical(path, reference) if reference[0] == "module" else ""
        if name in names or target is None or target.startswith(":"):
            continue
        names.add(name)
        work += [
            (found, r) for found, condition in conditions.get(name, ()) for r in condition if r[0] in _CALLEES
        ]
    return names


def _path_tokens(path: str, shape: Shape, canonical: Canonical) -> tuple[Any, ...] | None:
    """The shape to compare: its literal texts, `_ANY` for what is not known, a key or a reference
    (by what it names project-wide) as a tuple; None when a reference names nothing known."""
    tokens: list[Any] = []
    for part in shape:
        if isinstance(part, str) or part is None:
            tokens.append(part)
        elif part[0] == "ref":
            target = canonical(path, part[2]) if part[2] is not None else None
            if target is None:
                return None
            tokens.append(("ref", target))
        else:
            tokens.append(tuple(part))
    return tuple(tokens)


def local_tokens(shape: Shape) -> tuple[Any, ...]:
    """The shape's tokens within one file: references by their text, as the file writes them."""
    return tuple(tuple(part[:2]) if isinstance(part, list) else part for part in shape)


def may_be_same_file(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Can two path shapes name the same file: the same parts, where a part not known may stand
    for any one part (`d / "L.pt"` and `self.lang_dir / "L.pt"`; not `f"{d}.f0_stat.pt"` and
    `f"{d}/f0_{rank}_{n}.pt"`, which text alone could make equal)?"""
    return len(a) == len(b) and all(x == y or x is _ANY or y is _ANY for x, y in zip(a, b, strict=True))


def dataset_bases(
    summaries: dict[str, dict[str, Any]], checked: Iterable[str], locate: Locate
) -> dict[str, frozenset[str]]:
    """For each checked file, the base texts of its classes that name a project Dataset class."""
    targets: dict[tuple[str, str], Target | None] = {}
    while True:  # resolving a base may summarize its module, which brings bases of its own
        pending = [
            (path, text, reference)
            for path, summary in list(summaries.items())
            for known in summary.get("dataset_classes", {}).values()
            for text, reference in known["bases"]
            if (path, text) not in targets
        ]
        if not pending:
            break
        for path, text, reference in pending:
            targets[path, text] = locate(path, reference)
    datasets: set[Target] = set()
    changed = True
    while changed:
        changed = False
        for path, summary in summaries.items():
            for name, known in summary.get("dataset_classes", {}).items():
                if (path, name) not in datasets and (
                    known["dataset"] or any(targets[path, text] in datasets for text, _ in known["bases"])
                ):
                    datasets.add((path, name))
                    changed = True
    found = {}
    for path in checked:
        classes = summaries.get(path, {}).get("dataset_classes", {})
        texts = frozenset(
            text
            for known in classes.values()
            for text, _ in known["bases"]
            if targets[path, text] in datasets
        )
        if texts:
            found[path] = texts
    return found
