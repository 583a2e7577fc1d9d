"""TDL306 discarded-tensor-to."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.factory_values import moves_nothing
from torchdev_lint.analysis.values.flow_values import Kind
from torchdev_lint.rule import Fix, Invalid, Rule, Valid

if TYPE_CHECKING:
    from torchdev_lint.analysis.syntax.scopes import Scope
    from torchdev_lint.engine import FileContext

_CONVERSIONS = frozenset({"to", "cuda", "cpu", "half", "float"})


class DiscardedTensorTo(Rule):
    code = "TDL306"
    name = "discarded-tensor-to"
    message = "A tensor's `.to()` returns a new tensor and leaves the original alone; assign the result"
    fix_availability = "sometimes"
    triggers = (".to(", ".cuda(", ".cpu(", ".half(", ".float(")
    docs = """
        ## What it does
        Flags a tensor's `.to(...)`, `.cuda()`, `.cpu()`, `.half()` or `.float()` used as a
        statement, its result thrown away. It needs evidence that the receiver is a tensor: a
        factory's result, tensor arithmetic, a parameter annotated `torch.Tensor` (also `Optional[Tensor]`,
        `Tensor | None`, `"Tensor"`), a buffer or
        parameter a module registered, the parts of a batch from a data loader. Modules (loss
        criteria included) and receivers of unknown kind are never flagged.

        A move that asks for what the tensor already has by construction is a no-op, assigned
        or not, and is not flagged either: the assignment of the receiver (a plain name) that
        reaches the statement is a torch factory call (`torch.zeros`, `torch.full`,
        `torch.tensor`, `torch.zeros_like`...) whose `dtype=` and `device=` keywords are, as
        code, the arguments of the `.to(...)`: `.to(q.dtype)` after `dtype=q.dtype`,
        `.to(q.device)` after `device=q.device`, `.to(q.device, q.dtype)` after both; `.cuda()`,
        `.cpu()`, `.half()` and `.float()` after `device="cuda"`, `device="cpu"`,
        `dtype=torch.float16`, `dtype=torch.float32`. Nothing may assign to the receiver or to
        the names those arguments read (or to their attributes or items) in between; in-place
        calls such as `masked_fill_` may come between, since they keep the dtype and device.
        Any other argument (`non_blocking=`, `copy=`, `memory_format=`), a call in the
        argument, another expression or an unknown binding still gets flagged.

        ## Why it matters
        `model.to(device)` moves a module in place, so the same line on a tensor looks right, but
        `Tensor.to` returns a copy and leaves the original where it was. The code later runs on
        the CPU tensor and fails with a device mismatch, or silently keeps the old dtype.

        ## Example
        ```python
        for images, labels in loader:
            images.to(device)
            loss = criterion(model(images), labels)
        ```

        ## Use instead
        ```python
        for images, labels in loader:
            images = images.to(device)
            loss = criterion(model(images), labels)
        ```

        ## Fix safety
        Unsafe: when the receiver is a plain name, the fix assigns the result back to it (`x =
        x.to(...)`), which is what the statement was meant to do, but it changes what the program
        does: every later use of `x` now sees the moved or cast tensor (`x.half()` makes the rest
        of the function run in float16, where it ran in float32 before). A program that worked
        with the line as a no-op can give other numbers afterwards, so the fix is never applied
        without `--unsafe-fixes` (this departs from RULES.md's "safe", which predates the stricter
        definition of a safe fix: same values, dtypes and devices). Other receivers get no fix.
        """
    invalid = (
        Invalid(
            # Parameters annotated as optional tensors (`Optional[Tensor]`, `Tensor | None`, a string).
            """
            from typing import Optional
            from torch import Tensor

            def attend(q: Tensor, mask: Optional[Tensor] = None, bias: Tensor | None = None, w: "Tensor" = None):
                if mask is not None:
                    mask.to(q.device)
                if bias is not None:
                    bias.to(q.device)
                w.to(q.dtype)
                return q
            """,
            lines=(6, 8, 9),
            fixed="""
            from typing import Optional
            from torch import Tensor

            def attend(q: Tensor, mask: Optional[Tensor] = None, bias: Tensor | None = None, w: "Tensor" = None):
                if mask is not None:
                    mask = mask.to(q.device)
                if bias is not None:
                    bias = bias.to(q.device)
                w = w.to(q.dtype)
                return q
            """,
        ),
        Invalid(
            """
            import torch

            x = torch.randn(8, 4)
            x.to("cuda")
            x.half()  # keep half precision
            """,
            lines=(4, 5),
            fixed="""
            import torch

            x = torch.randn(8, 4)
            x = x.to("cuda")
            x = x.half()  # keep half precision
            """,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def train(model, dataset, device):
                loader = DataLoader(dataset, batch_size=32)
                for images, labels in loader:
                    images.to(device); labels.to(device)
                    model(images)
            """,
            lines=(7, 7),
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def train(model, dataset, device):
                loader = DataLoader(dataset, batch_size=32)
                for images, labels in loader:
                    images = images.to(device); labels = labels.to(device)
                    model(images)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Smoother(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("kernel", torch.ones(3) / 3)

                def place(self, device, scale):
                    self.kernel.to(device)
                    (self.kernel * scale).float()
            """,
            lines=(10, 11),
        ),
        Invalid(
            """
            import torch

            def prepare(extra: torch.Tensor, scale):
                extra.cuda()
                return extra * scale
            """,
            lines=(4,),
            fixed="""
            import torch

            def prepare(extra: torch.Tensor, scale):
                extra = extra.cuda()
                return extra * scale
            """,
        ),
        # Look-alikes of a no-op: another dtype, a rebinding between, more than a dtype asked,
        # a device the factory was not given, `.cuda()` on a tensor made on the CPU.
        Invalid(
            """
            import torch

            def attention_bias(query, L, S):
                bias = torch.zeros(L, S, dtype=torch.float32)
                bias.to(query.dtype)
                scale = torch.ones(S, dtype=query.dtype)
                query = query.half()
                scale.to(query.dtype)
                mask = torch.ones(L, S, dtype=query.dtype)
                mask.to(query.dtype, non_blocking=True)
                mask.to(query.device)
                mask.cuda()
                return bias, scale, mask
            """,
            lines=(5, 8, 10, 11, 12),
            fixed="""
            import torch

            def attention_bias(query, L, S):
                bias = torch.zeros(L, S, dtype=torch.float32)
                bias = bias.to(query.dtype)
                scale = torch.ones(S, dtype=query.dtype)
                query = query.half()
                scale = scale.to(query.dtype)
                mask = torch.ones(L, S, dtype=query.dtype)
                mask = mask.to(query.dtype, non_blocking=True)
                mask = mask.to(query.device)
                mask = mask.cuda()
                return bias, scale, mask
            """,
        ),
    )
    valid = (
        # Modules move in place, loss criteria included.
        Valid(
            """
            import torch
            from torch import nn

            model = nn.Linear(4, 2)
            model.to("cuda")
            criterion = nn.BCELoss()
            criterion.cuda()
            model.half()
            """
        ),
        # Receivers of unknown kind.
        Valid(
            """
            def place(thing, batch, device):
                thing.to(device)
                batch.to(device)
                make().cuda()
            """
        ),
        # A single batch from a loader may be a dict-like object with an in-place `.to()`.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            def run(dataset, device):
                for batch in DataLoader(dataset):
                    batch.to(device)
            """
        ),
        # A no-op: the reaching binding was created with that very dtype, and the in-place fill
        # between keeps it (PyTorch's reference attention code).
        Valid(
            """
            import torch

            def attention_bias(query, key, is_causal):
                L, S = query.size(-2), key.size(-2)
                bias = torch.zeros(L, S, dtype=query.dtype, device=query.device)
                if is_causal:
                    mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal=0)
                    bias.masked_fill_(mask.logical_not(), float("-inf"))
                    bias.to(query.dtype)
                    bias.to(query.device, query.dtype)
                ones = torch.ones(S, device="cuda", dtype=torch.float32)
                ones.cuda()
                ones.float()
                return bias, ones
            """
        ),
        # Result used.
        Valid(
            """
            import torch

            x = torch.randn(3)
            y = x.to("cuda")
            print(x.cuda())
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._sites: flow.SitesByUnit[cst.Expr] = flow.SitesByUnit(ctx)

    def visit_Expr(self, node: cst.Expr) -> None:
        call = node.value
        if (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value in _CONVERSIONS
            and not moves_nothing(call, self.ctx.ancestors, self.ctx.scope)
        ):
            self._sites.add(node)

    def leave_scope(self, scope: Scope) -> None:
        taken = self._sites.take(scope)
        if taken is None:
            return
        analysis, sites = taken
        for statement in sites:
            call = statement.value
            if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
                continue  # sites are `x.to(...)` statements
            func = call.func
            receiver = func.value
            value = analysis.value(receiver)
            if value is None or value.kind is not Kind.TENSOR:
                continue
            method = func.attr.value
            fix = None
            if isinstance(receiver, cst.Name):
                assign = cst.Assign(
                    targets=[cst.AssignTarget(target=cst.Name(receiver.value))],
                    value=call,
                    semicolon=statement.semicolon,
                )
                fix = Fix(
                    "unsafe",
                    f"Assign the result: `{receiver.value} = {receiver.value}.{method}(...)`",
                    {statement: assign},
                    f"every later use of `{receiver.value}` now sees the result of `.{method}()` (its "
                    "device or dtype), where it saw the original tensor: values may change downstream",
                )
            self.report(
                call,
                f"`.{method}()` on a tensor returns a new tensor and leaves the original unchanged; "
                "assign the result",
                fix,
            )
