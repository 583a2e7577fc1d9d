"""What a reference written in one file names in the project (pass 1's resolution).

A summary keeps each callee as written (`analysis/project/summaries.py`: `["module", 1,
"dist.init"]`, `["here", "Trainer.setup"]`, `["star", "init"]`); here it becomes the function of a
project file it stands for, through re-exports (`from .dist import init`), `import *` and base
classes in other modules, or a project-wide name for what it stands for (`canonical`). A module
not summarized yet that a name of interest leads to is added to `wanted` for pass 1's next round.
No LibCST here: a warm run imports none.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from torchdev_lint.analysis.project.index import ProjectIndex
from torchdev_lint.analysis.project.inheritance import Inheritance

Target = tuple[str, str]
MAX_ALIASES = 8
# The summary fields that name a function of the file.
_DEFINED = (
    "functions",
    "checkpoints",
    "batches",
    "cuda_defaults",
    "forwards",
    "returns",
    "dataset_items",
    "defined",
)


class References:
    """Resolution of references over the summaries read so far (memoised until `forget`)."""

    def __init__(
        self,
        summaries: dict[str, dict[str, Any]],
        index: ProjectIndex,
        inheritance: Inheritance,
        names: Collection[str],
        wanted: set[str],
    ) -> None:
        self._summaries = summaries
        self._index = index
        self._inheritance = inheritance
        self._names = names  # the names pass 1 looks for: a module defining one is wanted
        self._wanted = wanted
        self._targets: dict[tuple[Any, ...], Target | None] = {}
        self._constructors: tuple[int, frozenset[str]] = (0, frozenset())  # by the gating set's size

    def forget(self) -> None:
        """The summaries changed (or may have): resolutions made from them are stale."""
        self._targets.clear()
        self._constructors = (0, frozenset())

    def _classes(self, gating: Collection[Target]) -> frozenset[str]:
        """The names of the classes whose `__init__` gates: only a call of one may be a constructor's
        gate. (A fixed point's set only grows between two `forget`s: its size tells it is stale.)"""
        if self._constructors[0] != len(gating):
            names = frozenset(q.rsplit(".", 2)[-2] for _, q in gating if q.endswith(".__init__"))
            self._constructors = (len(gating), names)
        return self._constructors[1]

    def target(self, path: str, reference: list[Any], depth: int = 0) -> Target | None:
        """The project function a reference of `path` names, or None (unknown)."""
        key = (path, *reference)  # a reference is a flat list of strings and ints
        if key not in self._targets:
            self._targets[key] = None  # a cycle of re-exports names nothing
            self._targets[key] = self._resolve(path, reference, depth)
        return self._targets[key]

    def gates(self, path: str, reference: list[Any], gating: Collection[Target]) -> bool:
        """Does a call of what `reference` names stop the program where CUDA is missing: a gating
        function, or a class whose `__init__` gates (`Context(...)` runs it)?"""
        if self.target(path, reference) in gating:
            return True
        if reference[0] == "star" or reference[-1].rsplit(".", 1)[-1] not in self._classes(gating):
            return False
        return self.target(path, [*reference[:-1], f"{reference[-1]}.__init__"]) in gating

    def canonical(self, path: str, reference: list[Any]) -> str | None:
        """What a reference of `path` names project-wide: `file:name`, or `:dotted` outside it."""
        if reference[0] == "here":
            return f"{path}:{reference[1]}"
        if reference[0] != "module":
            return None
        located = self._index.locate(path, reference[1], reference[2])
        if located is None:
            return f":{reference[2]}" if reference[1] == 0 else None
        if located.file is None or not located.attributes:
            return None
        return f"{located.file}:{'.'.join(located.attributes)}"

    def _resolve(self, path: str, reference: list[Any], depth: int) -> Target | None:
        kind = reference[0]
        if kind == "here":
            return self._inheritance.method(path, reference[1])
        if kind == "star":
            return self._from_stars(path, reference[1], depth)
        located = self._index.locate(path, reference[1], reference[2])
        if located is None or located.file is None:
            return None
        return self._member(located.file, located.attributes, depth)

    def _member(self, path: str, attributes: tuple[str, ...], depth: int) -> Target | None:
        """The function `attributes` names in module `path`: defined there, re-exported from
        another module, or bound by one of its `import *`."""
        if not attributes or depth > MAX_ALIASES:
            return None
        summary = self._summaries.get(path)
        if summary is None:
            if attributes[0] in self._names:
                self._wanted.add(path)
            return None
        qualname = ".".join(attributes)
        if any(qualname in summary[field] for field in _DEFINED):
            return path, qualname
        alias = summary["aliases"].get(attributes[0])
        if alias is not None:
            level, dotted = alias[1], ".".join((alias[2], *attributes[1:]))
            return self.target(path, ["module", level, dotted], depth + 1)
        if len(attributes) == 1:
            return self._from_stars(path, attributes[0], depth)
        return None

    def _from_stars(self, path: str, name: str, depth: int) -> Target | None:
        for level, module in reversed(self._summaries[path]["stars"]):
            located = self._index.locate(path, level, module)
            if located is not None and located.file is not None and not located.attributes:
                found = self._member(located.file, (name,), depth + 1)
                if found is not None:
                    return found
        return None
