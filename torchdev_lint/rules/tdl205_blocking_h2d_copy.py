"""TDL205 blocking-h2d-copy."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.data.batch_sources import drawn_batch_move
from torchdev_lint.analysis.data.batches import (
    HostWrite,
    batch_loaders,
    batch_move,
    host_written_after,
)
from torchdev_lint.analysis.knowledge.devices import as_move, is_dtype
from torchdev_lint.analysis.placement.accelerators import may_be_mps
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import has_star, keyword, positional, with_keyword


def _casts(move: cst.Call, scope: Scope) -> bool:
    """Does the move also change the dtype (`x.to("cuda", torch.long)`, `dtype=`)?"""
    return keyword(move, "dtype") is not None or any(
        is_dtype(arg.value, scope) for arg in positional(move)[1:]
    )


class BlockingH2dCopy(Rule):
    code = "TDL205"
    name = "blocking-h2d-copy"
    message = (
        "A batch from a pinned `DataLoader` is copied to the device synchronously; "
        "pass `non_blocking=True` so the copy overlaps with compute"
    )
    fix_availability = "sometimes"
    triggers = ("pin_memory",)
    fact_triggers = ("pinned_loaders",)  # a loader parameter every project call pins
    docs = """
        ## What it does
        Flags `batch.to(device)` / `batch.cuda()` without `non_blocking=True` when the batch comes
        from a `DataLoader` created with `pin_memory=True`, `pin_memory=torch.cuda.is_available()` or
        pinned whenever a device is CUDA (`pin_memory=dev.type == "cuda"`: every copy to CUDA is
        from pinned memory) (iterated directly or through a wrapper
        such as `enumerate(...)`, `tqdm(loader)` or `logger.log_every(loader, n)`, and also when
        the batch is unpacked first: `x, y = batch`), or drawn with `next()` on each pass of a loop
        (`x, y = next(it)` with `it = iter(loader)`, or moved as drawn: `next(self.batches).cuda()` with
        `self.batches = cycle(loader)` set by a method after `__init__` set it to `None`; not one batch
        drawn once outside any loop); and,
        with the project analysis, a loop
        over a loader parameter (`def train_one_epoch(model, loader, device)`) when every call
        of the function in the checked files passes a pinned `DataLoader` (a function never
        called there, or called once with another loader, stays silent). A copy
        after which the host batch is written in place (`x.mul_(...)`, `x[...] = ...`, `out=x`,
        a write through `x.numpy()` or another view of it, `flat = x.view(-1); flat[0] = v`, or
        through its rows, `for row in x: row.mul_(2)`) is not flagged: made non-blocking,
        it would race with the write.

        ## Why it matters
        Pinning memory only pays off fully with an asynchronous copy: a blocking copy makes the
        host wait for the transfer to finish before it can queue the next kernel, so the GPU idles
        while the copy runs. With `non_blocking=True` the copy from page-locked memory is queued on
        the current stream and overlaps with host-side work.

        ## Example
        ```python
        loader = DataLoader(dataset, batch_size=64, pin_memory=True)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
        ```

        ## Use instead
        ```python
        loader = DataLoader(dataset, batch_size=64, pin_memory=True)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        ```

        ## Fix safety
        Adds `non_blocking=True`. The copy is ordered on the current stream, so every kernel that
        later reads the batch on the device sees the copied data, and PyTorch's pinned-memory
        allocator keeps the source block out of reuse until the copy has completed, even if the
        host tensor is freed. What a non-blocking copy changes is when the host memory is read:
        after the call returns. The fix is therefore **safe** only when the analysis shows that
        nothing after the copy can write the host batch: in the rest of the function (this
        iteration, loops nested in the batch loop, the code after the loop), neither the moved
        expression, nor what it was unpacked from, nor a name bound to a view of it
        (`a = x.numpy()`) is written in place, assigned into, passed to a call that may change
        it (anything but `torch.*` functions and builtins like `print`/`len`), returned or
        stored; rebinding the name (`x = x.to(device)`) ends the watch. It is also safe only
        where the moved value is proven a tensor: a part of a batch (`x` in `for x, y in loader`,
        `batch["image"]`) from loaders that all collate with PyTorch's default into batches (no
        `collate_fn`, not `batch_size=None`, which passes each item through as the dataset made it;
        for a loader parameter, in every project call). A custom `collate_fn` may build a project
        class whose `.to()` takes only a device (`NestedTensor.to(device)`: the first step would
        raise `TypeError`), and a whole batch object (`for batch in loader: batch.to(device)`) may
        be a mapping class with its own `.to()`; the default collation keeps namedtuple and mapping
        subclasses too, so where a class of the project defines its own `to()` no part is proven a
        tensor. A copy that also casts (`x.to("cuda", torch.long)`) converts on the host when blocking
        and on the device when not (NaN and infinities become other integers): unsafe. And it is safe only where the target is proven
        not to be Apple's MPS, where non-blocking host-to-device copies have open corruption
        reports: `.cuda()`, a literal CUDA or CPU device, or a name every assignment of which in
        reach is one of these or a choice between them (`torch.device("cuda" if
        torch.cuda.is_available() else "cpu")`). A device parameter, an attribute or a helper's
        result may be MPS (the caller may pass `"mps"`). On the CPU the copy is synchronous
        whatever `non_blocking` says; on CUDA and XPU it is ordered on
        the current stream. Otherwise the fix is **unsafe**: the batch is passed on (`augment(x)`),
        written at an index that may be a list entry (`x[i] = v`), its type is not proven, or the
        target is not proven CUDA or the CPU. Where the batch is certainly written after the copy, there is no
        finding. Device-to-host copies, whose results the host reads, are never flagged.
        """
    invalid = (
        # A batch moved as drawn from an iterator a method keeps (`None` until the data is set).
        Invalid(
            """
            import torch
            from torch.utils import data


            def cycle(iterable):
                while True:
                    for i in iterable:
                        yield i


            class Trainer:
                def __init__(self, rank):
                    self.rank = rank
                    self.loader = None

                def set_data_src(self, dataset):
                    dataloader = data.DataLoader(dataset, batch_size=8, pin_memory=True)
                    self.loader = cycle(dataloader)

                def train(self, model):
                    for _ in range(10):
                        image_batch = next(self.loader).cuda(self.rank)
                        model(image_batch)
            """,
            lines=(22,),
            fixed="""
            import torch
            from torch.utils import data


            def cycle(iterable):
                while True:
                    for i in iterable:
                        yield i


            class Trainer:
                def __init__(self, rank):
                    self.rank = rank
                    self.loader = None

                def set_data_src(self, dataset):
                    dataloader = data.DataLoader(dataset, batch_size=8, pin_memory=True)
                    self.loader = cycle(dataloader)

                def train(self, model):
                    for _ in range(10):
                        image_batch = next(self.loader).cuda(self.rank, non_blocking=True)
                        model(image_batch)
            """,
        ),
        # Pinned exactly when the device is CUDA: every copy to CUDA starts from pinned memory.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def embed(encoder, corpus, dev):
                rows = DataLoader(corpus, batch_size=256, pin_memory=dev.type == "cuda")
                for tokens in rows:
                    yield encoder(tokens.to(dev))
            """,
            lines=(7,),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def embed(encoder, corpus, dev):
                rows = DataLoader(corpus, batch_size=256, pin_memory=dev.type == "cuda")
                for tokens in rows:
                    yield encoder(tokens.to(dev, non_blocking=True))
            """,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def train(model, dataset, device):
                loader = DataLoader(dataset, batch_size=64, pin_memory=True)
                for x, y in loader:
                    x, y = x.to(device), y.cuda()
                    model(x)
            """,
            lines=(7, 7),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def train(model, dataset, device):
                loader = DataLoader(dataset, batch_size=64, pin_memory=True)
                for x, y in loader:
                    x, y = x.to(device, non_blocking=True), y.cuda(non_blocking=True)
                    model(x)
            """,
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader as DL

            loader = DL(ds, pin_memory=True, num_workers=2)
            for step, batch in enumerate(loader):
                image = batch["image"].to("cuda", dtype=torch.float16)
                batch = {k: v.to(device) for k, v in batch.items()}
            """,
            lines=(5, 6),
            fixed="""
            from torch.utils.data import DataLoader as DL

            loader = DL(ds, pin_memory=True, num_workers=2)
            for step, batch in enumerate(loader):
                image = batch["image"].to("cuda", dtype=torch.float16, non_blocking=True)
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            """,
        ),
        # The batch unpacked in the body, the loader iterated through a method of a call's result.
        Invalid(
            """
            from torch.utils.data import DataLoader

            def train_one_epoch(model, dataset, device):
                data_loader = DataLoader(dataset, batch_size=32, pin_memory=True)
                for batch in MetricLogger(delimiter="  ").log_every(data_loader, 10):
                    images, targets = batch
                    images, targets = images.to(device), targets.to(device)
                    images.sub_(0.5)
                    model(images).backward()
            """,
            lines=(7, 7),
            fixed="""
            from torch.utils.data import DataLoader

            def train_one_epoch(model, dataset, device):
                data_loader = DataLoader(dataset, batch_size=32, pin_memory=True)
                for batch in MetricLogger(delimiter="  ").log_every(data_loader, 10):
                    images, targets = batch
                    images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
                    images.sub_(0.5)
                    model(images).backward()
            """,
        ),
        # Unsafe fixes: the host batch goes to a helper that may write it; a whole batch object.
        Invalid(
            """
            from torch.utils.data import DataLoader

            def show(model, dataset, device):
                loader = DataLoader(dataset, batch_size=8, pin_memory=True)
                for images, labels in tqdm(loader):
                    preds = model(images.to(device))
                    draw_boxes(images, preds)
                for batch in loader:
                    model(**batch.to(device))
            """,
            lines=(6, 9),
            fixed="""
            from torch.utils.data import DataLoader

            def show(model, dataset, device):
                loader = DataLoader(dataset, batch_size=8, pin_memory=True)
                for images, labels in tqdm(loader):
                    preds = model(images.to(device, non_blocking=True))
                    draw_boxes(images, preds)
                for batch in loader:
                    model(**batch.to(device, non_blocking=True))
            """,
        ),
        # Batches drawn with `next()` on each pass of a step loop, unpacked first.
        Invalid(
            """
            import torch

            def pretrain(encoder, corpus, gpu, steps):
                stream = iter(torch.utils.data.DataLoader(corpus, batch_size=32, pin_memory=True))
                step = 0
                while step < steps:
                    tokens, mask = next(stream)
                    encoder(tokens.to(gpu), mask.to(gpu)).mean().backward()
                    step += 1
            """,
            lines=(8, 8),
            fixed="""
            import torch

            def pretrain(encoder, corpus, gpu, steps):
                stream = iter(torch.utils.data.DataLoader(corpus, batch_size=32, pin_memory=True))
                step = 0
                while step < steps:
                    tokens, mask = next(stream)
                    encoder(tokens.to(gpu, non_blocking=True), mask.to(gpu, non_blocking=True)).mean().backward()
                    step += 1
            """,
        ),
    )
    valid = (
        # The host batch written after the copy through a view of it, or through its rows.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            def fit(dataset, model, gpu):
                for images, labels in DataLoader(dataset, batch_size=32, pin_memory=True):
                    inputs = images.to(gpu)
                    flat = images.view(-1)
                    flat[0] = 0
                    model(inputs)
                for images, labels in DataLoader(dataset, batch_size=32, pin_memory=True):
                    inputs = images.to(gpu)
                    for image in images:
                        image.mul_(2)
                    model(inputs)
            """
        ),
        # One batch drawn to size the model (no loop draws again); a drawn batch written after its
        # copy (a non-blocking copy would race with the write).
        Valid(
            """
            import torch

            def warm_up(encoder, corpus, gpu):
                stream = iter(torch.utils.data.DataLoader(corpus, batch_size=32, pin_memory=True))
                probe, _ = next(stream)
                encoder(probe.to(gpu))
                for _ in range(10):
                    tokens, mask = next(stream)
                    encoder(tokens.to(gpu), mask)
                    tokens.zero_()
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader

            pinned = DataLoader(ds, pin_memory=True)
            for x, y in pinned:
                a = x.to(device, non_blocking=True)
                b = x.to(device, non_blocking=False)
                c = x.cpu()
                d = x.to("cpu")
                e = x.to(torch.float16)
                f = x.to(device, **opts)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader

            plain = DataLoader(ds)
            maybe = DataLoader(ds, pin_memory=args.pin)
            for x, y in plain:
                x = x.to(device)
            for x, y in maybe:
                x = x.to(device)
            for x, y in train_loader:
                x = x.to(device)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader

            pinned = DataLoader(ds, pin_memory=True)
            for x, y in pinned:
                x = x.float()
                x = x.to(device)
            for x in items:
                x.to(device)
            """
        ),
        # The host batch is written after the copy: a non-blocking copy would race with the write.
        Valid(
            """
            import torch
            import torch.nn.functional as F
            from torch.utils.data import DataLoader

            def train(model, dataset, device, noise):
                loader = DataLoader(dataset, batch_size=64, pin_memory=True)
                for x, y in loader:
                    x_gpu = x.to(device)
                    x.mul_(0.5)
                for x, y in loader:
                    x_gpu = x.cuda()
                    x.numpy()[:] = 0
                for x, y in loader:
                    host = x.numpy()
                    x_gpu = x.cuda()
                    host += noise
                for batch in loader:
                    images = batch["image"].to(device)
                    torch.add(batch["image"], 1, out=batch["image"])
                for x, y in loader:
                    x_gpu = x.to(device)
                    for row in range(4):
                        x[:, row] = 0
                for x, y in loader:
                    x_gpu = x.to(device)
                    F.relu(x, inplace=True)
            """
        ),
        # A reused pinned buffer is not a loader batch; batches a library already placed on the
        # device (`accelerator.prepare`) make the move a no-op.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            def stream(model, dataset, accelerator, device):
                buffer = torch.empty(64, 3, pin_memory=True)
                loader = DataLoader(dataset, batch_size=64, pin_memory=True)
                for x in loader:
                    buffer.copy_(x)
                    model(buffer.to(device))
                for batch in accelerator.prepare(loader):
                    model(batch["image"].to(device))
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        move = as_move(node, scope)
        if move is None or not move.to_accelerator:
            return
        if keyword(node, "non_blocking") is not None or has_star(node, "**"):
            return
        # `.to(device, dtype, non_blocking)` / `.cuda(device, non_blocking)` given positionally.
        cuda = isinstance(node.func, cst.Attribute) and node.func.attr.value == "cuda"
        if len(positional(node)) >= (2 if cuda else 3):
            return
        batch = batch_move(move, self.ctx.ancestors, scope) or drawn_batch_move(
            move, self.ctx.ancestors, scope
        )
        if batch is None:
            return
        loaders = batch_loaders(batch, scope, self.ctx.project)
        if not loaders.pinned:
            return
        written = host_written_after(batch, self.ctx.ancestors, scope)
        if written is HostWrite.CERTAIN:
            return  # a non-blocking copy would race with the write
        # The flow takes every unpacked part of a batch for a tensor; a custom `collate_fn` may
        # build anything, so only the loader's default collation proves it.
        # A project class with its own `.to()` may come out of the default collation too (it keeps
        # namedtuples and mappings), so a project defining `to` proves no part a tensor.
        project = self.ctx.project
        tensor = loaders.collated_part and not (project is not None and project.defines_to())
        risk = None
        if written is not HostWrite.NONE:
            risk = (
                "code after the copy may write the host batch (it is passed on, or written at an index that may"
                " be a list entry) while the copy still reads it: the device may get the new values"
            )
        elif not tensor:
            risk = (
                "the moved value is not proven a tensor (a custom `collate_fn`, a whole batch object): its own"
                " `.to()` may not take `non_blocking` and raise `TypeError`"
            )
        elif _casts(node, scope):
            risk = (
                "the copy also casts: a blocking copy converts on the host, a non-blocking one on the device,"
                " where NaN, infinities and values out of range convert to other integers"
            )
        elif may_be_mps(move.device_node, scope):
            risk = "the target may be Apple's MPS, where non-blocking host-to-device copies have open data-corruption reports"
        fixed = with_keyword(node, "non_blocking", cst.Name("True"))
        fix = Fix.judged("Add `non_blocking=True`", {node: fixed}, risk)
        self.report(node, fix=fix)
