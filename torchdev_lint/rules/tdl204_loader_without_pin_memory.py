"""TDL204 loader-without-pin-memory."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.devices import as_move
from torchdev_lint.analysis.loaders import is_dataloader_call, moves_loader_batch
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import argument, has_star, with_keyword

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

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self.unpinned: list[cst.Call] = []
        self.moves_batches = False

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        if is_dataloader_call(node, scope):
            if argument(node, _PIN_MEMORY_INDEX, "pin_memory") is None and not has_star(node, "**"):
                self.unpinned.append(node)
            return
        if not self.moves_batches:
            move = as_move(node, scope)
            self.moves_batches = move is not None and moves_loader_batch(move, self.ctx.ancestors, scope)

    def leave_Module(self, node: cst.Module) -> None:
        if not self.moves_batches:
            return
        for call in self.unpinned:
            fixed = with_keyword(call, "pin_memory", cst.Name("True"))
            self.report(call, fix=Fix("safe", "Add `pin_memory=True`", {call: fixed}))
