"""TDL204 loader-without-pin-memory."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis import flow
from torchdev_lint.analysis.datasets import collate_reference
from torchdev_lint.analysis.devices import as_move
from torchdev_lint.analysis.flow_values import CPU, Kind
from torchdev_lint.analysis.loaders import (
    TENSOR_DATASET_CLASSES,
    LoaderFate,
    batch_move,
    built_from,
    dataset_argument,
    is_dataloader_call,
    is_loader,
    loader_fate,
    loader_origin,
    moves_to_accelerator,
    places_on_device,
)
from torchdev_lint.analysis.scopes import Scope, resolve
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import argument, has_star, keyword, with_keyword

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# `pin_memory` is DataLoader's eighth parameter.
_PIN_MEMORY_INDEX = 7


class LoaderWithoutPinMemory(Rule):
    code = "TDL204"
    name = "loader-without-pin-memory"
    message = (
        "Batches from this `DataLoader` are moved to an accelerator but it does not pin memory; "
        "pass `pin_memory=True`"
    )
    fix_availability = "sometimes"
    triggers = ("DataLoader",)
    docs = """
        ## What it does
        Flags a `DataLoader(...)` call with no `pin_memory` argument in a file where batches
        iterated from a loader (a name bound to a `DataLoader`, or a parameter or attribute named
        like a loader) are moved to a device that is not known to be the CPU (`.cuda()`,
        `.to(device)`).

        ## Why it matters
        A copy from ordinary (pageable) host memory to the GPU is staged through a pinned buffer
        by the driver, synchronously, and cannot overlap with compute. With `pin_memory=True` the
        loader's worker thread puts each batch in page-locked memory, so the copy is a direct DMA
        that runs faster and, with `non_blocking=True`, overlaps with the previous step.

        ## Example
        ```python
        loader = DataLoader(dataset, batch_size=64, shuffle=True)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
        ```

        ## Use instead
        ```python
        loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=True)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        ```

        ## Fix safety
        Safe: adds `pin_memory=True`. Pinning changes where the batch's host memory lives, not
        its values; on a machine without an accelerator PyTorch warns once and skips pinning.
        """
    invalid = (
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def train(model, dataset, device):
                loader = DataLoader(dataset, batch_size=64, shuffle=True)
                for x, y in loader:
                    loss = model(x.to(device)).sum()
            """,
            lines=(5,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def train(model, dataset, device):
                loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=True)
                for x, y in loader:
                    loss = model(x.to(device)).sum()
            """,
        ),
        Invalid(
            """
            import torch.utils.data as tud
            from torch.utils.data import DataLoader as DL

            train_dl = DL(
                train_set,
                batch_size=32,
            )
            val_dl = tud.DataLoader(val_set)

            def fit(model, train_loader):
                for step, batch in enumerate(train_loader):
                    model(batch["image"].cuda())
            """,
            lines=(4, 8),
            fixed="""
            import torch.utils.data as tud
            from torch.utils.data import DataLoader as DL

            train_dl = DL(
                train_set,
                batch_size=32,
                pin_memory=True,
            )
            val_dl = tud.DataLoader(val_set, pin_memory=True)

            def fit(model, train_loader):
                for step, batch in enumerate(train_loader):
                    model(batch["image"].cuda())
            """,
        ),
    )
    valid = (
        Valid(
            """
            from torch.utils.data import DataLoader

            a = DataLoader(ds, pin_memory=False)
            b = DataLoader(ds, pin_memory=torch.cuda.is_available())
            c = DataLoader(ds, **loader_kwargs)
            d = DataLoader(ds, 32, True, None, None, 0, None, True)
            for x, y in a:
                x = x.to(device)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(ds, batch_size=8)
            for x, y in loader:
                print(x.shape)
                z = x.to(torch.float16)
                w = x.cpu()
                v = x.to("cpu")
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(ds, batch_size=8)
            model.to(device)
            for x in items:
                model(x.to(device))
            """
        ),
        Valid(
            """
            class DataLoader:
                pass

            loader = DataLoader()
            for x in loader:
                x.cuda()
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.unpinned: list[_Loader] = []
        self.tensor_datasets: dict[cst.Call, Residency] = {}
        self.moved: list[cst.Call] = []  # loaders whose batches are seen moved to a device
        self.untraced_moves = False  # batches of loaders of unknown origin are moved
        self.delegates = False  # the file hands loaders to a library that places batches itself

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        if is_dataloader_call(node, scope):
            if argument(node, _PIN_MEMORY_INDEX, "pin_memory") is None and not has_star(node, "**"):
                dataset = dataset_argument(node)
                direct = None if dataset is None else self._tensor_residency(dataset, tensors_only=True)
                self.unpinned.append(_Loader(node, loader_fate(node, self.ctx.ancestors), direct, scope))
            return
        if places_on_device(node):
            self.delegates |= any(is_loader(arg.value, scope) for arg in node.args)
            return
        if resolve(node.func, scope) in TENSOR_DATASET_CLASSES:
            found = [self._tensor_residency(arg.value) for arg in node.args]
            self.tensor_datasets[node] = max(found, default=Residency.HOST)
            return
        move = as_move(node, scope)
        batch = (
            None if move is None or not move.to_accelerator else batch_move(move, self.ctx.ancestors, scope)
        )
        if batch is not None:
            origin = loader_origin(batch.loop.iter, scope)
            if not origin.placed:  # batches a library already put on the device: the move is a no-op
                self.moved.extend(origin.calls)
                self.untraced_moves |= origin.untraced

    def leave_Module(self, node: cst.Module) -> None:
        for loader in self.unpinned:
            residency = self._residency(loader)
            if residency is Residency.DEVICE or not self._batches_moved(loader):
                continue
            fixed = with_keyword(loader.call, "pin_memory", cst.Name("True"))
            fix = (
                Fix("safe", "Add `pin_memory=True`", {loader.call: fixed})
                if residency is Residency.HOST
                else None
            )
            self.report(loader.call, fix=fix)

    def _batches_moved(self, loader: _Loader) -> bool:
        """Seen moved, or it goes where this file cannot follow it and loaders of unknown origin are moved."""
        if any(call is loader.call for call in self.moved):
            return True
        fate = loader.fate
        return fate.escapes and not fate.delegated and self.untraced_moves and not self.delegates

    def _tensor_residency(self, node: cst.BaseExpression, tensors_only: bool = False) -> Residency | None:
        """Where a tensor handed to a dataset lives, from the device flow and the moves that build it.

        With `tensors_only`, None for a value not known to be a tensor.
        """
        value = flow.value_of(node, self.ctx)
        scope = self.ctx.scope
        moved = any(
            isinstance(leaf, cst.Call) and (move := as_move(leaf, scope)) is not None and move.to_accelerator
            for leaf in built_from(node, scope)
        )
        if moved or (value is not None and value.device is not None and value.device.on_accelerator):
            return Residency.DEVICE
        if value is not None and value.kind is Kind.TENSOR:
            return Residency.HOST if value.device == CPU else Residency.UNKNOWN
        if tensors_only:
            return None
        return Residency.HOST if value is not None and value.kind is Kind.OTHER else Residency.UNKNOWN

    def _residency(self, loader: _Loader) -> Residency:
        """Where the batches of a loader may live before it would pin them."""
        found = [loader.direct] if loader.direct is not None else []
        dataset = dataset_argument(loader.call)
        for leaf in [] if dataset is None else built_from(dataset, loader.scope):
            if leaf in self.tensor_datasets:
                found.append(self.tensor_datasets[leaf])  # type: ignore[index]
            elif _local_code(leaf, loader.scope, via_call=True) is not None:
                code = _local_code(leaf, loader.scope, via_call=True)
                found.append(Residency.DEVICE if moves_to_accelerator(code, loader.scope) else Residency.HOST)
        collate = keyword(loader.call, "collate_fn")
        code = None if collate is None else _local_code(collate.value, loader.scope, via_call=False)
        if code is not None and moves_to_accelerator(code, loader.scope):
            found.append(Residency.DEVICE)
        return max(found, default=Residency.HOST)


class Residency(IntEnum):
    """Where a loader's data lives before it would pin it, from least to most in the way of pinning."""

    HOST = 0  # host memory, or nothing says otherwise: pinning is safe
    UNKNOWN = 1  # tensors of unknown provenance: they may be on a device, pinning would then raise
    DEVICE = 2  # on a device: the loader must not pin it


@dataclass(frozen=True)
class _Loader:
    call: cst.Call
    fate: LoaderFate
    direct: Residency | None  # where the dataset lives when it is itself a tensor
    scope: Scope


def _local_code(node: cst.BaseExpression, scope: Scope, via_call: bool) -> cst.CSTNode | None:
    """The class a dataset is built from (`MyDataset(...)`), or the function or lambda a
    `collate_fn=` names (`collate`, `partial(collate, ...)`), when this file defines it."""
    if isinstance(node, cst.Lambda) and not via_call:
        return node
    if via_call:
        if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name):
            return None
        name: str | None = node.func.value
    else:
        name = collate_reference(node)
    found = None if name is None else scope.lookup(name)
    if found is None:
        return None
    kinds = (cst.ClassDef,) if via_call else (cst.FunctionDef,)
    defined = [binding.node for binding in found[1] if isinstance(binding.node, kinds)]
    return defined[0] if len(defined) == 1 else None
