"""Loads (`torch.load`, `torch.jit.load`, `load_state_dict_from_url`) that cannot restore a
tensor onto a device this machine lacks, judged from the load site and what the file writes.

- `restores_no_device_at_call`: signs at the call itself (a path this function has just
  written, test code, a function that deletes its `device` parameter, a generator-state or
  metadata file, a URL fixed in the code, XLA, a CUDA-only program's `torch.jit.load`, a
  scheduler, scaler or dataset class).
- `PendingLoads`: the file's saves and loads as the traversal meets them; the loads without a
  sign at the call judged once the whole file has been traversed (an in-memory round trip or
  a file saved from host memory by the same file, data shipped with the code, a value whose
  every use restores host data) with whether every use is a `load_state_dict`.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.context.requirements import cuda_requirements
from torchdev_lint.analysis.data.dataset_bases import derives_from_project_dataset
from torchdev_lint.analysis.data.datasets import is_dataset_class
from torchdev_lint.analysis.provenance.checkpoint_loads import (
    LOADERS,
    Loader,
    UseIndex,
    discards_device,
    fixed_url,
    holds_numbers_only,
    is_test_code,
    names_host_file,
    package_data,
    path_key,
    restores_host_data,
    runs_on_xla,
)
from torchdev_lint.analysis.provenance.checkpoint_saves import SavedFiles
from torchdev_lint.analysis.provenance.load_facts import local_key
from torchdev_lint.analysis.provenance.saved_files import path_shape
from torchdev_lint.analysis.syntax.scopes import Scope, block_statements, dotted_name
from torchdev_lint.analysis.syntax.walk import calls, children, first
from torchdev_lint.analysis.values.host_values import SAVED_OBJECT
from torchdev_lint.syntax import argument, has_star

# `self`/`cls`: attributes of the instance or class a method runs on.
_OWN = ("self", "cls")
# Calls deleting a file.
_REMOVERS = frozenset({"os.remove", "os.unlink"})
# Module methods that may keep the tensors of a loaded state dict as given, not copy them in place.
_STATE_LOADING_METHODS = frozenset({"load_state_dict", "set_extra_state", "_load_from_state_dict"})
_STATE_LOADING_HOOKS = frozenset(
    {
        "register_load_state_dict_pre_hook",
        "_register_load_state_dict_pre_hook",
        "register_load_state_dict_post_hook",
    }
)

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.file_facts import FileFacts
    from torchdev_lint.engine import FileContext


class MappingRisk(Enum):
    """Why `map_location="cpu"` may change what a load gives the program (`PendingLoads.flagged`),
    in the words of TDL101's fix ("what may change"; its docs' "Fix safety" says the same)."""

    USED = (
        "what is loaded stays on the CPU: a module, optimizer or tensor used as loaded (or returned, "
        "handed on) may be expected on the device it was saved from"
    )
    SCRIPTED = "the scripted module stays on the CPU, where the code may expect the device it was saved from"
    OWN_LOAD_STATE_DICT = "this file or its project defines its own `load_state_dict`, which may keep the loaded tensors on the CPU"


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
    if path is not None and _names_host_file(path, ctx.scope):
        return True  # generator states or metadata: written from host memory
    if path is not None and (
        (loader.downloads and _fixed_url(path, ctx.scope)) or _downloaded_from_fixed_url(path, ctx.scope)
    ):
        return True  # weights the authors publish and load everywhere they support
    if path is not None and temporary_of_object(path, ctx.ancestors):
        return True  # a file its object deletes in `__del__`: written and read by this run
    if runs_on_xla(owner.node):
        return True  # XLA writes checkpoints from host memory; no CUDA device to restore
    if loader.qualname == "torch.jit.load" and cuda_requirements(
        ctx.scope, ctx.path, ctx.project
    ).requires_cuda(call):
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

    def __init__(self) -> None:
        self.saved = SavedFiles()
        self._loads: list[tuple[cst.Call, Loader, Scope]] = []

    def note(self, call: cst.Call, ctx: FileContext) -> None:
        """A call the traversal meets: a save of the file, or a load to judge at the end."""
        name = ctx.qualname(call.func)
        if name in SAVED_OBJECT:
            self.saved.note(call, name, ctx)
            return
        loader = unmapped_loader(call, name)
        if loader is not None and not restores_no_device_at_call(call, loader, self.saved, ctx):
            self._loads.append((call, loader, ctx.scope))

    def flagged(self, ctx: FileContext) -> Iterator[tuple[cst.Call, Loader, MappingRisk | None]]:
        """The loads that may restore tensors onto a missing device, each with why
        `map_location="cpu"` may change what the program sees, or None where it cannot: every
        use of the loaded value ends in a `load_state_dict` neither the file nor a class of its
        project defines (`OWN_LOAD_STATE_DICT`: its own may keep the tensors as given; `USED`: some use is not
        one), and the loader is no `torch.jit.load` (`SCRIPTED`: its module would stay on the
        CPU)."""
        indexes: dict[int, UseIndex] = {}
        own_load_state_dict: bool | None = None
        for call, loader, scope in self._loads:
            owner = scope.owner
            if reads_own_or_shipped_file(call, loader, scope, self.saved, ctx.project):
                continue  # the project wrote it from host memory, or it ships with the code
            index = indexes.get(id(owner.node))
            if index is None:
                index = indexes[id(owner.node)] = UseIndex(owner.node)
            receivers = index.state_dict_receivers(call, owner)
            if receivers is not None and _imported_elsewhere(call, index, owner, ctx.project):
                receivers = None  # `CKPT = torch.load(p)` that another file imports: used there too
            if receivers and all(restores_host_data(r, owner) for r in receivers):
                continue  # scheduler/scaler states are numbers, generator states CPU bytes, arrays host data
            if own_load_state_dict is None and ctx.fixes:  # only the fix's safety asks (a module walk)
                own_load_state_dict = (ctx.project is not None and ctx.project.defines_load_state_dict()) or (
                    first(ctx.module, _defines_load_state_dict) is not None
                )
            why = None
            if loader.qualname == "torch.jit.load":
                why = MappingRisk.SCRIPTED
            elif receivers is None:
                why = MappingRisk.USED
            elif own_load_state_dict:
                why = MappingRisk.OWN_LOAD_STATE_DICT
            yield call, loader, why


def _imported_elsewhere(call: cst.Call, index: UseIndex, scope: Scope, project: FileFacts | None) -> bool:
    """Is the load bound at module level to a name another file of the project imports?"""
    assign = index.parent(call)
    return (
        scope.kind == "module"
        and project is not None
        and isinstance(assign, cst.Assign)
        and any(
            isinstance(t.target, cst.Name) and t.target.value in project.imported_names
            for t in assign.targets
        )
    )


def _defines_load_state_dict(node: cst.CSTNode) -> bool:
    """`load_state_dict`, or what it calls to keep a module's own state as given (`set_extra_state`,
    `_load_from_state_dict`, a hook registered on it)."""
    if isinstance(node, cst.FunctionDef):
        return node.name.value in _STATE_LOADING_METHODS
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in _STATE_LOADING_HOOKS
    )


def _names_host_file(path: cst.BaseExpression, scope: Scope) -> bool:
    """`names_host_file`, also through the bindings of a name that has opaque ones too
    (`def load_meta_file(root, file=None): if file is None: file = META_FILE`)."""
    return names_host_file(path, scope) or any(
        names_host_file(v, owner) for v, owner in _bound_values(path, scope)
    )


def _bound_values(path: cst.BaseExpression, scope: Scope) -> list[tuple[cst.BaseExpression, Scope]]:
    """The values of the bindings of a name that have one (not its parameter, loop or import)."""
    found = scope.lookup(path.value) if isinstance(path, cst.Name) else None
    if found is None:
        return []
    owner, bindings = found
    return [(binding.value, owner) for binding in bindings if binding.value is not None]


def _fixed_url(url: cst.BaseExpression, scope: Scope) -> bool:
    """`fixed_url`, also for a URL the class fixes in its body (`self._weights_url`, piq)."""
    if fixed_url(url, scope):
        return True
    found = _class_constant(url, scope)
    return found is not None and (_literal_text(found[0]) or fixed_url(*found))


def _class_constant(node: cst.BaseExpression, scope: Scope) -> tuple[cst.BaseExpression, Scope] | None:
    """`self.X`/`cls.X` in a method: the value the class body assigns to `X`, when it is assigned
    once there and never through `self.X = ...` (a subclass may still override it)."""
    if not (
        isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value in _OWN
    ):
        return None
    current = scope.enclosing_class
    if current is None:
        return None
    bindings = current.bindings.get(node.attr.value, [])
    if len(bindings) != 1 or bindings[0].value is None or _assigns_attribute(current.node, node.attr.value):
        return None
    return bindings[0].value, current


def _assigns_attribute(klass: cst.CSTNode, name: str) -> bool:
    stack: list[cst.CSTNode] = [klass]
    while stack:
        node = stack.pop()
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else []
        if isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            targets = [node.target]
        if any(isinstance(t, cst.Attribute) and t.attr.value == name for t in targets):
            return True
        stack.extend(children(node))
    return False


def _literal_text(node: cst.BaseExpression) -> bool:
    """A string literal, or literals joined with `+`."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _literal_text(node.left) and _literal_text(node.right)
    return isinstance(node, (cst.SimpleString, cst.ConcatenatedString))


def _downloaded_from_fixed_url(path: cst.BaseExpression, scope: Scope) -> bool:
    """The function fetched the file with `download_url_to_file(url, path)` from a URL fixed in
    the code (facenet's pretrained weights): the authors' published weights."""
    key = path_key(path)
    for node in calls(scope.owner.node):
        callee = dotted_name(node.func) or ""
        if callee.rsplit(".", 1)[-1] != "download_url_to_file":
            continue
        url, target = argument(node, 0, "url"), argument(node, 1, "dst")
        if url is not None and target is not None and path_key(target.value) == key:
            return fixed_url(url.value, scope)
    return False


def temporary_of_object(path: cst.BaseExpression, ancestors: list[cst.CSTNode]) -> bool:
    """`self.path` that the class's `__del__` removes (`os.remove(self.path)`): a temporary file
    of the object, written and read back by the same run on the same machine."""
    if not (
        isinstance(path, cst.Attribute) and isinstance(path.value, cst.Name) and path.value.value == "self"
    ):
        return False
    klass = next((node for node in reversed(ancestors) if isinstance(node, cst.ClassDef)), None)
    if klass is None:
        return False
    for member in block_statements(klass.body):
        if isinstance(member, cst.FunctionDef) and member.name.value == "__del__":
            for call in calls(member):
                callee = dotted_name(call.func) or ""
                removed = argument(call, 0, "path")
                if callee in _REMOVERS and removed is not None and path_key(removed.value) == path_key(path):
                    return True
    return False


def reads_own_or_shipped_file(
    call: cst.Call, loader: Loader, scope: Scope, saved: SavedFiles, project: FileFacts | None
) -> bool:
    """The file wrote what the load reads itself (see `SavedFiles.read_back`), another file of
    the project writes it from host memory only (`analysis/provenance/saved_files.py`), or it ships with
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
