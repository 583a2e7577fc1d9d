"""What a file's check learns from the rest of its project: plain data, made by pass 1
(`analysis/project/project_facts.py`) and handed to each file's check (workers receive it pickled)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, NamedTuple

from torchdev_lint.analysis.project.parameter_facts import Handed

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.parameters import Parameter


NCCL = "nccl"
IMPORTED = "imported"
CUDA_ONLY_IMPORT = "imports a CUDA-only project module"
OWN_LOAD_STATE_DICT = "a project class defines load_state_dict"
TESTS_AMP_CLASS = "a project file tests the type of an AMP object"
DEFINES_TO = "a project class defines its own to()"


class FileFacts(NamedTuple):
    """What a file's check learns from the rest of the project (see `analysis/project/parameter_facts.py`
    for the parameter boundaries)."""

    gating: frozenset[str] = frozenset()
    # (callee as written, call position or -1, parameter): stored in a saved dict / batches moved.
    checkpointing: frozenset[Handed] = frozenset()
    batch_moving: frozenset[Handed] = frozenset()
    # (function, parameter) of this file: every project call passes a pinned loader.
    pinned_loaders: frozenset[tuple[str, str]] = frozenset()
    # Of them, those for which every call's pinned loader collates by default (TDL205's fix safety).
    collated_loaders: frozenset[tuple[str, str]] = frozenset()
    # `load_facts.local_key`s of `torch.load` paths the project writes only from host memory;
    # base class texts naming a project Dataset class (`analysis/data/dataset_bases.py`).
    host_saved: frozenset[str] = frozenset()
    dataset_bases: frozenset[str] = frozenset()
    # Callees as written that return host data (`analysis/provenance/returned_values.py`).
    host_returns: frozenset[str] = frozenset()
    # (class, parameter) of this file: a CUDA default no construction overrides (constructor_facts).
    cuda_defaults: frozenset[tuple[str, str]] = frozenset()
    # (name, module): a name the file imports from a project package that binds it by `import
    # module` of a third-party module (`from . import k2`; `analysis/provenance/host_facts.py`).
    external_modules: frozenset[tuple[str, str]] = frozenset()
    # (class as written, call position or -1, parameter): a project dataset class hands out the
    # items of that constructor argument unchanged (`analysis/data/dataset_items.py`).
    item_passing: frozenset[Handed] = frozenset()
    # (function or `Class.method` of this file, every call of it from other files runs only where
    # CUDA is): for those other files of the project call (`analysis/context/cuda_callers.py`).
    cuda_callers: frozenset[tuple[str, bool]] = frozenset()
    # `NCCL` when every process group the project starts uses NCCL (`analysis/context/project_groups.py`).
    process_groups: frozenset[str] = frozenset()
    # `IMPORTED` when another file of the project imports this module (`analysis/context/entry_points.py`);
    # `CUDA_ONLY_IMPORT` when the module imports a project module that needs a CUDA-only library
    # (`analysis/project/context_facts.py`); `OWN_LOAD_STATE_DICT` when a class of the project defines
    # `load_state_dict`, `TESTS_AMP_CLASS` when one tests the type of an AMP object
    # (`analysis/project/context_facts.py`).
    roles: frozenset[str] = frozenset()
    # (name, is a size): functions of the project modules this file imports that say a process group
    # is initialised (`dist_utils.in_group()`; `analysis/context/project_groups.py`).
    group_helpers: frozenset[tuple[str, bool]] = frozenset()
    # (class as this file's imports name it, calls of an instance must get inputs on its weights'
    # device): nn.Module subclasses of project modules (`analysis/project/context_facts.py`).
    module_classes: frozenset[tuple[str, bool]] = frozenset()
    # Names other files of the project import from this module (`from amp_utils import autocast`):
    # a fix that removes this module's last use of an import of such a name keeps the import
    # (`fixes.Tidy`; read from the import statements' text, `pass_one_text.imports`).
    imported_names: frozenset[str] = frozenset()
    # (callee as written, call position or -1, parameter, position or -1 and name ("" for none) of
    # its device parameter, place without it): a module-level function of another file moves (part
    # of) that argument (`analysis/data/helper_moves.py`).
    argument_moves: frozenset[tuple[str, int, str, int, str, str]] = frozenset()

    def moved_arguments(self, callee: str) -> list[tuple[int, str, int, str, str]]:
        """What `argument_moves` says of `callee` (as the file writes it)."""
        return [entry[1:] for entry in self.argument_moves if entry[0] == callee]

    def gates(self, callee: str) -> bool:
        """`callee`, written as the file writes it, stops the program where CUDA is missing."""
        return callee in self.gating

    def called_with_cuda(self, function: str) -> bool | None:
        """Do the calls other files make of this file's `function` all run only where CUDA is?
        None when no other file calls it."""
        for name, gated in self.cuda_callers:
            if name == function:
                return gated
        return None

    def nccl_program(self) -> bool:
        """Does every process group the project starts use NCCL (at least one)?"""
        return NCCL in self.process_groups

    def imported_group_helpers(self) -> frozenset[tuple[str, bool]]:
        """(name, is a size) of the group tests the file may import from project modules."""
        return self.group_helpers

    def imported_by_project(self) -> bool:
        """Does another file of the project import this module (it is part of a package)?"""
        return IMPORTED in self.roles

    def module_class(self, name: str) -> bool | None:
        """Is `name` (resolved as the file imports it: `models.Encoder`, `.nets.Decoder`) an nn.Module
        subclass of the project, and must calls of an instance get inputs on its weights' device?
        None when it is not known to be one. (Members are looked up one by one: a check made
        before the facts were known is re-checked only where its classes are among them.)"""
        for placed in (True, False):
            if (name, placed) in self.module_classes:
                return placed
        return None

    def imports_cuda_only(self) -> bool:
        """Does the module import, whenever it is imported, a project module that imports a
        CUDA-only library (`tensorrt`, a `*_cuda` extension) the same way?"""
        return CUDA_ONLY_IMPORT in self.roles

    def defines_load_state_dict(self) -> bool:
        """Does a class of the project (this file's, or one it may reach) define its own
        `load_state_dict`, which may keep the tensors it is given as they are?"""
        return OWN_LOAD_STATE_DICT in self.roles

    def defines_to(self) -> bool:
        """Does a class of the project define its own `to()` (a batch part may be one of its
        objects, whose `.to()` may not take `non_blocking`)?"""
        return DEFINES_TO in self.roles

    def tests_amp_class(self) -> bool:
        """Does a file of the project test an object against an AMP class (`isinstance(s,
        torch.cuda.amp.GradScaler)`), which an object of the new spelling's class may fail?"""
        return TESTS_AMP_CLASS in self.roles

    def checkpointed(self, callee: str) -> list[tuple[int | None, str]]:
        """The parameters (call position, name) `callee` stores in a dict it gives to `torch.save`."""
        return _parameters(self.checkpointing, callee)

    def moves_batches(self, callee: str) -> list[tuple[int | None, str]]:
        """The loader parameters (call position, name) whose batches `callee` moves to a device."""
        return _parameters(self.batch_moving, callee)

    def hands_out_items(self, callee: str) -> list[tuple[int | None, str]]:
        """The constructor parameters (call position, name) whose items the dataset class
        `callee` returns as they are."""
        return _parameters(self.item_passing, callee)

    def pinned(self, parameter: Parameter) -> bool:
        """Does every call in the project pass a pinned `DataLoader` for this loader parameter?"""
        return (parameter.function, parameter.name) in self.pinned_loaders

    def collated(self, parameter: Parameter) -> bool:
        """... and every such loader collates by default (its batches' parts are tensors)?"""
        return (parameter.function, parameter.name) in self.collated_loaders

    @property
    def digest(self) -> str:
        """A hash of these facts for the file's cache key; empty when there are none."""
        if not any(self):
            return ""
        return hashlib.sha256(json.dumps([sorted(member) for member in self]).encode()).hexdigest()


def _parameters(handed: frozenset[Handed], callee: str) -> list[tuple[int | None, str]]:
    return [(None if at < 0 else at, name) for text, at, name in handed if text == callee]


class ProjectFacts(NamedTuple):
    """The facts of every checked file that has some (plain data: workers receive it)."""

    files: dict[str, FileFacts]

    def of(self, path: str) -> FileFacts | None:
        return self.files.get(path)

    def digest(self, path: str) -> str:
        facts = self.files.get(path)
        return facts.digest if facts is not None else ""
