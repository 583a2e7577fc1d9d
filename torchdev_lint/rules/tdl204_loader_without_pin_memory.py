"""TDL204 loader-without-pin-memory."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Literal, overload

import libcst as cst

from torchdev_lint.analysis import flow
from torchdev_lint.analysis.batches import batch_move, result_unused
from torchdev_lint.analysis.datasets import collate_code, dataset_class_of
from torchdev_lint.analysis.devices import CPU, as_move
from torchdev_lint.analysis.flow_values import Kind
from torchdev_lint.analysis.loaders import (
    TENSOR_DATASET_CLASSES,
    LoaderFate,
    built_from,
    dataset_argument,
    is_dataloader_call,
    is_loader,
    loader_fate,
    loader_origin,
    moves_to_accelerator,
    places_on_device,
)
from torchdev_lint.analysis.parameters import passed_arguments
from torchdev_lint.analysis.scopes import Scope, dotted_name, resolve
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
        Flags a `DataLoader(...)` call with no `pin_memory` argument whose batches are moved to a
        device that is not known to be the CPU (`.cuda()`, `.to(device)`, also in tuple
        assignments `x, y = x.cuda(), y.cuda()`, after unpacking `x, y = batch`, and with dtype
        casts in front of or behind the move: `x.float().to(device)`, `x.long().cuda()`,
        `x.to(torch.float32).to(device)`, `x.to(device).float()`). The loader is
        followed to the loops that iterate it, directly or through wrapper calls (`enumerate`,
        `zip`, `tqdm(loader)`, `logger.log_every(loader, n)`). A loader that leaves the function
        (returned, passed on, stored, or bound at module level) is flagged when the file moves
        batches of a loader of unknown origin (a parameter or attribute named like a loader),
        or when it is passed to a project function, in any file, that moves the batches of
        that parameter to a device (`train_one_epoch(model, loader, device)` in `engine.py`;
        project analysis).
        Not flagged: loaders given `pin_memory` or `**kwargs`; loaders whose batches are never
        moved (or only to the CPU, or only cast: `x.float()`, `x.to(torch.float32)`), or whose moved batches
        are bound to a name the function never reads (`x_gpu = x.to(device)`, the model given
        `x`: a dead move, no evidence the batches are used on the device); loaders handed to a library that puts batches on the device
        itself (`accelerator.prepare(...)`, `fabric.setup_dataloaders(...)`), and, in a file that
        does so, moves of batches of loaders of unknown origin (they may be the prepared ones);
        loaders over data already on a device (a `TensorDataset` of tensors moved or created
        there, a dataset class of the file or a `collate_fn` that moves data to a device), where
        pinning would raise.

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
        Adds `pin_memory=True`. Pinning changes where a batch's host memory lives, not its values
        or dtypes; on a machine without an accelerator PyTorch warns and skips pinning. Pinning a
        tensor that is already on a device raises, so the fix is **safe** only where the dataset
        is not known to hold tensors of unknown placement: a `TensorDataset` (or a tensor used
        as the dataset) whose tensors the device flow shows on the CPU (factories without
        `device=`, `torch.from_numpy`, `.cpu()`), or any other dataset (an instance of a
        `Dataset` class, whose items the loader collates on the host; the file moving its
        batches to the device shows they arrive there on the host). Over a `TensorDataset` whose
        tensors come from elsewhere (parameters, function results, `torch.load`) the finding
        carries **no fix**: they may already be on a device. Over data shown on a device
        there is no finding at all.
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
        # Unpacked in the body, moved in a tuple assignment, iterated through `log_every`.
        Invalid(
            """
            from torch.utils.data import DataLoader

            def train_one_epoch(model, dataset, device):
                data_loader = DataLoader(dataset, batch_size=32, shuffle=True)
                metric_logger = MetricLogger(delimiter="  ")
                for batch in metric_logger.log_every(data_loader, 10):
                    images, targets = batch
                    images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            """,
            lines=(4,),
            fixed="""
            from torch.utils.data import DataLoader

            def train_one_epoch(model, dataset, device):
                data_loader = DataLoader(dataset, batch_size=32, shuffle=True, pin_memory=True)
                metric_logger = MetricLogger(delimiter="  ")
                for batch in metric_logger.log_every(data_loader, 10):
                    images, targets = batch
                    images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            """,
        ),
        # A `TensorDataset` of tensors of unknown placement: they may be on a device, no fix.
        Invalid(
            """
            from torch.utils.data import DataLoader, TensorDataset

            def fit(model, features, labels):
                loader = DataLoader(TensorDataset(features, labels), batch_size=64)
                for x, y in tqdm(loader):
                    model(x.cuda())
            """,
            lines=(4,),
        ),
        # Tensors made on the CPU: fixed. A device named through an attribute of a call, `zip`.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            def synthetic(model, steps):
                data = TensorDataset(torch.randn(256, 8), torch.zeros(256))
                loader = DataLoader(data, batch_size=64)
                for (x, y), step in zip(loader, steps):
                    model(x.to(next(model.parameters()).device))
            """,
            lines=(6,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            def synthetic(model, steps):
                data = TensorDataset(torch.randn(256, 8), torch.zeros(256))
                loader = DataLoader(data, batch_size=64, pin_memory=True)
                for (x, y), step in zip(loader, steps):
                    model(x.to(next(model.parameters()).device))
            """,
        ),
        # Iterated through a conditional expression.
        Invalid(
            """
            from torch.utils.data import DataLoader

            def predict(model, dataset, device, progress):
                dl = DataLoader(dataset, batch_size=4)
                for b in tqdm(dl) if progress else dl:
                    b["pred"] = model(b["image"].to(device))
            """,
            lines=(4,),
            fixed="""
            from torch.utils.data import DataLoader

            def predict(model, dataset, device, progress):
                dl = DataLoader(dataset, batch_size=4, pin_memory=True)
                for b in tqdm(dl) if progress else dl:
                    b["pred"] = model(b["image"].to(device))
            """,
        ),
        # Devices named through attributes and subscripts.
        Invalid(
            """
            from torch.utils.data import DataLoader

            class Trainer:
                def fit(self, dataset):
                    loader = DataLoader(dataset, batch_size=16)
                    for batch in loader:
                        self.encoder(batch["image"].to(self.encoder.device))

            def evaluate(model, dataset, anchors):
                loader = DataLoader(dataset, batch_size=16)
                for images, labels in loader:
                    model(images.to(anchors[0].device), labels.to(anchors[0].device))
            """,
            lines=(5, 10),
            fixed="""
            from torch.utils.data import DataLoader

            class Trainer:
                def fit(self, dataset):
                    loader = DataLoader(dataset, batch_size=16, pin_memory=True)
                    for batch in loader:
                        self.encoder(batch["image"].to(self.encoder.device))

            def evaluate(model, dataset, anchors):
                loader = DataLoader(dataset, batch_size=16, pin_memory=True)
                for images, labels in loader:
                    model(images.to(anchors[0].device), labels.to(anchors[0].device))
            """,
        ),
        # The moved batch is read: the move counts.
        Invalid(
            """
            import torch

            class Detector:
                def decision_function(self, dataset):
                    loader = torch.utils.data.DataLoader(dataset, batch_size=self.batch_size)
                    with torch.no_grad():
                        for data, idx in loader:
                            data_cuda = data.to(self.device).float()
                            self.scores[idx] = self.model(data_cuda)
            """,
            lines=(5,),
            fixed="""
            import torch

            class Detector:
                def decision_function(self, dataset):
                    loader = torch.utils.data.DataLoader(dataset, batch_size=self.batch_size, pin_memory=True)
                    with torch.no_grad():
                        for data, idx in loader:
                            data_cuda = data.to(self.device).float()
                            self.scores[idx] = self.model(data_cuda)
            """,
        ),
        # Dtype casts in front of the move (deepod's `x.float().to(self.device)`) hide no move.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            class COUTA:
                def decision_function(self, dataset):
                    dataloader = DataLoader(dataset=dataset, batch_size=self.batch_size, shuffle=False)
                    for x, y in dataloader:
                        x = x.float().to(self.device)
                        self.net(x, y.long().cuda(), y.to(torch.float32).to(self.device))
                        self.net(y.type(torch.float32).to(self.device))
            """,
            lines=(6,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            class COUTA:
                def decision_function(self, dataset):
                    dataloader = DataLoader(dataset=dataset, batch_size=self.batch_size, shuffle=False, pin_memory=True)
                    for x, y in dataloader:
                        x = x.float().to(self.device)
                        self.net(x, y.long().cuda(), y.to(torch.float32).to(self.device))
                        self.net(y.type(torch.float32).to(self.device))
            """,
        ),
    )
    valid = (
        Valid(
            # The only move of the batch is bound to a name nothing reads: the model gets the
            # host batch, so pinning would not help.
            """
            import numpy as np
            import torch

            class Detector:
                def decision_function(self, dataset):
                    loader = torch.utils.data.DataLoader(dataset, batch_size=self.batch_size, shuffle=False)
                    scores = np.zeros(len(dataset))
                    with torch.no_grad():
                        for data, idx in loader:
                            data_cuda = data.to(self.device).float()
                            scores[idx] = predict(self.model, data)
                    return scores
            """
        ),
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
                u = x.float().to(dtype=torch.float16).type(torch.float32)
                t = x.long().cpu()
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(ds, batch_size=8)
            model.to(device)
            for x in items:
                model(x.to(device))
            for i in tqdm(range(len(loader))):
                model(items[i].cuda())
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
        # Data already on a device: pinning it would raise.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset, TensorDataset

            def on_gpu(x, y, model, device):
                loader = DataLoader(TensorDataset(x.cuda(), y.cuda()), batch_size=4)
                for xb, yb in loader:
                    model(xb.cuda())
                x = x.to(device)
                moved = DataLoader(TensorDataset(x, y), batch_size=4)
                for xb, yb in moved:
                    model(xb.to(device))

            class CachedOnDevice(Dataset):
                def __init__(self, data, device):
                    self.data = data.to(device)

                def __getitem__(self, index):
                    return self.data[index]

            def to_device_collate(samples):
                return torch.stack(samples).cuda()

            def cached(data, samples, model, device):
                first = DataLoader(CachedOnDevice(data, device), batch_size=4)
                second = DataLoader(samples, batch_size=4, collate_fn=to_device_collate)
                for xb in first:
                    model(xb.to(device))
                for xb in second:
                    model(xb.to(device))
            """
        ),
        # A loader the function iterates without moving its batches, in a file that moves the
        # batches of another (unknown) loader.
        Valid(
            """
            from torch.utils.data import DataLoader

            def train(model, train_loader, device):
                for x, y in train_loader:
                    model(x.to(device))

            def count_samples(dataset):
                loader = DataLoader(dataset, batch_size=256)
                total = 0
                for x, y in loader:
                    total += len(x)
                return total, len(loader)
            """
        ),
        # Loaders handed to accelerate, which puts batches on the device itself: the explicit
        # moves are no-ops, and the loader of unknown origin may be a prepared one.
        Valid(
            """
            from torch.utils.data import DataLoader

            def get_dataloaders(datasets, batch_size):
                train_dataloader = DataLoader(datasets["train"], shuffle=True, batch_size=batch_size)
                eval_dataloader = DataLoader(datasets["validation"], batch_size=batch_size)
                return train_dataloader, eval_dataloader

            def evaluation_loop(accelerator, model, eval_dataloader):
                for step, batch in enumerate(eval_dataloader):
                    batch.to(accelerator.device)
                    model(**batch)

            def training_function(accelerator, model, optimizer, datasets):
                train_dataloader, eval_dataloader = get_dataloaders(datasets, 16)
                model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
                    model, optimizer, train_dataloader, eval_dataloader
                )
                numbers = accelerator.prepare(DataLoader(range(10), batch_size=4))
                for batch in numbers:
                    batch.to(accelerator.device)
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
            None
            if move is None or not move.to_accelerator
            else batch_move(move, self.ctx.ancestors, scope, through_casts=True)
        )
        if batch is not None and not result_unused(self.ctx.ancestors):
            origin = loader_origin(batch.loop.iter, scope)
            if not origin.placed:  # batches a library already put on the device: the move is a no-op
                self.moved.extend(origin.calls)
                self.untraced_moves |= origin.unknown

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
        """Seen moved, passed to a project function that moves its batches, or it goes where this
        file cannot follow it and loaders of unknown origin are moved."""
        if any(call is loader.call for call in self.moved):
            return True
        fate = loader.fate
        if fate.delegated or self.delegates:
            return False  # the library puts the batches on the device: the file's moves are no-ops
        facts = self.ctx.project
        if facts is not None and any(
            (callee := dotted_name(call.func)) is not None
            and any(arg is handed for arg in passed_arguments(call, facts.moves_batches(callee)))
            for call, handed in fate.handed
        ):
            return True  # a project function this file calls moves the batches of what it is passed
        return fate.escapes and self.untraced_moves

    @overload
    def _tensor_residency(
        self, node: cst.BaseExpression, tensors_only: Literal[False] = False
    ) -> Residency: ...
    @overload
    def _tensor_residency(
        self, node: cst.BaseExpression, tensors_only: Literal[True]
    ) -> Residency | None: ...
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
            dataset_class = dataset_class_of(leaf, loader.scope)
            if isinstance(leaf, cst.Call) and leaf in self.tensor_datasets:
                found.append(self.tensor_datasets[leaf])
            elif dataset_class is not None and moves_to_accelerator(dataset_class, loader.scope):
                found.append(Residency.DEVICE)
        collate = keyword(loader.call, "collate_fn")
        code = None if collate is None else collate_code(collate.value, loader.scope)
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
