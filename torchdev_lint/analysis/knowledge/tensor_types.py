"""Legacy typed tensor classes (`torch.FloatTensor`, `torch.cuda.LongTensor`, ...) and aliases of them.

Old code picks a tensor class once, often by a CUDA flag at module level
(`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`), and then
constructs and casts through the alias. Each class fixes a dtype and a device;
an alias chosen by a flag fixes the dtype (when both sides agree) but not the
device.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, resolve
from torchdev_lint.analysis.syntax.walk import first

# Class name prefix → the dtype attribute of torch it stands for.
LEGACY_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Byte": "uint8",
    "Char": "int8",
    "Short": "int16",
    "Int": "int32",
    "Long": "int64",
    "Bool": "bool",
}
_MAX_DEPTH = 8


@dataclass(frozen=True)
class LegacyType:
    """What a legacy class (or an alias of some) fixes: dtype and device, None where the choice varies."""

    dtype: str | None  # "float32", ... or None when the alternatives differ
    cuda: bool | None  # True: torch.cuda.*, False: CPU, None: chosen at run time
    chosen: cst.IfExp | None = None  # the conditional expression that picks between classes


# A legacy class whose dtype and device the code does not fix: `torch.Tensor` (the default dtype on
# the default device, which the program may change), an alias a function rebinds (`global Tensor`).
_NOT_FIXED = LegacyType(None, None)


def legacy_type_name(name: str | None) -> LegacyType | None:
    """`torch.cuda.FloatTensor` → float32 on CUDA; None for anything else."""
    if name is None or not name.endswith("Tensor"):
        return None
    if name.startswith("torch.cuda."):
        prefix, cuda = name[len("torch.cuda.") : -len("Tensor")], True
    elif name.startswith("torch."):
        prefix, cuda = name[len("torch.") : -len("Tensor")], False
    else:
        return None
    dtype = LEGACY_DTYPES.get(prefix)
    return None if dtype is None else LegacyType(dtype, cuda)


def legacy_type(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> LegacyType | None:
    """The legacy class an expression names: directly, through a plain alias, or through a
    name bound (in any scope it is visible from) only to legacy classes or conditional
    choices between them; not fixed where a function of the module may rebind the name
    (`global Tensor`: which class it holds is chosen at run time)."""
    kind = _named_type(node, scope, depth)
    if kind is not None and isinstance(node, cst.Name):
        bound = scope.lookup(node.value)
        if bound is not None and bound[0].kind == "module" and _rebound_globally(node.value, bound[0]):
            return _NOT_FIXED
    return kind


def _named_type(node: cst.BaseExpression, scope: Scope, depth: int) -> LegacyType | None:
    direct = legacy_type_name(resolve(node, scope))
    if direct is not None or depth > _MAX_DEPTH:
        return direct
    if isinstance(node, cst.IfExp):
        return _either(node, scope, depth)
    found = assigned_values(node, scope)
    return None if found is None else legacy_choice(*found, depth=depth + 1)


def _rebound_globally(name: str, module: Scope) -> bool:
    """Does a function of the module declare the name `global` (and so may rebind it)?"""
    return (
        first(module.node, lambda n: isinstance(n, cst.Global) and any(i.name.value == name for i in n.names))
        is not None
    )


def legacy_choice(values: list[cst.BaseExpression], scope: Scope, depth: int = 0) -> LegacyType | None:
    """What a name assigned `values` (all in `scope`) stands for, when each is a legacy class or a
    choice between them (`self.FT = torch.cuda.FloatTensor if cuda else torch.FloatTensor`)."""
    kinds = [legacy_type(value, scope, depth) for value in values]
    return _merge([k for k in kinds if k is not None], None) if kinds and None not in kinds else None


def _either(node: cst.IfExp, scope: Scope, depth: int) -> LegacyType | None:
    """`torch.cuda.FloatTensor if cuda else torch.FloatTensor`; one side may be `torch.Tensor`
    (the default tensor type: dtype and device not known) when the other is a legacy class."""
    body = legacy_type(node.body, scope, depth + 1)
    orelse = legacy_type(node.orelse, scope, depth + 1)
    if body is None and orelse is not None and resolve(node.body, scope) == "torch.Tensor":
        body = _NOT_FIXED
    if orelse is None and body is not None and resolve(node.orelse, scope) == "torch.Tensor":
        orelse = _NOT_FIXED
    if body is None or orelse is None:
        return None
    return _merge([body, orelse], node)


def _merge(kinds: list[LegacyType], chosen: cst.IfExp | None) -> LegacyType:
    dtypes = {k.dtype for k in kinds}
    devices = {k.cuda for k in kinds}
    picked = chosen or next((k.chosen for k in kinds if k.chosen is not None), None)
    return LegacyType(
        dtypes.pop() if len(dtypes) == 1 else None,
        devices.pop() if len(devices) == 1 else None,
        picked,
    )
