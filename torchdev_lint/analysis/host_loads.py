"""Loads (`torch.load`, `torch.jit.load`, `load_state_dict_from_url`) that cannot restore a
tensor onto a device this machine lacks, judged from the load site and what the file writes.

- `restores_no_device_at_call`: signs at the call itself (a path this function has just
  written, test code, a function that deletes its `device` parameter, a generator-state or
  metadata file, a URL fixed in the code, XLA, a CUDA-only program's `torch.jit.load`, a
  scheduler, scaler or dataset class).
- `PendingLoads`: the loads left, judged once the whole file has been traversed (an in-memory
  round trip or a file saved from host memory by the same file, data shipped with the code,
  a value whose every use restores host data) and whether every use is a `load_state_dict`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.checkpoints import (
    LOADERS,
    Loader,
    SavedFiles,
    UseIndex,
    discards_device,
    fixed_url,
    holds_numbers_only,
    is_test_code,
    names_host_file,
    package_data,
    restores_host_data,
    runs_on_xla,
)
from torchdev_lint.analysis.dataset_bases import derives_from_project_dataset
from torchdev_lint.analysis.datasets import is_dataset_class
from torchdev_lint.analysis.requirements import cuda_requirements
from torchdev_lint.analysis.saved_files import local_key, path_shape
from torchdev_lint.analysis.scopes import Scope
from torchdev_lint.syntax import argument, has_star

if TYPE_CHECKING:
    from torchdev_lint.analysis.project_facts import FileFacts
    from torchdev_lint.engine import FileContext


def unmapped_loader(call: cst.Call, qualname: str | None) -> Loader | None:
    """The loader `call` calls when it passes no `map_location` (unpacked arguments may carry one)."""
    loader = LOADERS.get(qualname or "")
    if loader is None or has_star(call, "*") or has_star(call, "**"):
        return None
    return loader if argument(call, loader.map_location_index, "map_location") is None else None


def restores_no_device_at_call(call: cst.Call, loader: Loader, saved: SavedFiles, ctx: FileContext) -> bool:
    """Signs, at the call being visited, that the load cannot meet a device this machine lacks."""
    owner = ctx.scope.owner
    found = argument(call, 0, "f")
    path = found.value if found is not None else None
    if path is not None and saved.written_here(path, owner):
        return True  # read back what this function has just written, on this machine
    if is_test_code(ctx.path, ctx.ancestors, owner) or discards_device(owner.node):
        return True
    if path is not None and names_host_file(path, ctx.scope):
        return True  # generator states or metadata: written from host memory
    if path is not None and loader.downloads and fixed_url(path, ctx.scope):
        return True  # weights the authors publish and load everywhere they support
    if runs_on_xla(owner.node):
        return True  # XLA writes checkpoints from host memory; no CUDA device to restore
    if loader.qualname == "torch.jit.load" and cuda_requirements(ctx.scope, ctx.path).requires_cuda(call):
        return True  # a CUDA-only program's scripted (TensorRT) module: a CPU map_location cannot serve it
    for node in ctx.ancestors:
        if not isinstance(node, cst.ClassDef):
            continue
        if holds_numbers_only(node.name.value):
            return True  # a scheduler or scaler restoring its own state: plain numbers
        if is_dataset_class(node, ctx.scope) or (
            ctx.project is not None and derives_from_project_dataset(node, ctx.project.dataset_bases)
        ):
            return True  # a dataset's files (caches, statistics) hold samples: host data
    return False


class PendingLoads:
    """Loads without `map_location` and without a sign at the call, judged once the whole file
    is known (a load may come before the save of its file; the fix's safety depends on every
    later use of the loaded value)."""

    def __init__(self, saved: SavedFiles) -> None:
        self.saved = saved
        self._loads: list[tuple[cst.Call, Loader, Scope]] = []

    def add(self, call: cst.Call, loader: Loader, scope: Scope) -> None:
        self._loads.append((call, loader, scope))

    def flagged(self, ctx: FileContext) -> Iterator[tuple[cst.Call, Loader, bool]]:
        """The loads that may restore tensors onto a missing device, each with whether every
        use of the loaded value ends in a `load_state_dict` (where `map_location="cpu"` changes
        nothing the program sees)."""
        indexes: dict[int, UseIndex] = {}
        for call, loader, scope in self._loads:
            owner = scope.owner
            if reads_own_or_shipped_file(call, loader, scope, self.saved, ctx.project):
                continue  # the project wrote it from host memory, or it ships with the code
            index = indexes.get(id(owner.node))
            if index is None:
                index = indexes[id(owner.node)] = UseIndex(owner.node)
            receivers = index.state_dict_receivers(call, owner)
            if receivers and all(restores_host_data(r, owner) for r in receivers):
                continue  # scheduler/scaler states are numbers, generator states CPU bytes, arrays host data
            yield call, loader, receivers is not None


def reads_own_or_shipped_file(
    call: cst.Call, loader: Loader, scope: Scope, saved: SavedFiles, project: FileFacts | None
) -> bool:
    """The file wrote what the load reads itself (see `SavedFiles.read_back`), another file of
    the project writes it from host memory only (`analysis/saved_files.py`), or it ships with
    the code; complete only once the whole file has been traversed."""
    found = argument(call, 0, "f")
    if found is None:
        return False
    owner = scope.owner
    if saved.read_back(loader.qualname, found.value, owner):
        return True
    if loader.qualname != "torch.load":
        return False
    if project is not None and local_key(path_shape(found.value, scope)) in project.host_saved:
        return True
    return package_data(found.value, owner)
