"""Dataset classes across files: `class CodeDataset(FairseqDataset)`, where `FairseqDataset`
(another module of the project) derives from `torch.utils.data.Dataset` (issue 13).

A dataset's files (caches, statistics) hold samples, host data (see
`host_loads.restores_no_device_at_call`); per file, `datasets.is_dataset_class`
follows bases only through classes of the same file.

- `DatasetClasses`: the summary field (pass 1, `summaries._Collector`): each
  module-level class that is a Dataset in its own file, or has bases that are
  project names (classes of the file, or imports named `*Dataset`: only their
  modules are parsed on demand, not a `PreTrainedModel`'s), with their references.
- `load_facts.dataset_bases`: for each checked file, the base texts (as the file
  writes them) that name a project class deriving from a torch Dataset
  (`project_facts.FileFacts.dataset_bases`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libcst as cst

from torchdev_lint.analysis.data.datasets import is_dataset_class
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name

Reference = list[Any]
References = Callable[[str, Scope], Reference | None]


class DatasetClasses:
    """The module-level classes of one file that are, or may be through the project, Datasets."""

    def __init__(self, references: References) -> None:
        self._references = references
        self.classes: dict[str, dict[str, Any]] = {}

    def note(self, node: cst.ClassDef, scope: Scope) -> None:
        """A module-level class; `scope` is the module's."""
        bases = []
        for base in node.bases:
            value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
            text = dotted_name(value)
            if text is None:
                continue
            found = scope.lookup(text)
            if found is not None and any(isinstance(b.node, cst.ClassDef) for b in found[1]):
                bases.append([text, ["here", text]])
            elif "dataset" in text.lower() and (reference := self._references(text, scope)) is not None:
                if reference[0] == "module":  # only a `*Dataset` base's module is worth parsing
                    bases.append([text, reference])
        dataset = is_dataset_class(node, scope)
        if dataset or bases:
            self.classes[node.name.value] = {"dataset": dataset, "bases": bases}


def derives_from_project_dataset(node: cst.ClassDef, bases: frozenset[str]) -> bool:
    """Does a base of the class name a project Dataset class (`dataset_bases` of its file)?"""
    for base in node.bases:
        value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
        if dotted_name(value) in bases:
            return True
    return False
