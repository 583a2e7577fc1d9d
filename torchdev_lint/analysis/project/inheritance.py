"""Methods through inheritance across files: `self.setup()` in `class Trainer(BaseTrainer)`,
where `setup` is defined in `BaseTrainer` in another module of the project (issue 13).

A summary names `self.setup` inside a method of `Trainer` as `["here", "Trainer.setup"]`;
the method that call runs is the first definition of `setup` in `Trainer`'s method
resolution order. So each summary lists its module-level classes (`classes`: the
references of their bases, the names their bodies bind), and `Inheritance.method`
walks the order (C3, as Python computes it) over the project's classes:

- the class itself or a project class before any other defining the name wins
  (an override in the subclass, or in any class between, is found first); a project
  class deriving from the caller's that defines the name again makes it unknown (the
  object may be one of those);
- a base that is not a project class (`nn.Module`, a third-party trainer) may define
  anything: reaching one before a definition is unknown (None), and so is a base the
  index cannot resolve, a module not summarized, or an order C3 refuses.

`object` adds nothing (`summaries.class_entry` writes the entries). Bases are resolved
through the summaries' aliases (a package `__init__.py` re-exporting a class), as
`analysis/data/dataset_bases.py` does for Datasets. No LibCST here: a warm run imports none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from torchdev_lint.analysis.project.index import Located

Reference = list[Any]
Summary = dict[str, Any]
Target = tuple[str, str]
# A class in the order: a project class (file, name), or ("", text) for one outside the project.
_Class = tuple[str, str]
_MAX_DEPTH = 16


class Inheritance:
    """Method lookup over the summaries read so far (`project_facts._Pass` owns them)."""

    def __init__(
        self,
        summaries: dict[str, Summary],
        locate: Callable[[str, int, str], Located | None],
        wanted: set[str],
    ) -> None:
        self._summaries = summaries
        self._locate = locate
        self._wanted = wanted  # modules to summarize in the next round
        self._subclasses: dict[_Class, list[_Class]] | None = None  # direct, among the summaries

    def forget(self) -> None:
        """The summaries changed: what was derived from them is stale."""
        self._subclasses = None

    def method(self, path: str, qualname: str, *, want: bool = False) -> Target | None:
        """The method `self.name` runs in class `Class` of `path` (`qualname` = "Class.name");
        with `want`, the unsummarized modules of its bases are asked for (the next round).
        Unknown when a project subclass of `Class` defines the name again: which one runs
        depends on the object."""
        owner, _, name = qualname.partition(".")
        classes = self._summaries[path].get("classes", {})
        if not name or "." in name or owner not in classes:
            return path, qualname  # a function, or a class only this file knows
        if self._redefined_below((path, owner), name):
            return None
        if name in classes[owner][1]:
            return path, qualname
        order = self._order((path, owner), want, 0)
        for file, cls in order or ():
            if not file:
                return None  # a class outside the project may define it
            if name in self._summaries[file]["classes"][cls][1]:
                return file, f"{cls}.{name}"
        return None

    def _redefined_below(self, cls: _Class, name: str) -> bool:
        """Does a summarized class deriving from `cls`, directly or not, define `name`?"""
        if self._subclasses is None:
            self._subclasses = {}
            for path, summary in self._summaries.items():
                for derived, (bases, _) in summary.get("classes", {}).items():
                    for reference in bases:
                        base = self._base(path, reference, False) if reference is not None else None
                        if base is not None and base[0]:
                            self._subclasses.setdefault(base, []).append((path, derived))
        seen: set[_Class] = set()
        work = list(self._subclasses.get(cls, ()))
        while work:
            current = work.pop()
            if current in seen:
                continue
            seen.add(current)
            if name in self._summaries[current[0]]["classes"][current[1]][1]:
                return True
            work += self._subclasses.get(current, ())
        return False

    def calls_unseen(self, target: Target, texts: Iterable[bytes]) -> bool:
        """May a method run from calls not seen as calls of it: it redefines a method of a
        project class it derives from (whose code may call `self.name()`), or a call through
        an instance (`trainer.fit(...)`) names it, in a summary (`method_calls`) or in the
        text of a file not summarized?"""
        path, qualname = target
        owner, _, name = qualname.partition(".")
        if not name or path not in self._summaries or owner not in self._summaries[path].get("classes", {}):
            return False
        if any(name in summary.get("method_calls", ()) for summary in self._summaries.values()):
            return True
        called = re.compile(rb"\.%s\s*\(" % re.escape(name.encode()))
        if any(called.search(text) for text in texts):
            return True
        order = self._order((path, owner), False, 0) or []
        return any(file and name in self._summaries[file]["classes"][cls][1] for file, cls in order[1:])

    def subclass_names(self, owners: set[tuple[str, str]]) -> set[str]:
        """The names of the summarized classes deriving, directly or not, from these project
        classes (`(file, name)`): a call `self.method()` in one of them may run theirs, so
        their files are callers to read."""
        found = set(owners)
        changed = True
        while changed:
            changed = False
            for path, summary in self._summaries.items():
                for name, (bases, _) in summary.get("classes", {}).items():
                    if (path, name) in found:
                        continue
                    if any(r is not None and self._base(path, r, False) in found for r in bases):
                        found.add((path, name))
                        changed = True
        return {name for _, name in found}

    def _order(self, cls: _Class, want: bool, depth: int) -> list[_Class] | None:
        """C3 linearization of a class; None when it cannot be known."""
        file, name = cls
        if not file:
            return [cls]
        if depth > _MAX_DEPTH:
            return None
        bases = []
        for reference in self._summaries[file]["classes"][name][0]:
            base = self._base(file, reference, want) if reference is not None else None
            if base is None:
                return None
            bases.append(base)
        orders = []
        for base in bases:
            order = self._order(base, want, depth + 1)
            if order is None:
                return None
            orders.append(order)
        merged = _merge([*orders, bases])
        return None if merged is None else [cls, *merged]

    def _base(self, path: str, reference: Reference, want: bool, depth: int = 0) -> _Class | None:
        """The class a base reference of `path` names: a project class, `("", dotted)` outside the
        project, None when unknown (not summarized, not a class, re-exports too deep)."""
        if reference[0] == "here":
            return (path, reference[1]) if reference[1] in self._summaries[path]["classes"] else None
        if reference[0] != "module" or depth > _MAX_DEPTH:
            return None
        located = self._locate(path, reference[1], reference[2])
        if located is None:
            return ("", reference[2]) if reference[1] == 0 else None
        if located.file is None or len(located.attributes) != 1:
            return None
        summary = self._summaries.get(located.file)
        if summary is None:
            if want:
                self._wanted.add(located.file)
            return None
        name = located.attributes[0]
        if name in summary.get("classes", {}):
            return located.file, name
        alias = summary["aliases"].get(name)
        return self._base(located.file, alias, want, depth + 1) if alias is not None else None


def _merge(orders: list[list[_Class]]) -> list[_Class] | None:
    """C3's merge; None when no consistent order exists."""
    orders = [list(order) for order in orders if order]
    merged: list[_Class] = []
    while orders:
        head = next((o[0] for o in orders if not any(o[0] in other[1:] for other in orders)), None)
        if head is None:
            return None
        merged.append(head)
        orders = [rest for o in orders if (rest := o[1:] if o[0] == head else o)]
    return merged
