"""TDL101's project facts from the summaries, without LibCST (a warm run imports none).

- `host_loads` (`analysis/saved_files.py` makes the summary field): for each checked
  file, the `local_key`s of its `torch.load` paths that every `torch.save` of the
  project writes from host memory; `needles`: text a file loading one must hold.
- `host_returning` (`analysis/returned_values.py` makes the summary field `returns`): the
  project functions that return host data, to a least fixed point; `host_sites`: for each
  checked file, the callee texts naming one; `wanted_names`: the callee names the host
  conditions of saves wait on (pass 1 reads the modules defining them).
- `dataset_bases` (`analysis/dataset_bases.py` makes the summary field): for each
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
# Does the function a reference of a file names return host data (`host_returning`)?
ReturnsHost = Callable[[str, Reference], bool]

# A file may need the fact: it calls a torch loader and defines a class with a base.
_CLASS_WITH_BASE = re.compile(rb"^[ \t]*class[ \t]+\w+[ \t]*\([ \t]*[A-Za-z_]", re.MULTILINE)
_LOAD_TEXT = re.compile(rb"\b(?:torch|jit)\.load\s*\(")


def may_need(source: bytes) -> bool:
    return bool(_LOAD_TEXT.search(source) and _CLASS_WITH_BASE.search(source))


def local_key(shape: Shape) -> str:
    """The shape as the file writes it (references by their text): what a rule asks with."""
    return json.dumps([part[:2] if isinstance(part, list) else part for part in shape])


def host_loads(
    summaries: dict[str, dict[str, Any]],
    checked: Iterable[str],
    canonical: Canonical,
    returns_host: ReturnsHost,
) -> dict[str, frozenset[str]]:
    """For each checked file, the `local_key`s of its loads whose path every `torch.save` of the
    project (at least one) writes from host memory."""
    host: dict[str, bool] = {}
    for path, summary in summaries.items():
        for shape, on_host in summary.get("saved_files", {}).get("saves", ()):
            key = _project_key(path, shape, canonical)
            if key is not None:
                host[key] = host.get(key, True) and _holds(path, on_host, returns_host)
    found = {}
    for path in checked:
        known = summaries.get(path)
        loads = known.get("saved_files", {}).get("loads", ()) if known is not None else ()
        keys = frozenset(
            local_key(shape)
            for shape in loads
            if host.get(_project_key(path, shape, canonical) or "") is True
        )
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


def host_returning(summaries: dict[str, dict[str, Any]], locate: Locate) -> set[Target]:
    """The project functions known to return host data: every `return` is, given the callees
    known so far (a least fixed point: from none, so recursion alone proves nothing)."""
    pending = [
        (path, qualname, condition)
        for path, summary in summaries.items()
        for qualname, condition in summary.get("returns", {}).items()
    ]
    host: set[Target] = set()
    while True:
        proved = [(p, q) for p, q, condition in pending if all(locate(p, r) in host for r in condition)]
        if not proved:
            return host
        host.update(proved)
        pending = [entry for entry in pending if (entry[0], entry[1]) not in host]


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
    ]
    names: set[str] = set()
    while work:
        path, reference = work.pop()
        name = reference[-1].rsplit(".", 1)[-1]
        target = canonical(path, reference) if reference[0] == "module" else ""
        if name in names or target is None or target.startswith(":"):
            continue
        names.add(name)
        work += [(found, r) for found, condition in conditions.get(name, ()) for r in condition]
    return names


def _holds(path: str, on_host: bool | list[Reference], returns_host: ReturnsHost) -> bool:
    """A save's host fact: True, False, or the references that must return host data."""
    if isinstance(on_host, bool):
        return on_host
    return all(returns_host(path, reference) for reference in on_host)


def _project_key(path: str, shape: Shape, canonical: Canonical) -> str | None:
    """The shape with each reference replaced by what it names project-wide."""
    parts: list[Any] = []
    for part in shape:
        if isinstance(part, list) and part[0] == "ref":
            target = canonical(path, part[2]) if part[2] is not None else None
            if target is None:
                return None
            parts.append(["ref", target])
        else:
            parts.append(part)
    return json.dumps(parts)


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
