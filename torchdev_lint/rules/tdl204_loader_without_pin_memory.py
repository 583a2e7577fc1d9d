"""TDL204 loader-without-pin-memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data import pinning
from torchdev_lint.analysis.data.batch_sources import batch_source
from torchdev_lint.analysis.data.batches import result_unused
from torchdev_lint.analysis.data.helper_moves import helper_moves
from torchdev_lint.analysis.data.loaders import (
    dataset_argument,
    is_dataloader_call,
    is_loader,
    loader_fate,
    loader_origin,
)
from torchdev_lint.analysis.data.pinning import Residency
from torchdev_lint.analysis.knowledge.devices import Move, as_move, places_on_device
from torchdev_lint.analysis.syntax.loops import innermost_loop
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import argument, has_star, with_keyword

if TYPE_CHECKING:
    from torchdev_lint.analysis.syntax.scopes import Scope
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
        Flags a `DataLoader(...)` call (torch's, or a library's subclass that passes `pin_memory` on: the
        library models' table) with no `pin_memory` argument whose batches are moved to a device not
        known to be the CPU (`.cuda()`, `.to(device)`, in tuple assignments, after unpacking `x, y = batch`,
        behind or before dtype casts: `x.float().to(device)`). The loader is followed to the loops that
        iterate it, directly or through wrapper calls (`enumerate`, `zip`, `tqdm(loader)`,
        `logger.log_every(loader, n)`), and to batches drawn with `next()` on each pass of a loop (`x, y =
        next(it)` with `it = iter(loader)` or `cycle(loader)`), also through a `self` attribute the class
        assigns; an iterator kept on `self` is drawn again on every call, so a step method drawing from it
        counts without a loop of its own (its caller loops). A loader that leaves the function (returned, passed on, stored) is flagged when the file
        moves batches of a loader of unknown origin (a parameter, an attribute assigned elsewhere), or when it
        is passed to a project function, in any file, that moves its batches. A batch handed to a
        function that moves it (`to_inputs(batch, device)` with `batch.x.to(device)` inside: a
        function or a `self` method of the file, or, with the project analysis, a module-level
        function of another file) is moved where the helper's device parameter, read at the call
        (or its default), says. Not flagged: loaders given
        `pin_memory` or `**kwargs`, or whose `pin_memory` the author commented out (`# pin_memory=True` in the
        call or its line: a decision about that loader); loaders whose batches are never moved (or only to the
        CPU, or only cast), or whose moved batches are bound to a name the function never reads (`x_gpu =
        x.to(device)`, the model given `x`); loaders handed to a library that puts batches on the device
        itself (`accelerator.prepare(...)`, `fabric.setup_dataloaders(...)`, also unpacked: `self.net,
        self.dl = acc.prepare(net, dl)`) whose batches the file does not move itself (one whose batches it
        also moves is flagged: the library copies each batch from the loader's memory as the move would)
        and, in a file that does so, moves of loaders of unknown origin; loaders over data already on a
        device (a `TensorDataset` of tensors moved or created there, a dataset class of the file or a `collate_fn` that moves data to a
        device or makes it there, `torch.randn(16, device=self.device)`), where pinning would raise.

        ## Why it matters
        A copy from ordinary (pageable) host memory to the GPU is staged through a pinned buffer by the
        driver, synchronously, and cannot overlap with compute. With `pin_memory=True` the loader's worker
        thread puts each batch in page-locked memory, so the copy is a direct DMA that runs faster and, with
        `non_blocking=True`, overlaps with the previous step.

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
        Adds `pin_memory=torch.cuda.is_available()` (under the name the file binds torch to), or
        `pin_memory=True` where every move of the loader's batches goes to CUDA unconditionally (`.cuda()`,
        `.to("cuda")` in code that never asks whether CUDA is there: the program cannot run without CUDA). A
        plain `True` in a program that also runs on the CPU would print a warning every run and pin nothing;
        where the file binds no `torch` the finding carries **no fix**. Pinning changes where a batch's host
        memory lives, not its values or dtypes, on every device. Pinning a tensor already on a device
        raises, so the fix is **safe** only where the dataset is not known to hand out tensors of unknown
        placement (nor reads a module-level tensor moved to a device, `TABLE = torch.randn(n,
        8).to(DEVICE)`, which gets no fix): a `TensorDataset` (or a tensor used as the dataset, or a dataset class of the project
        whose `__getitem__` returns items of a constructor argument unchanged, `self.x[i]` after `self.x =
        x`) over data the device flow shows on the CPU (factories without `device=`, `torch.from_numpy`,
        `.cpu()`, NumPy), or any other dataset (one that builds its items itself; a parameter passed as the
        dataset counts as one: a caller handing a CUDA tensor there would see `cannot pin`). Where the
        handed-out data comes from elsewhere (parameters, function results, `torch.load`) there is **no
        fix**. Over data on a device, no finding.
        """
    invalid = (
        # A loader the library also places and whose batches the file moves itself: the library
        # copies each batch from the loader's memory, so pinning speeds that copy as much.
        Invalid(
            """
            import torch
            from accelerate import Accelerator
            from torch.utils.data import DataLoader


            def endless(loader):
                while True:
                    yield from loader


            class Fitter:
                def __init__(self, net, opt, images):
                    self.acc = Accelerator()
                    self.train_loader = DataLoader(images, batch_size=16, shuffle=True)
                    self.net, self.opt, self.train_loader = self.acc.prepare(net, opt, self.train_loader)
                    self.batches = endless(self.train_loader)

                def step(self):
                    images = next(self.batches).to(self.acc.device)
                    self.net(images).mean().backward()
            """,
            lines=(14,),
            fixed="""
            import torch
            from accelerate import Accelerator
            from torch.utils.data import DataLoader


            def endless(loader):
                while True:
                    yield from loader


            class Fitter:
                def __init__(self, net, opt, images):
                    self.acc = Accelerator()
                    self.train_loader = DataLoader(images, batch_size=16, shuffle=True, pin_memory=torch.cuda.is_available())
                    self.net, self.opt, self.train_loader = self.acc.prepare(net, opt, self.train_loader)
                    self.batches = endless(self.train_loader)

                def step(self):
                    images = next(self.batches).to(self.acc.device)
                    self.net(images).mean().backward()
            """,
        ),
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
                loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=torch.cuda.is_available())
                for x, y in loader:
                    loss = model(x.to(device)).sum()
            """,
        ),
        Invalid(
            """
            import torch
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
            lines=(5, 9),
            fixed="""
            import torch
            import torch.utils.data as tud
            from torch.utils.data import DataLoader as DL

            train_dl = DL(
                train_set,
                batch_size=32,
                pin_memory=torch.cuda.is_available(),
            )
            val_dl = tud.DataLoader(val_set, pin_memory=torch.cuda.is_available())

            def fit(model, train_loader):
                for step, batch in enumerate(train_loader):
                    model(batch["image"].cuda())
            """,
        ),
        # Unpacked in the body, moved in a tuple assignment, iterated through `log_every`.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def train_one_epoch(model, dataset, device):
                data_loader = DataLoader(dataset, batch_size=32, shuffle=True)
                metric_logger = MetricLogger(delimiter="  ")
                for batch in metric_logger.log_every(data_loader, 10):
                    images, targets = batch
                    images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            """,
            lines=(5,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def train_one_epoch(model, dataset, device):
                data_loader = DataLoader(dataset, batch_size=32, shuffle=True, pin_memory=torch.cuda.is_available())
                metric_logger = MetricLogger(delimiter="  ")
                for batch in metric_logger.log_every(data_loader, 10):
                    images, targets = batch
                    images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            """,
        ),
        # A `TensorDataset`, or a dataset handing out items of what its caller passed, over tensors
        # of unknown placement: they may be on a device, no fix.
        Invalid(
            """
            from torch.utils.data import DataLoader, Dataset, TensorDataset

            class Rows(Dataset):
                def __init__(self, table):
                    self.table = table
                def __getitem__(self, i):
                    row = self.table[i]
                    return row

            def fit(model, features, labels):
                loader = DataLoader(TensorDataset(features, labels), batch_size=64)
                rows = DataLoader(Rows(features), batch_size=64)
                for (x, y), row in zip(loader, rows):
                    model(x.cuda(), row.cuda())
            """,
            lines=(11, 12),
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
                loader = DataLoader(data, batch_size=64, pin_memory=torch.cuda.is_available())
                for (x, y), step in zip(loader, steps):
                    model(x.to(next(model.parameters()).device))
            """,
        ),
        # Iterated through a conditional expression.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def predict(model, dataset, device, progress):
                dl = DataLoader(dataset, batch_size=4)
                for b in tqdm(dl) if progress else dl:
                    b["pred"] = model(b["image"].to(device))
            """,
            lines=(5,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def predict(model, dataset, device, progress):
                dl = DataLoader(dataset, batch_size=4, pin_memory=torch.cuda.is_available())
                for b in tqdm(dl) if progress else dl:
                    b["pred"] = model(b["image"].to(device))
            """,
        ),
        # Devices named through attributes and subscripts.
        Invalid(
            """
            import torch
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
            lines=(6, 11),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            class Trainer:
                def fit(self, dataset):
                    loader = DataLoader(dataset, batch_size=16, pin_memory=torch.cuda.is_available())
                    for batch in loader:
                        self.encoder(batch["image"].to(self.encoder.device))

            def evaluate(model, dataset, anchors):
                loader = DataLoader(dataset, batch_size=16, pin_memory=torch.cuda.is_available())
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
                    loader = torch.utils.data.DataLoader(dataset, batch_size=self.batch_size, pin_memory=torch.cuda.is_available())
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
                    dataloader = DataLoader(dataset=dataset, batch_size=self.batch_size, shuffle=False, pin_memory=torch.cuda.is_available())
                    for x, y in dataloader:
                        x = x.float().to(self.device)
                        self.net(x, y.long().cuda(), y.to(torch.float32).to(self.device))
                        self.net(y.type(torch.float32).to(self.device))
            """,
        ),
        # Batches go to CUDA unconditionally (the program needs it): `True`; no `torch` bound: no fix.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def fit(net, samples):
                feeder = DataLoader(samples, batch_size=8)
                for inputs, labels in feeder:
                    net(inputs.cuda(), labels.to("cuda")).backward()
            """,
            lines=(5,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def fit(net, samples):
                feeder = DataLoader(samples, batch_size=8, pin_memory=True)
                for inputs, labels in feeder:
                    net(inputs.cuda(), labels.to("cuda")).backward()
            """,
        ),
        # A batch drawn with `next()` on each step, from a loader kept behind a generator (not the other).
        Invalid(
            """
            from torch.utils.data import DataLoader
            class Scorer:
                def __init__(self, samples):
                    self.train_dl = cycle(DataLoader(samples, batch_size=8))
                    self.valid_dl = cycle(DataLoader(samples, batch_size=8))  # never drawn

                def score(self, net, device, steps):
                    for _ in range(steps):
                        inputs, _ = next(self.train_dl)
                        net(inputs.to(device))
            """,
            lines=(4,),
        ),
        # A step method drawing from an iterator the object keeps: the caller's loop calls it.
        Invalid(
            """
            import torch

            class Distiller:
                def __init__(self, corpus):
                    self.stream = iter(torch.utils.data.DataLoader(corpus, batch_size=16))

                def step(self, student):
                    tokens = next(self.stream)
                    return student(tokens.to("mps"))
            """,
            lines=(5,),
            fixed="""
            import torch

            class Distiller:
                def __init__(self, corpus):
                    self.stream = iter(torch.utils.data.DataLoader(corpus, batch_size=16, pin_memory=torch.cuda.is_available()))

                def step(self, student):
                    tokens = next(self.stream)
                    return student(tokens.to("mps"))
            """,
        ),
        # The batch is moved by a helper of the file: the helper's device parameter, read at the
        # call, is not known to be the CPU.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def as_inputs(sample, dev):
                return {"audio": sample.wave.to(dev), "text": sample.tokens.to(dev)}

            def fit(net, corpus, dev):
                for sample in DataLoader(corpus, batch_size=4):
                    net(**as_inputs(sample, dev=dev))
            """,
            lines=(8,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def as_inputs(sample, dev):
                return {"audio": sample.wave.to(dev), "text": sample.tokens.to(dev)}

            def fit(net, corpus, dev):
                for sample in DataLoader(corpus, batch_size=4, pin_memory=torch.cuda.is_available()):
                    net(**as_inputs(sample, dev=dev))
            """,
        ),
    )
    valid = (
        # A helper of the file moves the batch, but the call names the CPU.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            def place(parts, where="cuda"):
                return parts[0].to(where), parts[1]

            def summarize(stats, table):
                for parts in DataLoader(table, batch_size=128):
                    stats.update(place(parts, where="cpu"))
            """
        ),
        Valid(
            # A dataset that makes its items on the device: pinning them would raise.
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class NoiseBank(Dataset):
                def __init__(self, n, device):
                    self.n, self.device = n, device

                def __len__(self):
                    return self.n

                def __getitem__(self, i):
                    return torch.randn(16, device=self.device)

            def train(model, device):
                for z in DataLoader(NoiseBank(256, device), batch_size=32):
                    model(z.to(device))
            """
        ),
        Valid(
            # The data moved to the device in one tuple assignment before the dataset is built:
            # pinning device tensors raises.
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            def fit(model, device):
                inputs, targets = torch.randn(100, 4), torch.randint(0, 2, (100,))
                inputs, targets = inputs.to(device), targets.to(device)
                for xb, yb in DataLoader(TensorDataset(inputs, targets), batch_size=32):
                    model(xb.to(device))
            """
        ),
        Valid(
            # One batch drawn from a fresh iterator to size the model: the object keeps the loader, not
            # the iterator, so nothing says the draw repeats.
            """
            import torch

            class Probe:
                def __init__(self, corpus):
                    self.feed = torch.utils.data.DataLoader(corpus, batch_size=16)

                def width(self, encoder):
                    sample = next(iter(self.feed))
                    return encoder(sample.to("cuda:1")).shape[-1]
            """
        ),
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
            e = DataLoader(ds, batch_size=8)  # no pin_memory: forked workers hang on it
            f = DataLoader(
                ds,
                # pin_memory=True,
            )
            for x, y in a:
                x = x.to(device)
            for x, y in e:
                x = x.to(device)
            for x, y in f:
                x = x.to(device)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(ds, batch_size=8)
            first, _ = next(iter(loader))  # one batch, drawn once
            model(first.to(device))
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
                x = x.to(device)
                moved = DataLoader(TensorDataset(x, y), batch_size=4)
                for (xb, yb), (xm, ym) in zip(loader, moved):
                    model(xb.cuda(), xm.to(device))

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
                for xb, xc in zip(first, second):
                    model(xb.to(device), xc.to(device))
            """
        ),
        # A loader the function iterates without moving its batches to an accelerator (a device
        # bound only to the CPU), in a file that moves the batches of another (unknown) loader.
        Valid(
            """
            import torch

            def train(model, train_loader, device):
                for x, y in train_loader:
                    model(x.to(device))

            def count_samples(dataset, model):
                loader = torch.utils.data.DataLoader(dataset, batch_size=256)
                device = torch.device("cpu")
                for x, y in loader:
                    model(x.to(device))
                return len(loader)
            """
        ),
        # Loaders handed to a library that puts batches on the device itself, whose batches the
        # file never moves: the loader of unknown origin may be a prepared one.
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
                    model(batch)
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.unpinned: list[pinning.UnpinnedLoader] = []
        self.tensor_datasets: dict[cst.Call, Residency] = {}
        self.moved: list[cst.Call] = []  # loaders whose batches are seen moved to a device
        self.cuda_only: dict[cst.Call, bool] = {}  # every seen move fails without CUDA (`needs_cuda`)
        self.untraced_moves = False  # batches of loaders of unknown origin are moved
        self.delegates = False  # the file hands loaders to a library that places batches itself

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        if is_dataloader_call(node, scope):
            line = next((a for a in reversed(self.ctx.ancestors) if type(a) is cst.SimpleStatementLine), node)
            if (
                argument(node, _PIN_MEMORY_INDEX, "pin_memory") is None
                and not has_star(node, "**")
                and not pinning.pin_commented_out(self.ctx.code_for(line))
            ):
                dataset = dataset_argument(node)
                direct = (
                    None
                    if dataset is None
                    else pinning.tensor_residency(dataset, self.ctx, tensors_only=True)
                )
                self.unpinned.append(
                    pinning.UnpinnedLoader(node, loader_fate(node, self.ctx.ancestors), direct, scope)
                )
            return
        if places_on_device(node):
            self.delegates |= any(is_loader(arg.value, scope) for arg in node.args)
            return
        handed_out = pinning.handed_out_arguments(node, scope, self.ctx.project)
        if handed_out is not None:
            found = [pinning.tensor_residency(arg.value, self.ctx) for arg in handed_out]
            self.tensor_datasets[node] = max(found, default=Residency.HOST)
            return
        move = as_move(node, scope)
        if move is not None:
            self._note_move(move, scope)
        elif innermost_loop(self.ctx.ancestors) is not None:  # a batch handed to a helper that moves it
            for moved in helper_moves(node, scope, self.ctx):
                self._note_move(moved, scope)

    def _note_move(self, move: Move, scope: Scope) -> None:
        """A move seen: of a loader's batch to an accelerator, the loader's batches are moved."""
        source = batch_source(move, self.ctx.ancestors, scope) if move.to_accelerator else None
        if source is not None and not result_unused(self.ctx.ancestors):
            # A loader a library also places (`accelerator.prepare`) counts too: the move is a
            # no-op, but the library copied the batch from the loader's memory, as the move would.
            origin = loader_origin(source, scope)
            self.moved.extend(origin.calls)
            self.untraced_moves |= origin.unknown and not origin.placed
            for call in origin.calls:
                self.cuda_only[call] = self.cuda_only.get(call, True) and pinning.needs_cuda(move, scope)

    def leave_Module(self, node: cst.Module) -> None:
        for loader in self.unpinned:
            residency = pinning.loader_residency(
                loader.call, loader.scope, loader.direct, self.tensor_datasets
            )
            if residency is Residency.DEVICE or not self._batches_moved(loader):
                continue
            value = pinning.pin_value(loader.scope, self.cuda_only.get(loader.call, False))
            fix = None
            if value is not None and residency is Residency.HOST:
                text = self.ctx.code_for(value)
                fixed = with_keyword(loader.call, "pin_memory", value)
                fix = Fix("safe", f"Add `pin_memory={text}`", {loader.call: fixed})
            self.report(loader.call, fix=fix)

    def _batches_moved(self, loader: pinning.UnpinnedLoader) -> bool:
        """Seen moved, passed to a project function that moves its batches, or it goes where this
        file cannot follow it and loaders of unknown origin are moved."""
        if any(call is loader.call for call in self.moved):
            return True
        fate = loader.fate
        if fate.delegated or self.delegates:
            # Handed to a library that places batches, and not seen moved here; or the moves of
            # loaders of unknown origin may be those of the loaders the file hands to one.
            return False
        if pinning.handed_to_mover(fate, self.ctx.project):
            return True
        return fate.escapes and self.untraced_moves
