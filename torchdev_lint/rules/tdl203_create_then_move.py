"""TDL203 create-then-move."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.devices import CPU, as_move, is_dtype
from torchdev_lint.analysis.kinds import TENSOR_FACTORIES
from torchdev_lint.analysis.scopes import Scope
from torchdev_lint.diagnostics import FixSafety
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import keyword, positional, string, with_keyword

# Factories that take `device=` (from_numpy, stack and cat do not).
DEVICE_FACTORIES = TENSOR_FACTORIES - {"from_numpy", "stack", "cat"}
# These draw from the target device's generator once given `device=`: the same
# distribution, other numbers than the CPU generator gave before the move.
_RANDOM = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"})
# `.to(device, dtype, non_blocking, copy)`: parameters a freshly created tensor can drop or keep.
_TO_KEYWORDS = frozenset({"device", "dtype", "non_blocking", "copy"})
# Factory arguments that make `device=` wrong or change semantics beyond placement.
_NO_FIX_FACTORY_KEYWORDS = frozenset({"pin_memory", "out"})


class CreateThenMove(Rule):
    code = "TDL203"
    name = "create-then-move"
    message = "tensor created on the CPU and then copied to the device; pass `device=` to the factory instead"
    fix_availability = "sometimes"
    triggers = (".to(", ".cuda(")
    docs = """
        ## What it does
        Flags a tensor factory (`torch.zeros`, `ones`, `empty`, `full`, `rand`, `randn`,
        `randint`, `arange`, `linspace`, `eye`, `tensor`, `as_tensor`, `zeros_like`, ...) whose
        result is immediately moved to a device in the same chain: `torch.zeros(3).to(device)`,
        `torch.randn(2, 2).cuda()`. Casts to a dtype only, moves to another tensor
        (`.to(other)`), moves to the CPU and factories already given `device=` are not flagged,
        nor is `torch.from_numpy(a).to(d)` (it has no `device=`), nor a factory drawing from an
        explicit `generator=` (a CPU generator cannot fill device memory).

        ## Why it matters
        The tensor is first allocated and filled on the CPU, then copied over the PCIe bus and
        the CPU copy thrown away: two allocations, a host-to-device copy and, for a pageable
        source, a synchronisation, where one kernel writing directly into device memory would
        do. In code that builds many small tensors (masks, position ids, constants in
        `forward`) this dominates the step time.

        ## Example
        ```python
        mask = torch.ones(seq_len, seq_len).to(device)
        ids = torch.arange(seq_len).cuda()
        half = torch.zeros(3).to(device, torch.float16)
        ```

        ## Use instead
        ```python
        mask = torch.ones(seq_len, seq_len, device=device)
        ids = torch.arange(seq_len, device="cuda")
        half = torch.zeros(3, device=device, dtype=torch.float16)
        ```

        ## Fix safety
        Safe: passes the move's device (and dtype, if the move also casts) to the factory; the
        values, dtype and device of the result are the same. `non_blocking` and `copy` are
        dropped: a fresh tensor has no pending copy to overlap. The fix is unsafe, and only
        offered as such, for random factories (on a GPU they draw from its generator, so the
        numbers differ from those the CPU generator gave) and for factories given
        `requires_grad=True` (the result becomes a leaf tensor that receives `.grad`, where the
        moved copy did not). No fix is offered when the factory takes `pin_memory` or
        `out`, or passes `**kwargs`, or when the move has arguments that
        cannot be carried over.
        """
    invalid = (
        Invalid(
            """
            import torch
            mask = torch.ones(4, 4).to(device)
            ids = torch.arange(10).cuda()
            x = torch.zeros(3).to(device, torch.float16)
            y = torch.tensor([1.0, 2.0]).to(device=dev, non_blocking=True)
            z = torch.zeros_like(a).to("cuda:1")
            """,
            lines=(2, 3, 4, 5, 6),
            fixed="""
            import torch
            mask = torch.ones(4, 4, device=device)
            ids = torch.arange(10, device="cuda")
            x = torch.zeros(3, device=device, dtype=torch.float16)
            y = torch.tensor([1.0, 2.0], device=dev)
            z = torch.zeros_like(a, device="cuda:1")
            """,
        ),
        Invalid(
            """
            import torch as T
            from torch import full

            def make(n, device):
                eye = T.eye(n, dtype=T.float64).to(device, T.float32)
                fill = full((n,), 7).cuda(1)
                return eye, fill
            """,
            lines=(5, 6),
            fixed="""
            import torch as T
            from torch import full

            def make(n, device):
                eye = T.eye(n, dtype=T.float32, device=device)
                fill = full((n,), 7, device="cuda:1")
                return eye, fill
            """,
        ),
        Invalid(
            # Unsafe fixes: other random numbers on the GPU; a leaf tensor instead of a copy.
            """
            import torch
            noise = torch.randn(2, 2).cuda()
            w = torch.zeros(3, requires_grad=True).to(device)
            """,
            lines=(2, 3),
            fixed="""
            import torch
            noise = torch.randn(2, 2, device="cuda")
            w = torch.zeros(3, requires_grad=True, device=device)
            """,
        ),
        Invalid(
            # Reported without a fix: pinned memory, **kwargs, a memory format, a device variable.
            """
            import torch
            a = torch.empty(8, pin_memory=True).to(device)
            c = torch.zeros(3, **options).to(device)
            d = torch.empty(1, 3, 4, 4).to(device, memory_format=torch.channels_last)
            e = torch.ones(2).cuda(rank)
            """,
            lines=(2, 3, 4, 5),
        ),
    )
    valid = (
        Valid(
            """
            import torch
            a = torch.zeros(3).to(torch.float16)
            b = torch.zeros(3).to(dtype=torch.float64)
            c = torch.zeros(3).to(other_tensor)
            d = torch.zeros(3, device=device).to(torch.float16)
            e = torch.ones(2, device="cuda").to(device)
            f = torch.zeros(3).to(x.dtype)
            """
        ),
        Valid(
            """
            import numpy as np
            import torch
            a = torch.from_numpy(np.zeros(3)).to(device)
            b = torch.stack(items).to(device)
            c = torch.zeros(3).cpu()
            d = torch.zeros(3).to("cpu")
            """
        ),
        Valid(
            """
            import torch
            x = torch.zeros(3)
            y = x.to(device)
            z = torch.zeros(3).float().to(device)
            """
        ),
        Valid(
            # Drawn from a CPU generator on purpose: reproducible whatever the device.
            """
            import torch
            g = torch.Generator().manual_seed(0)
            v = torch.rand(3, generator=g).to(device)
            """
        ),
        Valid(
            """
            import numpy as np
            zeros = np.zeros(3).to(device)
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        move = as_move(node, self.ctx.scope)
        if move is None or move.device == CPU or not isinstance(move.receiver, cst.Call):
            return
        factory = move.receiver
        name = self.ctx.qualname(factory.func)
        if name is None or not name.startswith("torch.") or name[6:] not in DEVICE_FACTORIES:
            return
        # A CPU `generator=` makes creating on the CPU the way to get reproducible numbers.
        if keyword(factory, "device") is not None or keyword(factory, "generator") is not None:
            return
        self.report(node, fix=self._fix(node, factory, name[6:]))

    def _fix(self, call: cst.Call, factory: cst.Call, factory_name: str) -> Fix | None:
        if any(arg.star == "**" for arg in factory.args):
            return None
        if any(keyword(factory, name) is not None for name in _NO_FIX_FACTORY_KEYWORDS):
            return None
        target = _move_arguments(call, self.ctx.scope)
        if target is None:
            return None
        device, dtype = target
        fixed = factory
        if dtype is not None:
            given = keyword(factory, "dtype")
            if given is not None:
                fixed = fixed.with_changes(
                    args=[arg.with_changes(value=dtype) if arg is given else arg for arg in fixed.args]
                )
        fixed = with_keyword(fixed, "device", device)
        if dtype is not None and keyword(factory, "dtype") is None:
            fixed = with_keyword(fixed, "dtype", dtype)
        grad = keyword(factory, "requires_grad")
        changes_values = factory_name in _RANDOM or (
            grad is not None and not (isinstance(grad.value, cst.Name) and grad.value.value == "False")
        )
        safety: FixSafety = "unsafe" if changes_values else "safe"
        return Fix(safety, "Pass `device=` to the factory", {call: fixed})


def _move_arguments(
    call: cst.Call, scope: Scope
) -> tuple[cst.BaseExpression, cst.BaseExpression | None] | None:
    """(device, dtype) of a `.to(...)`/`.cuda(...)` call, or None when it does more than that."""
    assert isinstance(call.func, cst.Attribute)
    if call.func.attr.value == "cuda":
        if any(arg.keyword is None or arg.keyword.value != "non_blocking" for arg in call.args):
            args = positional(call)
            if len(call.args) == 1 and len(args) == 1 and isinstance(args[0].value, cst.Integer):
                return string(f"cuda:{args[0].value.value}"), None
            return None
        return string("cuda"), None
    if any(arg.star for arg in call.args):
        return None
    if any(arg.keyword is not None and arg.keyword.value not in _TO_KEYWORDS for arg in call.args):
        return None
    args = positional(call)
    device_arg = keyword(call, "device")
    device = device_arg.value if device_arg is not None else (args[0].value if args else None)
    if device is None:
        return None
    dtype_arg = keyword(call, "dtype")
    dtype = dtype_arg.value if dtype_arg is not None else None
    if device_arg is None and len(args) > 1:
        if dtype is not None or not is_dtype(args[1].value, scope):
            return None
        dtype = args[1].value
    return device, dtype
