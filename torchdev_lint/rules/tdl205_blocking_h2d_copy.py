"""TDL205 blocking-h2d-copy."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.devices import as_move
from torchdev_lint.analysis.loaders import pinned_batch
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import has_star, keyword, positional, with_keyword


class BlockingH2dCopy(Rule):
    code = "TDL205"
    name = "blocking-h2d-copy"
    message = (
        "A batch from a pinned `DataLoader` is copied to the device synchronously; "
        "pass `non_blocking=True` so the copy overlaps with compute"
    )
    fix_availability = "sometimes"
    triggers = ("pin_memory",)
    docs = """
        ## What it does
        Flags `batch.to(device)` / `batch.cuda()` without `non_blocking=True` when the batch comes
        from a `DataLoader` created with `pin_memory=True`.

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
        Safe: adds `non_blocking=True`. A host-to-device copy is ordered on the current stream, so
        every kernel that later reads the batch on the device sees the copied data, and the pinned
        source stays alive as long as the batch does. Device-to-host copies, whose results the host
        reads, are never flagged.
        """
    invalid = (
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
    )
    valid = (
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
    )

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        move = as_move(node, scope)
        if move is None or not move.to_accelerator:
            return
        if keyword(node, "non_blocking") is not None or has_star(node, "**"):
            return
        # `.to(device, dtype, non_blocking)` / `.cuda(device, non_blocking)` given positionally.
        if len(positional(node)) >= (2 if move.call.func.attr.value == "cuda" else 3):  # type: ignore[attr-defined]
            return
        if not pinned_batch(move, self.ctx.ancestors, scope):
            return
        fixed = with_keyword(node, "non_blocking", cst.Name("True"))
        self.report(node, fix=Fix("safe", "Add `non_blocking=True`", {node: fixed}))
