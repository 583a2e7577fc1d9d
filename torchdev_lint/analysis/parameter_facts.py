"""The parameter boundaries across the project: callee facts at call sites, call-site facts in callees.

From the summaries' `checkpoints`, `batches`, `loader_args` and `counts` (see
`analysis/parameter_uses.py`), once `project_facts._Pass` resolves what each call
names:

- at a call site, the parameters the callee stores in a saved dict (TDL105) or
  whose batches it moves to a device (TDL204), keyed by the callee as the calling
  file writes it, with the position the call passes each one at;
- in a callee, its loader parameters for which every call in the project passes a
  pinned `DataLoader` (TDL205): a meet over all the calls. A function never called,
  called once with anything else (or with a loader from elsewhere), or named by a
  file that could not be parsed, stays unknown.

A function handed to a call as a value (`pool.map(train, ...)`) is called where this cannot
see: what its calls pass is unknown. (A function stored in a container or a variable and
called from there is not noticed.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Summary = dict[str, Any]
Target = tuple[str, str]
# (callee as written, position in the call or -1, parameter name)
Handed = tuple[str, int, str]


def handed(
    summary: Summary, resolve: Callable[[list[Any]], Target | None], summaries: dict[str, Summary]
) -> tuple[frozenset[Handed], frozenset[Handed]]:
    """What the calls of one file pass on: (stored in a checkpoint, batches moved), see above."""
    checkpointed: set[Handed] = set()
    moved: set[Handed] = set()
    for text, reference in summary["sites"].items():
        target = resolve(reference) if reference is not None else None
        callee = summaries.get(target[0]) if target is not None else None
        if target is None or callee is None:
            continue
        for field, found in (("checkpoints", checkpointed), ("batches", moved)):
            for position, name in callee[field].get(target[1], ()):
                at = call_position(target[1], position, text)
                found.add((text, -1 if at is None else at, name))
    return frozenset(checkpointed), frozenset(moved)


def pinned_parameters(
    summaries: dict[str, Summary],
    resolve: Callable[[str, list[Any]], Target | None],
    unreadable: list[bytes],
) -> dict[str, frozenset[tuple[str, str]]]:
    """For each file: `(function, parameter)` of its loader parameters that every project call
    passes a pinned loader for."""
    calls: dict[tuple[str, str, str], list[int]] = {}  # (path, function, parameter): [calls, pinned]
    passed_on = {
        resolve(path, reference)
        for path, summary in summaries.items()
        for reference in summary["passed_on"].values()
    }
    for path, summary in summaries.items():
        passed: dict[str, list[list[Any]]] = {}
        for text, pinned, _ in summary["loader_args"]:
            passed.setdefault(text, []).append(pinned)
        for text, reference in summary["sites"].items():
            target = resolve(path, reference) if reference is not None else None
            if target is None or target[0] not in summaries or target in passed_on:
                continue
            for position, name in summaries[target[0]]["batches"].get(target[1], ()):
                at = call_position(target[1], position, text)
                count = calls.setdefault((*target, name), [0, 0])
                count[0] += summary["counts"].get(text, 0)
                count[1] += sum(1 for slots in passed.get(text, ()) if at in slots or name in slots)
    found: dict[str, set[tuple[str, str]]] = {}
    for (path, function, name), (total, pinned) in calls.items():
        word = re.compile(rb"\b%s\b" % re.escape(function.rsplit(".", 1)[-1].encode()))
        if total and pinned == total and not any(word.search(source) for source in unreadable):
            found.setdefault(path, set()).add((function, name))
    return {path: frozenset(pairs) for path, pairs in found.items()}


def call_position(function: str, position: int | None, callee: str) -> int | None:
    """Where a call written `callee` passes the parameter at `position` positionally: one
    less for a method called through `self`/`cls`; None where unknown (a method called
    any other way may be unbound, static or a class method)."""
    if position is None:
        return None
    if "." not in function:
        return position
    if callee.split(".", 1)[0] in ("self", "cls"):
        return position - 1 if position > 0 else None
    return None
