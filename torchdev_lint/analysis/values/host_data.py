"""Where a tensor factory's result lives when its source is host data.

`factory_creates_on_cpu` tells whether `torch.tensor(src)` or `torch.*_like(src)` (or a
factory with no source) makes its tensor on the CPU, as far as the code shows: a
`*_like` is created where its source lives, `torch.tensor` copies a NumPy array or a
CPU tensor once more on the host. `is_numpy_array` recognises `np.zeros(...)`,
`t.numpy()` and names bound only to such.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.knowledge.library_models import host_module
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, resolve
from torchdev_lint.analysis.values import flow
from torchdev_lint.syntax import positional

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


def factory_creates_on_cpu(
    factory: cst.Call, factory_name: str, device: cst.BaseExpression | None, ctx: FileContext
) -> bool:
    """Whether `torch.<factory_name>(...)`'s result is (as far as the code shows) on the CPU,
    and a move to `device` is not to the device its source already has
    (`zeros_like(x).to(x.device)`: a no-op)."""
    args = positional(factory)
    source = args[0].value if args and (factory_name == "tensor" or factory_name.endswith("_like")) else None
    if source is None:
        return True
    if (
        isinstance(device, cst.Attribute)
        and device.attr.value == "device"
        and ctx.code_for(device.value) == ctx.code_for(source)
    ):
        return False
    where = flow.device_of(source, ctx)
    if factory_name.endswith("_like"):
        # Created where `source` lives: only a CPU source makes this a host-to-device copy.
        return where is not None and where.type == "cpu"
    # `torch.tensor` copies an array or a tensor once more on the host before the move;
    # Python data (a list, a number, a name of unknown value) is built on the host either way.
    return (where is not None and where.type == "cpu") or is_numpy_array(source, ctx.scope)


def is_numpy_array(source: cst.BaseExpression, scope: Scope) -> bool:
    """`np.zeros(...)`, `t.numpy()`, or a name bound only to such."""
    found = assigned_values(source, scope) if isinstance(source, cst.Name) else None
    values = found[0] if found is not None else [source]
    return all(
        isinstance(value, cst.Call)
        and (
            host_module(resolve(value.func, scope) or "")
            or (isinstance(value.func, cst.Attribute) and value.func.attr.value == "numpy")
        )
        for value in values
    )
