"""TDL203 create-then-move."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis import flow
from torchdev_lint.analysis.checkpoints import is_test_code
from torchdev_lint.analysis.devices import CPU, as_move, is_dtype
from torchdev_lint.analysis.kinds import TENSOR_FACTORIES
from torchdev_lint.analysis.scopes import Scope, assigned_values, resolve
from torchdev_lint.diagnostics import FixSafety
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import keyword, positional, with_keyword

# Factories that take `device=` (from_numpy, stack and cat do not).
DEVICE_FACTORIES = TENSOR_FACTORIES - {"from_numpy", "stack", "cat"}
# These draw from the target device's generator once given `device=`: the same
# distribution, other numbers than the CPU generator gave before the move.
_RANDOM = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"})
# Computed by device kernels in floating point: the last bits may differ from the CPU's.
_DEVICE_ARITHMETIC = frozenset({"arange", "linspace", "logspace"})
# Every value they hold (0, 1, or none) is exact in any dtype: creating straight in
# the dtype a move casts to gives the tensor that casting after creation gives.
_EXACT_IN_ANY_DTYPE = frozenset({"zeros", "ones", "empty", "eye", "zeros_like", "ones_like", "empty_like"})
# Integer dtypes: `arange` in one of them is exact integer arithmetic on every device.
_INTEGER_DTYPES = frozenset(
    {"int", "int8", "int16", "int32", "int64", "long", "short", "uint8", "uint16", "uint32", "uint64"}
)
# Python containers and numbers: `torch.tensor(...)` builds these on the host even with `device=`.
_PYTHON_DATA = (
    cst.List,
    cst.Tuple,
    cst.ListComp,
    cst.GeneratorExp,
    cst.Integer,
    cst.Float,
    cst.UnaryOperation,
)
# Built from data held by the host (a list, a number, an array) or from a tensor.
_FROM_DATA = frozenset({"tensor", "as_tensor"})
# `.to(device, dtype, non_blocking, copy)`: parameters a freshly created tensor can drop or keep.
_TO_KEYWORDS = frozenset({"device", "dtype", "non_blocking", "copy"})
# Factory arguments that make `device=` wrong or change semantics beyond placement.
_NO_FIX_FACTORY_KEYWORDS = frozenset({"pin_memory", "out"})
# torch builds a tensor from a list or number on the host whatever `device=` says, and
# copies an array or tensor source straight to `device=` (torch/csrc/utils/tensor_new.cpp).
_FROM_DATA_MESSAGE = (
    "tensor built from host data and then copied to the device; `device=` on the factory does it in one "
    "call and saves the intermediate CPU tensor (the data still crosses from the host)"
)


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
        `torch.randn(2, 2).cuda()`. Not flagged: casts to a dtype only, moves to another tensor
        (`.to(other)`), moves to the CPU, factories already given `device=`,
        `torch.from_numpy(a).to(d)` (it has no `device=`), a factory drawing from an explicit
        `generator=` (a CPU generator cannot fill device memory), and test code. A `*_like(x)`
        factory creates its tensor where `x` lives, so it is flagged only where `x` is known to
        be on the CPU; a move to the device the source already has (`zeros_like(x).to(x.device)`,
        `torch.tensor(t).to(t.device)`) is a no-op and never flagged, nor is `torch.tensor(t)` of
        a tensor known to be on an accelerator. `torch.tensor`/`as_tensor` of Python data (a list,
        tuple, number or comprehension, directly or through a name bound only to one) is not
        flagged either: torch builds such a tensor on the host even when given `device=`, so the
        rewrite would save nothing.

        ## Why it matters
        The tensor is first allocated and filled on the CPU, then copied over the PCIe bus and
        the CPU copy thrown away: two allocations, a host-to-device copy and, for a pageable
        source, a synchronisation, where one kernel writing directly into device memory would
        do. In code that builds many small tensors (masks, position ids, constants in
        `forward`) this dominates the step time. For `torch.tensor(data)`/`torch.as_tensor(data)`
        of host data (a list, a number, an array) the data has to cross from the host either
        way: `device=` saves the intermediate CPU tensor and the second call, not the copy.

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
        The fix passes the move's device to the factory (`.cuda()` becomes `device="cuda"`, the
        current CUDA device either way; `.cuda(1)` becomes `device="cuda:1"`). `non_blocking`
        and `copy` are dropped: a fresh tensor has no pending copy to overlap and is a new
        tensor either way. Where the move also casts, `zeros`, `ones`, `empty`, `eye` and their
        `*_like` forms are created straight in the new dtype (every value they hold is exact
        in any dtype); every other factory is created on the device in its own dtype and cast
        after (`torch.tensor([0.1]).to(d, torch.float64)` becomes
        `torch.tensor([0.1], device=d).to(torch.float64)`: created in float64 it would hold
        0.1, not the float32 value 0.10000000149011612 the original computes).

        Safe for `zeros`, `ones`, `empty`, `full`, `eye`, `tensor`, `as_tensor` and the
        non-random `*_like` factories, and for `arange` in an explicit integer dtype: the
        values, dtype, device and aliasing are the same (`torch.as_tensor(array, device=d)`
        shares the array's memory exactly when `torch.as_tensor(array).to(d)` does: when `d` is
        the CPU). Unsafe: the random factories (on a GPU they draw from its generator, so the
        numbers differ from those the CPU generator gave), `arange` in a floating or unknown
        dtype, `linspace` and `logspace` (device kernels compute the values in floating point
        and may differ from the CPU's in the last bits), and factories given `requires_grad=`
        anything but `False` (`torch.zeros(3, requires_grad=True).cuda()` is a non-leaf copy of
        a CPU leaf; with `device=` the result is itself the leaf that receives `.grad`).
        No fix: factories taking `pin_memory`, `out` or `**kwargs`; moves with other arguments
        (`memory_format`, `*args`, a device index held in a variable: `.cuda(rank)`);
        `as_tensor(...).to(d, copy=True)` (a copy even when `d` is the CPU, where `device=`
        would alias the source); and where no string literal can be written (nested f-strings).
        """
    invalid = (
        Invalid(
            """
            import torch
            mask = torch.ones(4, 4).to(device)
            ids = torch.arange(10, dtype=torch.long).cuda()
            x = torch.zeros(3).to(device, torch.float16)
            y = torch.tensor(array).to(device=dev, non_blocking=True)
            label = f"{torch.zeros(1).cuda()}"
            """,
            lines=(2, 3, 4, 5, 6),
            fixed="""
            import torch
            mask = torch.ones(4, 4, device=device)
            ids = torch.arange(10, dtype=torch.long, device="cuda")
            x = torch.zeros(3, dtype=torch.float16, device=device)
            y = torch.tensor(array, device=dev)
            label = f"{torch.zeros(1, device='cuda')}"
            """,
        ),
        Invalid(
            # A cast in the same move: created in the factory's own dtype, then cast, so that
            # the data is rounded as before; zeros/ones/eye are exact in any dtype.
            """
            import torch as T
            from torch import full

            def make(n, device, arr, dtype):
                a = T.tensor(arr).to(device, T.float64)
                b = full((n,), 0.1).to(device=device, dtype=T.float16)
                c = T.as_tensor(arr).to(device, dtype)
                eye = T.eye(n, dtype=T.float64).to(device, T.float32)
                fill = full((n,), 7).cuda(1)
                inv_freq = 1.0 / (10000 ** (T.arange(0, n, 2, dtype=T.int64).to(device=device, dtype=T.float) / n))
                return a, b, c, eye, fill, inv_freq
            """,
            lines=(5, 6, 7, 8, 9, 10),
            fixed="""
            import torch as T
            from torch import full

            def make(n, device, arr, dtype):
                a = T.tensor(arr, device=device).to(T.float64)
                b = full((n,), 0.1, device=device).to(T.float16)
                c = T.as_tensor(arr, device=device).to(dtype)
                eye = T.eye(n, dtype=T.float32, device=device)
                fill = full((n,), 7, device="cuda:1")
                inv_freq = 1.0 / (10000 ** (T.arange(0, n, 2, dtype=T.int64, device=device).to(T.float) / n))
                return a, b, c, eye, fill, inv_freq
            """,
        ),
        Invalid(
            # Unsafe fixes: other random numbers on the GPU; device kernels for arange/linspace;
            # a leaf tensor instead of a copy.
            """
            import torch
            noise = torch.randn(2, 2).cuda()
            steps = torch.arange(0, 1, 0.1).to(device)
            grid = torch.linspace(0, 1, 5).to(device)
            w = torch.zeros(3, requires_grad=True).to(device)
            """,
            lines=(2, 3, 4, 5),
            fixed="""
            import torch
            noise = torch.randn(2, 2, device="cuda")
            steps = torch.arange(0, 1, 0.1, device=device)
            grid = torch.linspace(0, 1, 5, device=device)
            w = torch.zeros(3, requires_grad=True, device=device)
            """,
        ),
        Invalid(
            # A `*_like` of a tensor known to be on the CPU.
            """
            import torch

            def pad(n, device):
                host = torch.zeros(n)
                return torch.ones_like(host).to(device)
            """,
            lines=(5,),
            fixed="""
            import torch

            def pad(n, device):
                host = torch.zeros(n)
                return torch.ones_like(host, device=device)
            """,
        ),
        Invalid(
            # Reported without a fix: pinned memory, **kwargs, a memory format, a device
            # variable, a forced copy of an array that `device=` would alias on the CPU.
            """
            import torch
            a = torch.empty(8, pin_memory=True).to(device)
            c = torch.zeros(3, **options).to(device)
            d = torch.empty(1, 3, 4, 4).to(device, memory_format=torch.channels_last)
            e = torch.ones(2).cuda(rank)
            f = torch.as_tensor(array).to(device, copy=True)
            """,
            lines=(2, 3, 4, 5, 6),
        ),
    )
    valid = (
        Valid(
            # Python data is built into a tensor on the host whatever `device=` says: nothing to save.
            """
            import torch
            ids = torch.tensor([1, 2, 3]).to(device)
            scale = torch.tensor(0.5).cuda()
            sizes = [h, w]
            shape = torch.as_tensor(sizes).to(device)
            """
        ),
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
        Valid(
            # `*_like` creates where its source lives: these moves are no-ops or device-to-device.
            """
            import torch

            def causal_pad(cache, inputs, latents, device, dtype, s):
                cache = torch.cat([torch.zeros_like(cache).to(cache.device), cache], dim=2)
                noise = torch.randn_like(inputs).to(inputs.device)
                mask = torch.zeros_like(latents).to(device, dtype)
                ones = torch.ones_like(s).to(s.device)
                return cache, noise, mask, ones
            """
        ),
        Valid(
            # `torch.tensor(t)` of a tensor already on the device, or moved to its own device.
            """
            import torch

            def copy(t, device):
                on_gpu = torch.ones(3, device="cuda")
                a = torch.tensor(on_gpu).to(device)
                b = torch.tensor(t).to(t.device)
                return a, b
            """
        ),
        Valid(
            # Test code: its speed does not matter.
            """
            import pytest
            import torch

            def test_reduce(device):
                expected = torch.tensor([4.0, 6.0]).to(device)
                assert expected.sum() == 10
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
        factory_name = name[6:]
        # A CPU `generator=` makes creating on the CPU the way to get reproducible numbers.
        if keyword(factory, "device") is not None or keyword(factory, "generator") is not None:
            return
        if is_test_code(self.ctx.path, self.ctx.ancestors, self.ctx.scope):
            return  # a test's speed does not matter; its tensors are built the way it reads best
        if not self._created_on_cpu(factory, factory_name, move.device_node):
            return
        message = _FROM_DATA_MESSAGE if factory_name in _FROM_DATA else None
        self.report(node, message=message, fix=self._fix(node, factory, factory_name))

    def _created_on_cpu(
        self, factory: cst.Call, factory_name: str, device: cst.BaseExpression | None
    ) -> bool:
        """Whether the factory's result is (as far as the code shows) on the CPU, and the move is
        not to the device its source already has (`zeros_like(x).to(x.device)`: a no-op)."""
        args = positional(factory)
        source = (
            args[0].value if args and (factory_name in _FROM_DATA or factory_name.endswith("_like")) else None
        )
        if source is None:
            return True
        if factory_name in _FROM_DATA and self._python_data(source):
            return False  # built on the host either way: `device=` would save nothing
        if (
            isinstance(device, cst.Attribute)
            and device.attr.value == "device"
            and self.ctx.code_for(device.value) == self.ctx.code_for(source)
        ):
            return False
        where = flow.device_of(source, self.ctx)
        if factory_name.endswith("_like"):
            # Created where `source` lives: only a CPU source makes this a host-to-device copy.
            return where is not None and where.type == CPU
        # `torch.tensor(t)` of a tensor known to be on an accelerator copies it there.
        return where is None or where.type == CPU

    def _python_data(self, source: cst.BaseExpression) -> bool:
        """A list, tuple, number or comprehension (directly or through a name bound only to such):
        torch builds the tensor on the host whatever `device=` says, then copies it."""
        found = assigned_values(source, self.ctx.scope) if isinstance(source, cst.Name) else None
        values = found[0] if found is not None else [source]
        return all(isinstance(value, _PYTHON_DATA) for value in values)

    def _fix(self, call: cst.Call, factory: cst.Call, factory_name: str) -> Fix | None:
        if any(arg.star == "**" for arg in factory.args):
            return None
        if any(keyword(factory, name) is not None for name in _NO_FIX_FACTORY_KEYWORDS):
            return None
        target = self._move_arguments(call)
        if target is None:
            return None
        device, dtype, copy = target
        # `as_tensor(array).to(d, copy=True)` copies even when `d` is the CPU; `device=` would alias.
        if copy and factory_name == "as_tensor":
            return None
        fixed: cst.BaseExpression = with_keyword(factory, "device", device)
        if dtype is not None:
            if factory_name in _EXACT_IN_ANY_DTYPE:
                fixed = _with_dtype(factory, dtype)
                fixed = with_keyword(fixed, "device", device)
            else:
                # Create in the factory's own dtype, then cast: creating in the new dtype
                # rounds the data once, differently (`tensor([0.1])` cast to float64).
                fixed = cst.Call(func=cst.Attribute(value=fixed, attr=cst.Name("to")), args=[cst.Arg(dtype)])
        return Fix(
            _safety(factory, factory_name, self.ctx.scope), "Pass `device=` to the factory", {call: fixed}
        )

    def _move_arguments(
        self, call: cst.Call
    ) -> tuple[cst.BaseExpression, cst.BaseExpression | None, bool] | None:
        """(device, dtype, copy) of a `.to(...)`/`.cuda(...)` call, or None when it does more than that."""
        assert isinstance(call.func, cst.Attribute)
        if call.func.attr.value == "cuda":
            if all(arg.keyword is not None and arg.keyword.value == "non_blocking" for arg in call.args):
                literal = self.ctx.string("cuda", at=call)
            else:
                args = positional(call)
                if len(call.args) != 1 or len(args) != 1 or not isinstance(args[0].value, cst.Integer):
                    return None
                literal = self.ctx.string(f"cuda:{args[0].value.value}", at=call)
            return None if literal is None else (literal, None, False)
        if any(arg.star for arg in call.args):
            return None
        if any(arg.keyword is not None and arg.keyword.value not in _TO_KEYWORDS for arg in call.args):
            return None
        args = positional(call)
        device_arg = keyword(call, "device")
        device = device_arg.value if device_arg is not None else (args[0].value if args else None)
        if device is None or len(args) > 4 or (device_arg is not None and args):
            return None
        dtype_arg = keyword(call, "dtype")
        dtype = dtype_arg.value if dtype_arg is not None else None
        if len(args) > 1:
            if dtype is not None or not is_dtype(args[1].value, self.ctx.scope):
                return None
            dtype = args[1].value
        copy_arg = keyword(call, "copy")
        copy = args[3].value if len(args) > 3 else (copy_arg.value if copy_arg is not None else None)
        return device, dtype, copy is not None and not _is_false(copy)


def _with_dtype(factory: cst.Call, dtype: cst.BaseExpression) -> cst.Call:
    """`factory` creating in `dtype`: its own `dtype=` replaced, or one added."""
    given = keyword(factory, "dtype")
    if given is None:
        return with_keyword(factory, "dtype", dtype)
    return factory.with_changes(
        args=[arg.with_changes(value=dtype) if arg is given else arg for arg in factory.args]
    )


def _safety(factory: cst.Call, factory_name: str, scope: Scope) -> FixSafety:
    """Safe where the device-created tensor equals the moved one bit for bit, and is still not a leaf."""
    grad = keyword(factory, "requires_grad")
    if grad is not None and not _is_false(grad.value):
        return "unsafe"  # the result would become a leaf that receives `.grad`; the moved copy is not
    if factory_name in _RANDOM:
        return "unsafe"
    if factory_name in _DEVICE_ARITHMETIC:
        dtype = keyword(factory, "dtype")
        exact = factory_name == "arange" and dtype is not None and _integer_dtype(dtype.value, scope)
        return "safe" if exact else "unsafe"
    return "safe"


def _integer_dtype(node: cst.BaseExpression, scope: Scope) -> bool:
    name = resolve(node, scope)
    return name is not None and name.startswith("torch.") and name[6:] in _INTEGER_DTYPES


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"
