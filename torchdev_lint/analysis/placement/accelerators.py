"""Can a move's target be Apple's MPS? Fixes that are safe on CUDA and the CPU may not be there.

A non-blocking host-to-MPS copy has open data-corruption reports in PyTorch, so adding
`non_blocking=True` (TDL205) is safe only where the target is proven not to be MPS: `.cuda()`,
a literal CUDA or CPU device (`"cuda:1"`, `torch.device("cpu")`), or a name whose every
assignment in reach is one of these or a choice between them
(`torch.device("cuda" if torch.cuda.is_available() else "cpu")`). Anything else may be MPS: a
device parameter (`pyod`'s users pass `"mps"`), an attribute, a helper's result (a project's
`setup_device()` returning `"mps"` on a Mac), `torch.accelerator.current_accelerator()`.
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import literal_device
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, resolve

_MAX_DEPTH = 4  # names assigned from names followed (`device = dev`, `dev = "cuda"`)


def may_be_mps(device: cst.BaseExpression | None, scope: Scope, depth: int = 0) -> bool:
    """Can the move to `device` (None: `.cuda()`) target MPS?"""
    if device is None:
        return False
    literal = literal_device(device)
    if literal is not None:
        return literal.type == "mps"
    if isinstance(device, cst.IfExp):
        return may_be_mps(device.body, scope, depth) or may_be_mps(device.orelse, scope, depth)
    if isinstance(device, cst.Call) and resolve(device.func, scope) == "torch.device" and device.args:
        return may_be_mps(device.args[0].value, scope, depth)
    found = assigned_values(device, scope) if depth < _MAX_DEPTH else None
    if found is None:
        return True
    values, owner = found
    return any(may_be_mps(value, owner, depth + 1) for value in values)
