"""TDL303 numpy-on-device-tensor."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.flow_values import Kind
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import method_call

if TYPE_CHECKING:
    from torchdev_lint.analysis.syntax.scopes import Scope
    from torchdev_lint.engine import FileContext


class NumpyOnDeviceTensor(Rule):
    code = "TDL303"
    name = "numpy-on-device-tensor"
    message = "`.numpy()` on a tensor that lives on the GPU raises; call `.cpu()` first"
    fix_availability = "sometimes"
    triggers = (".numpy(",)
    docs = """
        ## What it does
        Flags `.numpy()` on a tensor with positive evidence of living on an accelerator: moved or
        created on `"cuda"`, on a device variable that is CUDA whenever CUDA is available
        (`torch.device("cuda" if torch.cuda.is_available() else "cpu")`), or the output of a module
        moved there, with no `.cpu()` in between. Tensors known to be on the CPU or whose device
        is unknown (a `device` parameter, a helper's return) are not flagged.

        ## Why it matters
        NumPy arrays live in host memory: `.numpy()` on a CUDA tensor raises `TypeError: can't
        convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host
        memory first.` Code written and tested on a CPU-only machine passes and then fails on the
        first GPU run. A module's output also requires grad, and so does a tensor made with
        `requires_grad=True`: `.numpy()` refuses those too, so the fix inserts `.detach()` as well.

        ## Example
        ```python
        probs = model(x.to(device)).softmax(-1)
        labels = probs.numpy().argmax(-1)
        ```

        ## Use instead
        ```python
        labels = probs.detach().cpu().numpy().argmax(-1)
        ```

        ## Fix safety
        Safe: inserts `.cpu()` and, for a module's output, `.detach()` before `.numpy()`. Wherever
        the original line runs, the fixed one gives the same array: `.cpu()` of a CPU tensor is
        the tensor itself and `.detach()` shares its storage. The only runs it changes are those
        where the original raises (`.numpy()` of a CUDA tensor, or of one that requires grad):
        there the fixed line returns the array instead of raising, which is the point of the rule.
        """
    invalid = (
        Invalid(
            """
            import torch

            x = torch.randn(4, 4).cuda()
            print(x.numpy())
            """,
            lines=(4,),
            fixed="""
            import torch

            x = torch.randn(4, 4).cuda()
            print(x.cpu().numpy())
            """,
        ),
        Invalid(
            # A leaf made to require grad needs `.detach()` as well: `.cpu()` alone still raises.
            """
            import torch

            def probe(n):
                offsets = torch.zeros(n, device="cuda", requires_grad=True)
                return offsets.numpy(), torch.ones(n, requires_grad=True).cuda().numpy()
            """,
            lines=(5, 5),
            fixed="""
            import torch

            def probe(n):
                offsets = torch.zeros(n, device="cuda", requires_grad=True)
                return offsets.detach().cpu().numpy(), torch.ones(n, requires_grad=True).cuda().detach().cpu().numpy()
            """,
        ),
        Invalid(
            # The pieces of a CUDA tensor (`chunk`, `split`, `unbind`) are on CUDA too.
            """
            import torch

            def halves(n):
                both = torch.randn(2, n, device="cuda")
                first, second = both.chunk(2)
                return first.numpy(), second
            """,
            lines=(6,),
            fixed="""
            import torch

            def halves(n):
                both = torch.randn(2, n, device="cuda")
                first, second = both.chunk(2)
                return first.cpu().numpy(), second
            """,
        ),
        Invalid(
            # Other spellings of a device that is CUDA (an accelerator) whenever one is available.
            """
            import torch

            def scores(batch):
                device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
                return (torch.as_tensor(batch).to(device) * 2).numpy()

            def ranks(batch):
                target = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
                return torch.as_tensor(batch).to(target).softmax(-1).numpy()
            """,
            lines=(5, 9),
            fixed="""
            import torch

            def scores(batch):
                device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
                return (torch.as_tensor(batch).to(device) * 2).cpu().numpy()

            def ranks(batch):
                target = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
                return torch.as_tensor(batch).to(target).softmax(-1).cpu().numpy()
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            def predict(batch):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model = nn.Linear(8, 2).to(device)
                probs = model(batch.to(device)).softmax(-1)
                return probs.numpy()
            """,
            lines=(8,),
            fixed="""
            import torch
            from torch import nn

            def predict(batch):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model = nn.Linear(8, 2).to(device)
                probs = model(batch.to(device)).softmax(-1)
                return probs.detach().cpu().numpy()
            """,
        ),
        Invalid(
            """
            import torch

            def stats(n):
                samples = torch.randn(n, device="cuda:1") * 2 + 1
                return (samples - samples.mean()).numpy()
            """,
            lines=(5,),
            fixed="""
            import torch

            def stats(n):
                samples = torch.randn(n, device="cuda:1") * 2 + 1
                return (samples - samples.mean()).cpu().numpy()
            """,
        ),
    )
    valid = (
        Valid(
            """
            import torch

            x = torch.randn(4, 4).cuda()
            a = x.cpu().numpy()
            b = x.detach().cpu().numpy()
            c = torch.randn(3).numpy()
            d = x.numpy(force=True)
            """
        ),
        # A `device` parameter is of unknown device.
        Valid(
            """
            import torch

            def f(device):
                x = torch.randn(4).to(device)
                return x.numpy()
            """
        ),
        # A helper's return is unknown.
        Valid(
            """
            import torch

            def f():
                x = load_features()
                return x.numpy()
            """
        ),
        # Moved in one branch only.
        Valid(
            """
            import torch

            def f(flag):
                x = torch.randn(4)
                if flag:
                    x = x.cuda()
                return x.numpy()
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._sites: flow.SitesByUnit[cst.Call] = flow.SitesByUnit(ctx)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "numpy" and not node.args:
            self._sites.add(node)

    def leave_scope(self, scope: Scope) -> None:
        taken = self._sites.take(scope)
        if taken is None:
            return
        analysis, sites = taken
        for call in sites:
            func = call.func
            if not isinstance(func, cst.Attribute):  # sites are `x.numpy()` calls
                continue
            receiver = func.value
            value = analysis.value(receiver)
            if value is None or value.kind is not Kind.TENSOR or value.device is None:
                continue
            if not value.device.on_accelerator:
                continue
            host = method_call(method_call(receiver, "detach") if value.grad else receiver, "cpu")
            fixed = call.with_changes(func=func.with_changes(value=host))
            insert = "`.detach().cpu()`" if value.grad else "`.cpu()`"
            self.report(
                call,
                f"`.numpy()` on a tensor on {value.device.describe()} raises; insert {insert} first",
                Fix("safe", f"Insert {insert} before `.numpy()`", {call: fixed}),
            )
