"""TDL310 async-d2h-then-read."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.values import flow
from torchdev_lint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:
    from torchdev_lint.analysis.syntax.scopes import Scope
    from torchdev_lint.engine import FileContext


class AsyncD2hThenRead(Rule):
    code = "TDL310"
    name = "async-d2h-then-read"
    message = (
        "A non-blocking copy to the CPU is read before any synchronisation: the data may not have "
        "arrived yet; call `torch.cuda.synchronize()` (or wait on an event) before reading"
    )
    triggers = ("non_blocking",)
    docs = """
        ## What it does
        Flags `t.to("cpu", non_blocking=True)` whose result is read on the host (`.numpy()`,
        `.tolist()`, `.item()`, indexing, `print`, `float()`, an f-string...) before
        `torch.cuda.synchronize()`, a stream or event `.synchronize()`/`.wait()`, or a blocking
        copy that waits for the stream. The finding is reported at the non-blocking copy. A call
        to a helper of unknown behaviour in between counts as a possible synchronisation.

        A view reads no values: slicing (`host[:-1]`, `host[1:, :4]`) and `.view`, `.reshape`,
        `.unsqueeze`, `.squeeze`, `.flatten`, `.permute`, `.transpose`, `.t`, `.expand`,
        `.narrow`, `.detach` are not reads, and a read of the view counts as a read of the
        copy. Indexing with a number or a tensor (`host[0]`) is a read. A copy of data already
        on the CPU is not asynchronous and is not reported: a tensor the device flow knows is
        on the CPU, or host data by construction (`x.to("cpu")`, `x.cpu()`, a function of the
        file whose every `return` is such).

        ## Why it matters
        A non-blocking device-to-host copy only queues the transfer and returns at once, into
        pinned memory the GPU fills later. Reading it immediately reads whatever the buffer held
        before: zeros or stale values, with no error. The bug appears only on a GPU, and only
        sometimes.

        ## Example
        ```python
        host = logits.to("cpu", non_blocking=True)
        print(host.argmax(-1).tolist())
        ```

        ## Use instead
        ```python
        host = logits.to("cpu", non_blocking=True)
        torch.cuda.synchronize()  # or: event.record(); ...; event.synchronize()
        print(host.argmax(-1).tolist())
        ```

        ## Fix safety
        No fix: where to synchronise (right away, or after overlapping more work) is the
        author's choice.
        """
    invalid = (
        Invalid(
            """
            import torch

            def scores(logits):
                host = logits.to("cpu", non_blocking=True)
                return host.tolist()
            """,
            lines=(4,),
        ),
        Invalid(
            """
            import torch

            def report(loss, preds):
                cpu_preds = preds.to(torch.device("cpu"), non_blocking=True)
                print(f"first: {cpu_preds[0]}")
                value = loss.to(device="cpu", non_blocking=True).numpy()
            """,
            lines=(4, 6),
        ),
        # A read through a view or a slice of the copy.
        Invalid(
            """
            import torch

            def encode(model, data):
                out = model(data).to("cpu", non_blocking=True)
                head = out[:-1]
                return head.numpy(), out.reshape(-1).unsqueeze(0).tolist()
            """,
            lines=(4,),
        ),
    )
    valid = (
        Valid(
            """
            import torch

            def scores(logits, stream):
                host = logits.to("cpu", non_blocking=True)
                torch.cuda.synchronize()
                a = host.tolist()
                again = logits.to("cpu", non_blocking=True)
                stream.synchronize()
                return a, again.numpy()
            """
        ),
        # Blocking copies; host-to-device copies; a copy that is only passed on.
        Valid(
            """
            import torch

            def f(x, y):
                a = x.to("cpu").numpy()
                b = y.to("cuda", non_blocking=True)
                c = x.to("cpu", non_blocking=True)
                return a, b[0], c
            """
        ),
        # An event waited on before the read.
        Valid(
            """
            import torch

            def f(x):
                host = x.to("cpu", non_blocking=True)
                done = torch.cuda.Event()
                done.record()
                done.synchronize()
                return host.numpy()
            """
        ),
        # Synchronised on only one path: not provably unsynchronised.
        Valid(
            """
            import torch

            def f(x, wait):
                host = x.to("cpu", non_blocking=True)
                if wait:
                    torch.cuda.synchronize()
                return host.numpy()
            """
        ),
        # Only a slice or a view of the copy is used: no value is read on the host.
        Valid(
            """
            import torch

            def encode(model, data, use_vn):
                out = model(data).to("cpu", non_blocking=True)
                data.pe = out[:-1] if use_vn else out
                data.flat = out.view(-1).unsqueeze(0)
                return data
            """
        ),
        # The source is already on the CPU: nothing is copied asynchronously.
        Valid(
            """
            import torch

            def process(model, data):
                out = model(data)
                return out.to("cpu")

            def encode(model, data):
                out = process(model, data).to("cpu", non_blocking=True)
                host = data.x.cpu()
                again = host.to("cpu", non_blocking=True)
                return out.numpy(), again.tolist()
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._sites: flow.SitesByUnit[cst.Arg] = flow.SitesByUnit(ctx)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value == "non_blocking":
            self._sites.add(node)

    def leave_scope(self, scope: Scope) -> None:
        taken = self._sites.take(scope)
        if taken is None:
            return
        reported: set[cst.CSTNode] = set()
        for read in taken[0].async_reads:
            if read.copy not in reported:
                reported.add(read.copy)
                self.report(read.copy)
