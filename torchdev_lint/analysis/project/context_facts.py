"""Context facts pass 1 gives whole files, read from the checked files' texts and imports and
from the summaries: every process group the project starts is NCCL's (`process_groups`), with
the group tests of the project modules a file imports (`group_helpers`;
`analysis/context/project_groups.py`), other files import this module (`roles`;
`analysis/context/entry_points.py`), and the module imports, whenever it is imported, a project
module that imports a CUDA-only library (`roles`: a TensorRT deployment's Triton model imports the
project's engine wrapper, which imports `tensorrt`; `context/requirements.py`), and what some file
of the project writes that makes a fix unsafe wherever its objects may go (`roles`): a class
defining its own `load_state_dict`, which may keep a loaded state dict's tensors as given (TDL101),
a type test of an AMP class, which the new spelling's class fails (TDL312). Each goes only to
the files whose text could ask it, so a change elsewhere re-checks those alone. No LibCST here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from torchdev_lint.analysis.context.project_groups import nccl_program
from torchdev_lint.analysis.knowledge.cuda_modules import cuda_only_module, own_package
from torchdev_lint.analysis.project.file_facts import (
    CUDA_ONLY_IMPORT,
    DEFINES_TO,
    IMPORTED,
    NCCL,
    OWN_LOAD_STATE_DICT,
    TESTS_AMP_CLASS,
    FileFacts,
)
from torchdev_lint.analysis.project.index import Located
from torchdev_lint.analysis.project.pass_one_text import Imports, constructs, may_test_group

_NCCL_ONLY = frozenset({NCCL})
_IMPORTED = frozenset({IMPORTED})
_CUDA_ONLY_IMPORT = frozenset({CUDA_ONLY_IMPORT})
# Project-wide facts read from any file's text: (role, what the text of a file that could ask it
# or make it true names, what the text of a file that makes it true matches). A type test of the
# new AMP classes (`torch.amp.GradScaler`) still holds after the fix: the file names `cuda.amp`.
# A type test of an AMP class other than torch.amp's own: `isinstance(s, (torch.cuda.amp.GradScaler,
# type(None)))`, `type(s) is GradScaler`, `case torch.cuda.amp.GradScaler():`.
AMP_TYPE_TEST = re.compile(
    rb"\b(?:isinstance|issubclass)\([^\n]{0,200}?\b(?<!torch\.amp\.)(?:GradScaler|autocast)\b"
    rb"|\btype\([^()]*\)\s*(?:is|==)\s*[\w.]*\b(?<!torch\.amp\.)(?:GradScaler|autocast)\b"
    rb"|\bcase\s+[\w.]*\b(?<!torch\.amp\.)(?:GradScaler|autocast)\("
)
# Project-wide facts read from any file's text: (role, what the text of a file that could ask it
# names, what the text of a file that makes it true names and matches). A type test of the new
# AMP classes (`torch.amp.GradScaler`) still holds after the fix: such a file names no `cuda.amp`.
_TEXT_FACTS = (
    (
        OWN_LOAD_STATE_DICT,
        b"load_state_dict",
        b"_state",
        re.compile(
            rb"\bdef\s+(?:load_state_dict|set_extra_state|_load_from_state_dict)\b"
            rb"|\b_?register_load_state_dict_(?:pre_|post_)?hook\b"
        ),
    ),
    (TESTS_AMP_CLASS, b"cuda.amp", b"cuda.amp", AMP_TYPE_TEST),
    (DEFINES_TO, b".to(", b"def to", re.compile(rb"\bdef\s+to\s*\(\s*self\b")),
)
# Read a module's text and summarize it (pass 1's own reader), if it has not been.
Summarize = Callable[[str], None]
# The nn.Module classes a project module defines, each with whether calls of an instance are
# checked (`summaries.module_classes`).
ModuleClasses = Callable[[str], Mapping[str, bool]]


class ContextFacts:
    """What pass 1 noted of the checked files' texts and imports."""

    def __init__(self, checked: set[str]) -> None:
        self.checked = checked
        self.group_tests: set[str] = set()  # checked files whose text may test for a process group
        self.main_blocks: set[str] = set()  # checked files whose text may hold `if __name__ == "__main__":`
        self.imported: set[str] = set()  # files another file of the project imports
        self.project_imports: dict[str, set[str]] = {}  # of checked files: the project modules each imports
        self.cuda_only: set[str] = set()  # files (any read) whose unindented imports name a CUDA-only library
        self.top_imports: dict[str, set[str]] = {}  # the project modules each file imports unindented
        # Of checked files that may place a module on CUDA: (name as resolved there, module, class)
        # for each class-like name they import from a project module.
        self.class_imports: dict[str, list[tuple[str, str, str]]] = {}
        self.imported_names: dict[str, set[str]] = {}  # by module, the names other files import from it
        self.text_facts: set[str] = set()  # the roles of `_TEXT_FACTS` some file read makes true
        self.text_askers: dict[str, set[str]] = {}  # by role, the checked files that could ask it

    def note_text(self, path: str, source: bytes, imports: Imports) -> None:
        if path in self.checked and may_test_group(source):
            self.group_tests.add(path)
        if path in self.checked and b"__main__" in source:
            self.main_blocks.add(path)
        if any(
            top and not level and cuda_only_module(dotted) and not own_package(dotted, path)
            for level, dotted, top in imports
        ):
            self.cuda_only.add(path)
        for role, asked, named, pattern in _TEXT_FACTS:
            if path in self.checked and asked in source:
                self.text_askers.setdefault(role, set()).add(path)
            if role not in self.text_facts and named in source and pattern.search(source):
                self.text_facts.add(role)

    def note_import(self, path: str, module: str, top: bool, names: tuple[str, ...] = ()) -> None:
        """`path` imports the project module `module` (another file), unindented when `top`, or
        the first of `names` from it."""
        self.imported.add(module)
        if names:
            self.imported_names.setdefault(module, set()).add(names[0])
        if path in self.checked:
            self.project_imports.setdefault(path, set()).add(module)
        if top:
            self.top_imports.setdefault(path, set()).add(module)

    def note_class_import(self, path: str, source: bytes, level: int, dotted: str, located: Located) -> None:
        """`path` (text `source`) imports `dotted` (`level` dots) from the project module `located`:
        noted when it is a class-like name the text constructs (`Encoder(`); its resolved name there
        is `models.Encoder` or `.nets.Decoder`."""
        if (
            located.file is not None
            and len(located.attributes) == 1
            and constructs(source, located.attributes[0])
        ):
            entry = ("." * level + dotted, located.file, located.attributes[0])
            self.class_imports.setdefault(path, []).append(entry)

    def with_facts(
        self,
        facts: dict[str, FileFacts],
        summaries: Mapping[str, dict[str, Any]],
        unreadable: list[bytes],
        summarize: Summarize,
        only: str | None = None,
    ) -> dict[str, FileFacts]:
        """`facts` (of every checked file, or of `only`) with the context facts added, all but the
        imported module classes (`with_module_classes`, asked once the summaries are final)."""
        found = dict(facts)
        paths = self.checked if only is None else {only}
        if nccl_program(summaries.values(), unreadable):
            # A file that tests for a group itself, or through a helper it imports (whatever its name).
            for path in paths & (self.group_tests | self.project_imports.keys()):
                helpers = self._group_helpers(path, summaries, summarize)
                if helpers or path in self.group_tests:
                    found[path] = found.get(path, FileFacts())._replace(
                        process_groups=_NCCL_ONLY, group_helpers=helpers
                    )
        for path in paths & self.main_blocks & self.imported:
            found[path] = found.get(path, FileFacts())._replace(roles=_IMPORTED)
        for path in paths & self._importing_cuda_only():
            known = found.get(path, FileFacts())
            found[path] = known._replace(roles=known.roles | _CUDA_ONLY_IMPORT)
        for path in paths & self.imported_names.keys():
            known = found.get(path, FileFacts())
            found[path] = known._replace(imported_names=frozenset(self.imported_names[path]))
        for role in self.text_facts:
            for path in paths & self.text_askers.get(role, set()):
                known = found.get(path, FileFacts())
                found[path] = known._replace(roles=known.roles | {role})
        return found

    def with_module_classes(
        self, facts: dict[str, FileFacts], module_classes: ModuleClasses, only: str | None = None
    ) -> dict[str, FileFacts]:
        """`facts` with the nn.Module classes each file imports from project modules (asked once
        the summaries are final: `module_classes(module)` reads a module not summarized for its
        classes alone, so a file summarized in a later round is parsed once)."""
        found = dict(facts)
        for path in (self.checked if only is None else {only}) & self.class_imports.keys():
            classes = self._module_classes(path, module_classes)
            if classes:
                found[path] = found.get(path, FileFacts())._replace(module_classes=classes)
        return found

    def _module_classes(self, path: str, module_classes: ModuleClasses) -> frozenset[tuple[str, bool]]:
        """(name as `path` resolves it, calls of an instance are checked) of the nn.Module subclasses
        it imports from project modules."""
        found = set()
        for written, module, name in self.class_imports[path]:
            placed = module_classes(module).get(name)
            if placed is not None:
                found.add((written, placed))
        return frozenset(found)

    def _importing_cuda_only(self) -> set[str]:
        """Files that import, unindented, a project module that needs a CUDA-only library as it is
        imported, itself or through such imports of its own."""
        needing = set(self.cuda_only)
        found: set[str] = set()
        while True:
            fresh = {
                path for path, modules in self.top_imports.items() if path not in found and modules & needing
            }
            if not fresh:
                return found
            found |= fresh
            needing |= fresh

    def _group_helpers(
        self, path: str, summaries: Mapping[str, dict[str, Any]], summarize: Summarize
    ) -> frozenset[tuple[str, bool]]:
        """(name, is a size) of the group tests defined by the project modules `path` imports."""
        found: set[tuple[str, bool]] = set()
        for module in sorted(self.project_imports.get(path, ())):
            summarize(module)
            found.update((name, sizes) for name, sizes in summaries.get(module, {}).get("group_helpers", ()))
        return frozenset(found)
