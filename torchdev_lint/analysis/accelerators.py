"""Can a move's target be Apple's MPS? Fixes that are safe on CUDA and the CPU may not be there.

A non-blocking host-to-MPS copy has open data-corruption reports in PyTorch, so adding
`non_blocking=True` (TDL205) is safe only where the target cannot be MPS. The evidence read
here: the target names MPS itself (`"mps"`, `torch.device("mps")`), or is not a literal CUDA/CPU
device and its file shows MPS can be chosen: an `"mps"` string anywhere in it (a choice
`"mps" if torch.backends.mps.is_available() else ...`, a `--device` help text listing it), a use
of `torch.backends.mps`/`torch.mps`, or the device-generic accelerator API
(`torch.accelerator.current_accelerator()`, `torch.get_default_device()`), which answers MPS on
a Mac. A file with none of these moves to what it names (CUDA, the CPU) or to what its caller
passes; a caller in another file choosing MPS is not seen (documented in TDL205's fix safety).
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.devices import literal_device
from torchdev_lint.analysis.scopes import Scope, resolve
from torchdev_lint.analysis.walk import first

# The device-generic APIs that pick MPS where it is the machine's accelerator.
GENERIC_DEVICE_CALLS = frozenset(
    {
        "torch.accelerator.current_accelerator",
        "torch.get_default_device",
        "torch._C._get_accelerator",
    }
)
_MPS_MODULES = ("torch.backends.mps", "torch.mps")
_CACHE = "_mps_chosen"


def may_be_mps(device: cst.BaseExpression | None, scope: Scope) -> bool:
    """Can the move to `device` (None: `.cuda()`) target MPS?"""
    if device is None:
        return False
    literal = literal_device(device)
    if literal is not None:
        return literal.type == "mps"
    if isinstance(device, cst.Call) and resolve(device.func, scope) == "torch.device" and device.args:
        return may_be_mps(device.args[0].value, scope)
    return file_chooses_mps(scope)


def file_chooses_mps(scope: Scope) -> bool:
    """Does the file of `scope` show that MPS can be chosen (see the module docstring)?"""
    module = scope.module
    cache: dict[str, bool] = module.__dict__.setdefault(_CACHE, {})
    if "found" not in cache:
        cache["found"] = first(module.node, lambda node: _names_mps(node, module)) is not None
    return cache["found"]


def _names_mps(node: cst.CSTNode, scope: Scope) -> bool:
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        words = text.lower().replace(",", " ").split() if isinstance(text, str) else []
        return any(word == "mps" or word.startswith("mps:") for word in words)
    if isinstance(node, cst.Attribute):
        name = resolve(node, scope)
        return name is not None and (
            name in GENERIC_DEVICE_CALLS or any(name.startswith(m) for m in _MPS_MODULES)
        )
    return False
