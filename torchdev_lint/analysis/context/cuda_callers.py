"""Functions and methods whose every call from another file runs only where CUDA is (issue 23: the
gate in a caller in another file, `train.py` exiting without CUDA before it calls `ops.fused_step()`,
a CUDA-only trainer calling `self.exp.resize(...)` of a class in another module).

Each summary lists the callee texts whose every call in the file lies in code that requires CUDA
(`cuda_sites`, from `requirements.CudaRequirements`), and likewise the method names it calls on
objects of unknown class (`cuda_method_calls`). Here the project's calls of each module-level
function and method of a checked file are gathered from the summaries read, and one counts when
all of them are so (at least one). A method is found by its name: any `x.resize(...)` of the
project may call it, so all of them must be gated; methods Python or torch calls implicitly
(`__init__`, `forward`) never count. A file that could not be parsed and names the function may
call it anyhow. `project_facts` reads the files that name such a function before it trusts the
answer (their calls count too), and `CudaRequirements.function_requires_cuda` combines it with the
file's own uses. No LibCST here: a warm run imports none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from torchdev_lint.analysis.knowledge.torch_api import IMPLICITLY_CALLED_METHODS

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.index import ProjectIndex

Target = tuple[str, str]
# A file's callee texts and method names whose every call runs only where CUDA is (`gated_calls`).
Gated = tuple[set[str], set[str]]
_DEFINITION = re.compile(rb"\bdef[ \t]+(\w+)[ \t]*\(")


def cuda_callers(
    summaries: dict[str, dict[str, Any]],
    checked: Collection[str],
    target: Callable[[str, list[Any]], Target | None],
    unreadable: Iterable[bytes],
    gated_by_file: Mapping[str, Gated],
) -> dict[Target, bool]:
    """(file, function or `Class.method`) of a checked file that reaches CUDA, called from other
    files: do all those calls run only where CUDA is? (`gated_by_file`: each summary's `gated_calls`.)"""
    found: dict[Target, bool] = {}
    methods = _methods_by_name(summaries, checked)
    for path, summary in summaries.items():
        gated, gated_methods = gated_by_file[path]
        for text, reference in summary["sites"].items():
            callee = target(path, reference) if reference is not None else None
            if callee is None and "." in text:  # `self.name()` no class of the project defines
                for method in methods.get(text.rsplit(".", 1)[-1], ()):
                    found[method] = found.get(method, True) and text in gated
            if callee is None or callee[0] == path or callee[0] not in checked:
                continue
            if "." not in callee[1] or callee[1].rsplit(".", 1)[-1] in methods:
                found[callee] = found.get(callee, True) and text in gated
        for name, reference in summary["aliases"].items():  # imported, then used but not called
            callee = target(path, reference)
            if callee is not None and callee[0] != path and callee[0] in checked and "." not in callee[1]:
                if not any(text == name or text.startswith(f"{name}.") for text in summary["sites"]):
                    found[callee] = False
        for name in summary.get("method_calls", ()):  # `x.name(...)`, any object: maybe one of them
            for method in methods.get(name, ()):
                found[method] = found.get(method, True) and name in gated_methods
    sources = list(unreadable)
    for callee, all_gated in found.items():
        if all_gated and any(callee[1].rsplit(".", 1)[-1].encode() in source for source in sources):
            found[callee] = False
    return _reaching(found, summaries)


def gated_calls(path: str, summary: Mapping[str, Any], gates: Callable[[str, list[Any]], bool]) -> Gated:
    """The callee texts and the method names of a file whose every call runs only where CUDA is: in the
    file's own eyes, or after a call of the project that stops the program without CUDA (`gates`: does
    a call of what a reference of the file names stop the program where CUDA is missing)."""
    sites, methods = set(summary["cuda_sites"]), set(summary["cuda_method_calls"])
    guards = summary["cuda_guards"]
    if guards["sites"] or guards["methods"]:
        # Each call once: most files call nothing that gates, and then no text is judged.
        gating = {position for position, reference in enumerate(guards["calls"]) if gates(path, reference)}
        if gating:
            sites.update(_guarded(guards["sites"], gating))
            methods.update(_guarded(guards["methods"], gating))
    return sites, methods


def _guarded(guards: Mapping[str, list[list[int]]], gating: set[int]) -> Iterator[str]:
    """The texts each of whose calls comes after one of the `gating` calls."""
    return (text for text, calls in guards.items() if all(gating.intersection(before) for before in calls))


class MethodDefiners:
    """The project files not read yet that may define a method some file read calls only where
    CUDA is (`def resize(` in a text naming CUDA): that file's answer needs them read (and then
    the other callers of what they define, by name). Each text is searched once per pass."""

    def __init__(self) -> None:
        self._defined: dict[str, frozenset[str]] = {}  # by path: the names its text defines

    def __call__(self, summaries: Mapping[str, dict[str, Any]], unparsed: Mapping[str, bytes]) -> list[str]:
        names = {name for summary in summaries.values() for name in summary.get("cuda_method_calls", ())}
        names -= IMPLICITLY_CALLED_METHODS
        if not names:
            return []
        found = []
        for path, source in unparsed.items():
            defined = self._defined.get(path)
            if defined is None:
                texts = _DEFINITION.findall(source) if b"cuda" in source else ()
                defined = self._defined[path] = frozenset(text.decode() for text in texts)
            if not names.isdisjoint(defined):
                found.append(path)
        return found


def _methods_by_name(
    summaries: Mapping[str, dict[str, Any]], checked: Collection[str]
) -> dict[str, list[Target]]:
    """The methods of checked files that reach CUDA, by name (those called only explicitly)."""
    found: dict[str, list[Target]] = {}
    for path in checked:
        for qualname in summaries.get(path, {}).get("cuda_reach", ()):
            name = qualname.rsplit(".", 1)[-1]
            if "." in qualname and name not in IMPLICITLY_CALLED_METHODS and not name.startswith("__"):
                found.setdefault(name, []).append((path, qualname))
    return found


def file_callers(found: dict[Target, bool], path: str) -> frozenset[tuple[str, bool]]:
    """`FileFacts.cuda_callers` of one checked file."""
    return frozenset((name, gated) for (file, name), gated in found.items() if file == path)


def cuda_callee(
    path: str,
    reference: list[Any] | None,
    summaries: Mapping[str, dict[str, Any]],
    checked: Collection[str],
    index: ProjectIndex,
    wanted: set[str],
) -> bool:
    """Is the callee a reference of `path` names a module-level function of another checked file
    that reaches CUDA (not `LOGGER.info` of an imported object, not a helper that never names
    CUDA)? A module not read yet is added to `wanted` (pass 1's next round reads it) and answers then."""
    if reference is None or reference[0] == "here":
        return False
    if reference[0] != "module":
        return True  # a name an `import *` may bind
    located = index.locate(path, reference[1], reference[2])
    if located is None or located.file is None or located.file not in checked or len(located.attributes) != 1:
        return False
    summary = summaries.get(located.file)
    if summary is None:
        wanted.add(located.file)
        return False
    return located.attributes[0] in summary["cuda_reach"]


def _reaching(found: dict[Target, bool], summaries: Mapping[str, dict[str, Any]]) -> dict[Target, bool]:
    """The answers for the functions that reach CUDA (summary `cuda_reach`): only their callers are
    read in full, and only they decide anything."""
    return {
        (file, name): gated
        for (file, name), gated in found.items()
        if name in summaries.get(file, {}).get("cuda_reach", ())
    }
