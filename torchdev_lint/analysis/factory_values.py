"""Which tensor factories take `device=`, and where creating on the device gives the values,
dtype and autograd status that creating on the CPU and moving gives.

Random factories draw from the target device's generator once given `device=` (the same
distribution, other numbers); `arange`/`linspace`/`logspace` are computed by device kernels in
floating point (the last bits may differ from the CPU's) except `arange` in an integer dtype;
a factory given `requires_grad=` makes a leaf on the device where the moved copy was not one.
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.kinds import TENSOR_FACTORIES
from torchdev_lint.analysis.scopes import Scope, resolve
from torchdev_lint.syntax import keyword

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
