"""The parameter boundaries across the project: callee facts at call sites, call-site facts in callees.

From the summaries' `checkpoints`, `batches`, `loader_args` and `counts` (see
`analysis/project/parameter_uses.py`), once `project_facts._Pass` resolves what each call
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
# function → the (position, name) of the loader parameters whose batches it moves
Moving = dict[Target, set[tuple[Any, str]]]


def moving_parameters(
    summaries: dict[str, Summary], resolve: Callable[[str, list[Any]], Target | None]
) -> Moving:
    """The loader parameters each function moves the batches of: its own loop (`batches`), or a
    call passing the parameter on to a function that moves them (`forwards`), to a fixed point
    (`main` → `fit(loader)` → `train_one_epoch(loader)` in another file)."""
    moving: Moving = {}
    for path, summary in summaries.items():
        for function, entries in summary["batches"].items():
            moving[(path, function)] = {(position, name) for position, name in entries}
    changed = True
    while changed:
        changed = False
        for path, summary in summaries.items():
            for function, entries in summary["forwards"].items():
                for text, slot, position, name in entries:
                    target = _callee(path, summary, text, resolve)
                    if target not in moving or (position, name) in moving.get((path, function), ()):
                        continue
                    if any(_passes(target, moved, text, slot) for moved in moving[target]):
                        moving.setdefault((path, function), set()).add((position, name))
                        changed = True
    return moving


def handed(
    summary: Summary,
    resolve: Callable[[list[Any]], Target | None],
    summaries: dict[str, Summary],
    moving: Moving,
) -> tuple[frozenset[Handed], frozenset[Handed]]:
    """What the calls of one file pass on: (stored in a checkpoint, batches moved), see above."""
    checkpointed: set[Handed] = set()
    moved: set[Handed] = set()
    for text, reference in summary["sites"].items():
        target = resolve(reference) if reference is not None else None
        callee = summaries.get(target[0]) if target is not None else None
        if target is None or callee is None:
            continue
        for found, parameters in (
            (checkpointed, callee["checkpoints"].get(target[1], ())),
            (moved, moving.get(target, ())),
        ):
            for position, name in parameters:
                at = call_position(target[1], position, text)
                found.add((text, -1 if at is None else at, name))
    return frozenset(checkpointed), frozenset(moved)


Pinned = dict[str, frozenset[tuple[str, str]]]


def pinned_parameters(
    summaries: dict[str, Summary],
    resolve: Callable[[str, list[Any]], Target | None],
    unreadable: list[bytes],
    moving: Moving,
    calls_unseen: Callable[[Target], bool],
) -> tuple[Pinned, Pinned]:
    """For each file: `(function, parameter)` of its loader parameters that every project call
    passes a pinned loader for, or a parameter of its caller that is itself pinned so (least
    fixed point: a cycle of calls alone proves nothing); then the same for pinned loaders that
    collate by default. A method some of whose calls may go unseen (`calls_unseen`: through an
    instance, or through `self` in a base class defining it too) is unknown."""
    passed_on = {
        resolve(path, reference)
        for path, summary in summaries.items()
        for reference in summary["passed_on"].values()
    }
    # (path, function, parameter): [calls, pinned loaders passed, of them collating by default,
    # parameters passed on]
    calls: dict[tuple[str, str, str], list[Any]] = {}
    for path, summary in summaries.items():
        passed: dict[str, list[tuple[list[Any], list[Any]]]] = {}
        for text, pinned, _, pinned_collated in summary["loader_args"]:
            passed.setdefault(text, []).append((pinned, pinned_collated))
        for text, reference in summary["sites"].items():
            target = resolve(path, reference) if reference is not None else None
            if target is None or target not in moving or target in passed_on or calls_unseen(target):
                continue
            for position, name in moving[target]:
                at = call_position(target[1], position, text)
                count = calls.setdefault((*target, name), [0, 0, 0, []])
                count[0] += summary["counts"].get(text, 0)
                for pinned, pinned_collated in passed.get(text, ()):
                    count[1] += at in pinned or name in pinned
                    count[2] += at in pinned_collated or name in pinned_collated
                count[3] += [
                    (path, function, forwarded)
                    for function, entries in summary["forwards"].items()
                    for written, slot, _, forwarded in entries
                    if written == text and slot in (at, name)
                ]
    for key in list(calls):
        word = re.compile(rb"\b%s\b" % re.escape(key[1].rsplit(".", 1)[-1].encode()))
        if any(word.search(source) for source in unreadable):
            del calls[key]
    return _every_call(calls, 1), _every_call(calls, 2)


def _every_call(calls: dict[tuple[str, str, str], list[Any]], column: int) -> Pinned:
    """The keys every call of which passes a loader counted in `column`, or a key so found."""
    pinned_keys: set[tuple[str, str, str]] = set()
    changed = True
    while changed:
        changed = False
        for key, counts in calls.items():
            total, forwarded = counts[0], counts[3]
            if (
                key not in pinned_keys
                and total
                and counts[column] + sum(f in pinned_keys for f in forwarded) == total
            ):
                pinned_keys.add(key)
                changed = True
    found: dict[str, set[tuple[str, str]]] = {}
    for path, function, name in pinned_keys:
        found.setdefault(path, set()).add((function, name))
    return {path: frozenset(pairs) for path, pairs in found.items()}


def _callee(
    path: str, summary: Summary, text: str, resolve: Callable[[str, list[Any]], Target | None]
) -> Target | None:
    reference = summary["sites"].get(text)
    return resolve(path, reference) if reference is not None else None


def _passes(target: Target, parameter: tuple[int | None, str], text: str, slot: int | str) -> bool:
    """Does a call written `text` of `target` pass its argument at `slot` for `parameter`?"""
    position, name = parameter
    return slot == name if isinstance(slot, str) else slot == call_position(target[1], position, text)


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
