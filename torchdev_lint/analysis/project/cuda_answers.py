""" "CUDA required here" across any number of files (issue 23: context facts over the call graph).

Pass 1 judges a file's call sites from its text alone (summary `cuda_sites`, `cuda_method_calls`), so
on its own a gate crosses one file boundary: `train.py` exits without CUDA and calls
`engine.evaluate()`, whose calls are not known to be gated. Here a checked file that calls a gate of
another file (`self.ctx = Context()`), or some of whose functions every other file calls only where
CUDA is, and that calls what reaches CUDA elsewhere (`cuda_callers.relay_files`) outside the code
pass 1 found gated, is summarized again with those facts (`summarize(module, path, facts)`: not
cached, it depends on other files), and the answers are computed again, until none changes. Each
round only adds gated sites, so answers only grow; recursion alone proves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torchdev_lint.analysis.context.cuda_callers import (
    cuda_callee,
    cuda_callers,
    file_callers,
    reaching_method_names,
    relay_files,
)
from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.files import read_source

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.project_facts import _Pass

Target = tuple[str, str]
_MAX_HOPS = 8  # rounds of judging sites again: files between a gate and a use


class CudaAnswers:
    """`cuda_callers`' answers for a pass, to a fixed point over the files' sites judged again."""

    def __init__(
        self, project: _Pass, parse: Callable[[str, bytes], Any], texts: Mapping[str, bytes]
    ) -> None:
        self._project = project
        self._parse = parse
        self._texts = texts
        # By (checked file, gates it calls, what other files say of its functions): its CUDA sites.
        self._given: dict[tuple[str, frozenset[str], frozenset[tuple[str, bool]]], Any] = {}

    def callers(self, gating: set[Target]) -> dict[Target, bool]:
        """(file, function or `Class.method`) -> do all calls from other files run only where CUDA is?"""
        project = self._project
        summaries, checked, target, unreadable = (
            project.summaries,
            project.checked,
            project.references.target,
            project.unreadable,
        )
        every = cuda_callers(summaries, checked, target, unreadable, every=True)
        for path in sorted({path for (path, _), gated in every.items() if gated}):
            self._want_callees(path)  # what it calls is read in pass 1's next round
        callers = cuda_callers(summaries, checked, target, unreadable)
        relays = relay_files(summaries, checked, target)
        methods = reaching_method_names(summaries, checked)
        for _ in range(_MAX_HOPS):
            views = dict(summaries)
            for path in sorted(checked & views.keys()):
                answers = file_callers(callers, path)
                gates = project.gating_texts(path, gating)
                if gates:
                    self._want_callees(path)
                if (gates or any(gated for _, gated in answers)) and self._ungated_calls(
                    views[path], path, relays, methods, gates
                ):
                    sites = self._sites_given(path, FileFacts(gates, cuda_callers=answers))
                    if sites is not None:
                        views[path] = {**views[path], "cuda_sites": sites[0], "cuda_method_calls": sites[1]}
            found = cuda_callers(views, checked, target, unreadable)
            if found == callers:
                break
            callers = found
        return callers

    def _ungated_calls(
        self,
        summary: dict[str, Any],
        path: str,
        relays: set[str],
        methods: frozenset[str],
        gates: frozenset[str],
    ) -> bool:
        """Does a relay file call, outside the code pass 1 found gated, a function of another checked
        file that reaches CUDA or lives in a relay file (other than the gates themselves), or a method
        (`methods`, by name) that reaches CUDA? Only then can facts from other files gate more."""
        if path not in relays:
            return False
        if not methods.isdisjoint(set(summary.get("method_calls", ())) - set(summary["cuda_method_calls"])):
            return True
        project = self._project
        gated = set(summary["cuda_sites"]) | gates
        for text, reference in summary["sites"].items():
            callee = (
                project.references.target(path, reference)
                if reference is not None and text not in gated
                else None
            )
            if callee is not None and callee[0] != path and callee[0] in project.checked:
                if callee[0] in relays or callee[1] in project.summaries[callee[0]].get("cuda_reach", ()):
                    return True
        return False

    def _want_callees(self, path: str) -> None:
        """The modules the file calls functions of that pass 1 has not summarized yet are wanted
        for its next round (`cuda_callee`)."""
        project = self._project
        for reference in project.summaries[path]["sites"].values():
            cuda_callee(path, reference, project.summaries, project.checked, project.index, project.wanted)

    def _sites_given(self, path: str, facts: FileFacts) -> tuple[list[str], list[str]] | None:
        """A summarized file's `cuda_sites` and `cuda_method_calls` judged again with `facts`
        (gates of other files, answers about its functions); None when it cannot be parsed again."""
        key = (path, facts.gating, facts.cuda_callers)
        if key not in self._given:
            from torchdev_lint.analysis.project.summaries import summarize  # LibCST: only where it decides

            self._given[key] = None
            try:
                source = self._texts.get(path) or read_source(path)
                summary = summarize(self._parse(path, source), path, facts)
                self._given[key] = (summary["cuda_sites"], summary["cuda_method_calls"])
            except (SourceError, RecursionError):
                pass
        return self._given[key]
