"""Which tensor factories take `device=`, and where creating on the device gives the values,
dtype and autograd status that creating on the CPU and moving gives.

Random factories draw from the target device's generator once given `device=` (the same
distribution, other numbers); `arange`/`linspace`/`logspace` are computed by device kernels in
floating point (the last bits may differ from the CPU's) except `arange` in an integer dtype;
a factory given `requires_grad=` makes a leaf on the device where the moved copy was not one.
`created_on_device` writes the factory call that a fix passing `device=` puts in place of the move.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from torchdev_lint.analysis.devices import is_dtype
from torchdev_lint.analysis.kinds import TENSOR_FACTORIES
from torchdev_lint.analysis.scopes import Scope, resolve
from torchdev_lint.syntax import keyword, positional, with_keyword

# Factories that take `device=` (from_numpy, stack and cat do not).
DEVICE_FACTORIES = TENSOR_FACTORIES - {"from_numpy", "stack", "cat"}
# Every value they hold (0, 1, or none) is exact in any dtype: creating straight in
# the dtype a move casts to gives the tensor that casting after creation gives.
EXACT_IN_ANY_DTYPE = frozenset({"zeros", "ones", "empty", "eye", "zeros_like", "ones_like", "empty_like"})
# These draw from the target device's generator once given `device=`: the same
# distribution, other numbers than the CPU generator gave before the move.
_RANDOM = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like"})
# Computed by device kernels in floating point: the last bits may differ from the CPU's.
_DEVICE_ARITHMETIC = frozenset({"arange", "linspace", "logspace"})
# Integer dtypes: `arange` in one of them is exact integer arithmetic on every device.
_INTEGER_DTYPES = frozenset(
    {"int", "int8", "int16", "int32", "int64", "long", "short", "uint8", "uint16", "uint32", "uint64"}
)
# Factory arguments that make `device=` wrong or change semantics beyond placement.
_NO_FIX_FACTORY_KEYWORDS = frozenset({"pin_memory", "out"})
# `.to(device, dtype, non_blocking, copy)`: parameters a freshly created tensor can drop or keep.
_TO_KEYWORDS = frozenset({"device", "dtype", "non_blocking", "copy"})


def same_tensor_on_device(factory: cst.Call, factory_name: str, scope: Scope) -> bool:
    """Whether `torch.<factory_name>(..., device=d)` equals the factory's result moved to `d`
    bit for bit, and is still not a leaf."""
    grad = keyword(factory, "requires_grad")
    if grad is not None and not (isinstance(grad.value, cst.Name) and grad.value.value == "False"):
        return False  # the result would become a leaf that receives `.grad`; the moved copy is not
    if factory_name in _RANDOM:
        return False
    if factory_name in _DEVICE_ARITHMETIC:
        dtype = keyword(factory, "dtype")
        return factory_name == "arange" and dtype is not None and _integer_dtype(dtype.value, scope)
    return True


def _integer_dtype(node: cst.BaseExpression, scope: Scope) -> bool:
    name = resolve(node, scope)
    return name is not None and name.startswith("torch.") and name[6:] in _INTEGER_DTYPES


def created_on_device(
    move: cst.Call,
    factory: cst.Call,
    factory_name: str,
    scope: Scope,
    string: Callable[[str, cst.CSTNode], cst.SimpleString | None],
) -> cst.BaseExpression | None:
    """`factory` given the device (and dtype) `move` (its `.to()`/`.cuda()`) gives it, or None
    when the move does more or the factory's arguments rule `device=` out."""
    if any(arg.star == "**" for arg in factory.args):
        return None
    if any(keyword(factory, name) is not None for name in _NO_FIX_FACTORY_KEYWORDS):
        return None
    target = _move_arguments(move, scope, string)
    if target is None:
        return None
    device, dtype = target
    if dtype is None:
        return with_keyword(factory, "device", device)
    if factory_name in EXACT_IN_ANY_DTYPE:
        return with_keyword(_with_dtype(factory, dtype), "device", device)
    # Create in the factory's own dtype, then cast: creating in the new dtype
    # rounds the data once, differently (`tensor([0.1])` cast to float64).
    on_device = with_keyword(factory, "device", device)
    return cst.Call(func=cst.Attribute(value=on_device, attr=cst.Name("to")), args=[cst.Arg(dtype)])


def _move_arguments(
    call: cst.Call, scope: Scope, string: Callable[[str, cst.CSTNode], cst.SimpleString | None]
) -> tuple[cst.BaseExpression, cst.BaseExpression | None] | None:
    """(device, dtype) of a `.to(...)`/`.cuda(...)` call, or None when it does more than that.
    `string(value, at)` writes a string literal legal at `at` (`.cuda()` becomes `"cuda"`)."""
    assert isinstance(call.func, cst.Attribute)
    if call.func.attr.value == "cuda":
        if all(arg.keyword is not None and arg.keyword.value == "non_blocking" for arg in call.args):
            literal = string("cuda", call)
        else:
            args = positional(call)
            if len(call.args) != 1 or len(args) != 1 or not isinstance(args[0].value, cst.Integer):
                return None
            literal = string(f"cuda:{args[0].value.value}", call)
        return None if literal is None else (literal, None)
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
        if dtype is not None or not is_dtype(args[1].value, scope):
            return None
        dtype = args[1].value
    return device, dtype


def _with_dtype(factory: cst.Call, dtype: cst.BaseExpression) -> cst.Call:
    """`factory` creating in `dtype`: its own `dtype=` replaced, or one added."""
    given = keyword(factory, "dtype")
    if given is None:
        return with_keyword(factory, "dtype", dtype)
    return factory.with_changes(
        args=[arg.with_changes(value=dtype) if arg is given else arg for arg in factory.args]
    )
