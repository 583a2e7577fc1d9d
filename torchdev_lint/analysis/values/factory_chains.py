"""A tensor factory whose result is cast, reshaped, or combined with Python numbers, before a move (TDL203).

`torch.zeros(n).long().cuda()`, `torch.arange(n, dtype=torch.int32).float().to(device)`,
`(torch.arange(n) + offset).cuda()`, `(torch.ones(n) * 0.5).to(d)`, `torch.arange(n).unsqueeze(0).to(d)`:
the tensor is made on the CPU, cast, reshaped or computed there, and copied; `device=` on the
factory makes it where it is used. A tensor operand (`torch.arange(n) + x`) is no such chain: it may live anywhere.

- `factory_chain(receiver, scope)`: the factory under a move's receiver, with the casts and
  arithmetic (`Step`s) between them, or None.
- `chain_difference(chain, scope)`: why computing the steps on the device may give other values
  than on the CPU (`Difference`), or None where they are the same bit for bit: a cast is the
  same conversion on every device; `+`, `-`, `*` of an integer, float32 or float64 tensor and a
  Python number are one exactly rounded operation (the number converted to the tensor's dtype
  the same way); `//` and `%` of an integer tensor by a non-zero integer literal are exact; a
  view or reshape keeps the values and, but for `expand` (a view sharing its elements where the
  move made a copy), the strides.
  Not so: `/` (a device divides by a number as a multiplication by its reciprocal), `**`, `//`
  and `%` of floats (other kernels), an integer `//`/`%` by what may be zero (the CPU raises, a
  device does not), arithmetic in half precision or an unknown dtype, and a cast of floats (or
  of an unknown dtype) to integers (infinities, NaN and values out of range convert to other
  integers on a device), except for factories whose values are exact in any dtype (`zeros`).
- `on_device(...)`: the move rewritten: the chain with `device=` on its factory, and `dtype=` in
  place of the casts where the factory's values are exact in any dtype (`zeros`, `ones`, `empty`,
  `eye`); `fix_risk`: what may change where that is not the same tensor bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import is_dtype
from torchdev_lint.analysis.syntax.python_numbers import NumberKind, number_kind
from torchdev_lint.analysis.syntax.scopes import Scope, module_reference, resolve
from torchdev_lint.analysis.values.factory_values import (
    DEVICE_FACTORIES,
    EXACT_IN_ANY_DTYPE,
    DeviceDifference,
    created_on_device,
    device_difference,
    move_arguments,
)
from torchdev_lint.syntax import comments, keyword, positional

# A cast method and the dtype it gives, spelled as `torch.<method>` writes it.
CAST_METHODS = {
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "char": "int8",
    "byte": "uint8",
    "bool": "bool",
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bfloat16": "bfloat16",
}
_CAST_SPELLING = {"char": "int8", "byte": "uint8"}  # `torch.char`/`torch.byte` do not exist
_CANONICAL = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32"}
_CANONICAL |= {"short": "int16", "cfloat": "complex64", "cdouble": "complex128"}
_INTEGERS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"})
# Where one IEEE operation rounds the same on every device (half and bfloat16 may be computed in
# float32 first, and differently, by the CPU and a device).
_EXACT_FLOATS = frozenset({"float32", "float64"})
_OPERATORS: dict[type[cst.BaseBinaryOp], str] = {
    cst.Add: "+",
    cst.Subtract: "-",
    cst.Multiply: "*",
    cst.Divide: "/",
    cst.FloorDivide: "//",
    cst.Modulo: "%",
    cst.Power: "**",
}
_DEFAULT_FLOAT = frozenset({"zeros", "ones", "empty", "eye", "rand", "randn", "linspace", "logspace"})
_INTEGER_FACTORIES = frozenset({"randint", "randperm"})
# Methods giving the same values in another shape or layout, bit for bit on any device. A move
# copies an `expand`ed view into memory of its own, where the view made on the device shares its
# elements (strides of 0: writing into it raises): that fix is unsafe ("expanded").
_SHAPE_METHODS = frozenset(
    {
        "view",
        "reshape",
        "unsqueeze",
        "squeeze",
        "flatten",
        "permute",
        "transpose",
        "t",
        "expand",
        "contiguous",
    }
)

# Why the steps may compute other values on the device: "division", "kernel" (`**`, `//` and
# `%` of floats), "zero-divisor" (an integer `//`/`%` by what may be 0), "precision", "integer-cast";
# or give another tensor than the move did: "expanded".
Difference = Literal["division", "kernel", "zero-divisor", "precision", "integer-cast", "expanded"]
# What may change where a fix passing `device=` is unsafe (TDL203's "Fix safety"), by the reason.
_RISKS: dict[DeviceDifference | Difference, str] = {
    "random": "the numbers are drawn from the device's generator, not the CPU's: other random values",
    "arithmetic": "the device computes the values in floating point: the last bits may differ from the CPU's",
    "leaf": "with `requires_grad=` the result is now the leaf that receives `.grad`, not a copy of a CPU leaf",
    "division": "the device divides by a number as a multiplication by its reciprocal: the last bits may differ",
    "kernel": "the device computes `**`, `//` or `%` with its own kernels: the last bits may differ from the CPU's",
    "zero-divisor": "an integer division by zero raises on the CPU but gives a number on the device",
    "precision": "arithmetic in half precision or in a dtype not known here may round differently on the device",
    "expanded": (
        "`expand` made on the device stays a view whose elements share memory (writing into it raises); "
        "the moved tensor was a copy with memory of its own"
    ),
    "integer-cast": (
        "a cast of floats to integers is done on the device: infinities, NaN and values out of range "
        "convert to other integers there than on the CPU"
    ),
}


@dataclass(frozen=True)
class Step:
    """A cast (`node` a call: `.long()`, `.to(torch.half)`, `.type(torch.int32)`; `dtype` the dtype
    it gives where known) or arithmetic with a Python number (`node` the operation, `number` the
    other operand, `kind` what number it is)."""

    node: cst.Call | cst.BinaryOperation
    dtype: str | None = None
    number: cst.BaseExpression | None = None
    kind: NumberKind | None = None
    shape: bool = False  # a view or reshape (`.view(-1, 4)`, `.unsqueeze(0)`): the same values anywhere


@dataclass(frozen=True)
class Chain:
    factory: cst.Call
    name: str  # the factory's name in torch: `zeros`
    steps: tuple[Step, ...]  # from the factory outwards; empty where the factory is moved directly


def factory_chain(receiver: cst.BaseExpression, scope: Scope) -> Chain | None:
    """The torch factory under `receiver` and the steps between (see the module doc), or None;
    None also where `device=` on the factory would change nothing: `as_tensor` (it aliases an
    array or tensor and builds Python data on the host: the same host tensor, the same copy),
    a factory already given `device=`, or drawing from a `generator=` (a CPU generator on
    purpose: reproducible numbers whatever the device)."""
    steps: list[Step] = []
    node = receiver
    while True:
        if isinstance(node, cst.Call):
            name = resolve(node.func, scope)
            if name is not None and name.startswith("torch.") and name[6:] in DEVICE_FACTORIES:
                if name == "torch.as_tensor" or keyword(node, "device") or keyword(node, "generator"):
                    return None
                return Chain(node, name[6:], tuple(reversed(steps)))
            cast = _cast(node, scope) or _reshape(node)
            if cast is None:
                return None
            steps.append(cast)
            assert isinstance(node.func, cst.Attribute)
            node = node.func.value
        elif isinstance(node, cst.BinaryOperation) and type(node.operator) in _OPERATORS:
            right = number_kind(node.right, scope)
            left = number_kind(node.left, scope) if right is None else None
            if right is None and left is None:
                return None
            steps.append(Step(node, number=node.right if right else node.left, kind=right or left))
            node = node.left if right else node.right
        else:
            return None


def _reshape(call: cst.Call) -> Step | None:
    """`.view(-1, 4)`, `.unsqueeze(0)`, `.t()`: a step that changes the shape, not the values."""
    return Step(call, shape=True) if _method(call) in _SHAPE_METHODS else None


def _method(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _cast(call: cst.Call, scope: Scope) -> Step | None:
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None
    method = func.attr.value
    if method in CAST_METHODS:
        return Step(call, dtype=CAST_METHODS[method]) if not call.args else None
    if method not in ("to", "type") or len(call.args) != 1 or call.args[0].star:
        return None
    arg = call.args[0]
    if arg.keyword is not None and (method == "type" or arg.keyword.value != "dtype"):
        return None
    if not is_dtype(arg.value, scope):
        return None
    name = resolve(arg.value, scope)
    dtype = name[6:] if name is not None and name.startswith("torch.") else None
    if method == "type" and dtype is None:
        return None  # `.type(x.dtype)`: fine, but `.type(t)` of a tensor type is a move (TDL307)
    return Step(call, dtype=None if dtype is None else _CANONICAL.get(dtype, dtype))


def chain_difference(chain: Chain, scope: Scope) -> Difference | None:
    """Why the chain's steps computed on the device may differ from the CPU's (see the module doc)."""
    dtype = _factory_dtype(chain, scope)
    for step in chain.steps:
        if step.shape:
            if isinstance(step.node, cst.Call) and _method(step.node) == "expand":
                return "expanded"
            continue
        if isinstance(step.node, cst.Call):
            if (
                step.dtype in _INTEGERS - {"bool"}
                and dtype not in _INTEGERS
                and chain.name not in EXACT_IN_ANY_DTYPE
            ):
                return "integer-cast"  # `torch.full((n,), inf).long()`: platform-defined for inf, NaN
            dtype = step.dtype
            continue
        operator = _OPERATORS[type(step.node.operator)]
        integer = dtype in _INTEGERS
        if dtype is None or not (integer or dtype in _EXACT_FLOATS):
            return "precision"
        if operator == "/":
            return "division"
        if operator == "**" or (operator in ("//", "%") and not integer):
            return "kernel"
        if operator in ("//", "%") and not (step.number is step.node.right and _nonzero_integer(step.number)):
            return "zero-divisor"
        if integer and step.kind != "int":
            dtype = "float32" if step.kind == "float" else None
        elif integer and dtype == "bool":
            dtype = "int64"
    return None


def _factory_dtype(chain: Chain, scope: Scope) -> str | None:
    """The dtype the factory makes, where the call shows it (default float: float32)."""
    given = keyword(chain.factory, "dtype")
    if given is not None:
        name = resolve(given.value, scope)
        return _CANONICAL.get(name[6:], name[6:]) if name is not None and name.startswith("torch.") else None
    if chain.name in _DEFAULT_FLOAT:
        return "float32"
    if chain.name in _INTEGER_FACTORIES:
        return "int64"
    if chain.name == "full":
        args = positional(chain.factory)
        kind = number_kind(args[1].value, scope) if len(args) > 1 else None
        fill = args[1].value if len(args) > 1 else None
        if isinstance(fill, cst.Name) and fill.value in ("True", "False"):
            return "bool"
        return {"int": "int64", "float": "float32"}.get(kind or "")
    return None


def _nonzero_integer(node: cst.BaseExpression | None) -> bool:
    number = node.expression if isinstance(node, cst.UnaryOperation) else node
    return isinstance(number, cst.Integer) and int(number.evaluated_value) != 0


def fix_risk(chain: Chain, scope: Scope) -> str | None:
    """What may change where `device=` goes on the chain's factory (the factory's own
    `factory_values.device_difference`, else the steps' `chain_difference`), or None where nothing can."""
    difference = device_difference(chain.factory, chain.name, scope) or chain_difference(chain, scope)
    return None if difference is None else _RISKS[difference]


def on_device(
    move: cst.Call,
    chain: Chain,
    scope: Scope,
    string: Callable[[str, cst.CSTNode], cst.SimpleString | None],
    parent: cst.CSTNode | None,
) -> cst.BaseExpression | None:
    """`move` rewritten with `device=` on the chain's factory (`parent`: the move's parent)."""
    if not chain.steps:
        return created_on_device(move, chain.factory, chain.name, scope, string)
    return chain_on_device(move, chain, scope, string, stands_alone(move, parent))


def chain_on_device(
    move: cst.Call,
    chain: Chain,
    scope: Scope,
    string: Callable[[str, cst.CSTNode], cst.SimpleString | None],
    bare: bool,
) -> cst.BaseExpression | None:
    """`move` (a `.to()`/`.cuda()` of the chain) rewritten: the factory given the move's device,
    the casts folded into `dtype=` where the factory's values are exact in any dtype (see the
    module doc), else the steps kept after it; the move's own dtype cast last. `bare`: the
    move stands where its receiver's parentheses are not needed (an assignment's value, an
    argument). None where the move does more or the factory takes no `device=`."""
    target = move_arguments(move, scope, string)
    if target is None:
        return None
    device, dtype = target
    fixed = _folded(chain, device, dtype, scope, string) if chain.name in EXACT_IN_ANY_DTYPE else None
    if fixed is None or comments(fixed) != comments(move):
        fixed = _kept(chain, device, dtype, scope, string, bare)
    if fixed is None or comments(fixed) != comments(move):
        return None
    return fixed.with_changes(lpar=[*move.lpar, *fixed.lpar], rpar=[*fixed.rpar, *move.rpar])


def _folded(
    chain: Chain,
    device: cst.BaseExpression,
    dtype: cst.BaseExpression | None,
    scope: Scope,
    string: Callable[[str, cst.CSTNode], cst.SimpleString | None],
) -> cst.BaseExpression | None:
    """`torch.zeros(n).long().cuda()` as `torch.zeros(n, dtype=torch.long, device="cuda")`."""
    if any(isinstance(step.node, cst.BinaryOperation) or step.shape for step in chain.steps):
        return None
    if dtype is None:
        last = chain.steps[-1].node
        assert isinstance(last, cst.Call) and isinstance(last.func, cst.Attribute)
        if last.args:
            dtype = last.args[0].value
        else:
            torch = module_reference(scope, "torch")
            if torch is None:
                return None
            method = last.func.attr.value
            dtype = cst.Attribute(value=torch, attr=cst.Name(_CAST_SPELLING.get(method, method)))
    keywords = [cst.Arg(device, keyword=cst.Name("device")), cst.Arg(dtype, keyword=cst.Name("dtype"))]
    move = cst.Call(func=cst.Attribute(value=chain.factory, attr=cst.Name("to")), args=keywords)
    return created_on_device(move, chain.factory, chain.name, scope, string)


def _kept(
    chain: Chain,
    device: cst.BaseExpression,
    dtype: cst.BaseExpression | None,
    scope: Scope,
    string: Callable[[str, cst.CSTNode], cst.SimpleString | None],
    bare: bool,
) -> cst.BaseExpression | None:
    """`(torch.arange(n, dtype=torch.long) + 1).cuda()` as `torch.arange(n, dtype=torch.long, device="cuda") + 1`."""
    move = cst.Call(
        func=cst.Attribute(value=chain.factory, attr=cst.Name("to")),
        args=[cst.Arg(device, keyword=cst.Name("device"))],
    )
    current: cst.BaseExpression | None = created_on_device(move, chain.factory, chain.name, scope, string)
    previous: cst.BaseExpression = chain.factory
    for step in chain.steps:
        if current is None:
            return None
        node = step.node
        if isinstance(node, cst.Call):
            assert isinstance(node.func, cst.Attribute)
            current = node.with_changes(func=node.func.with_changes(value=current))
        elif node.left is previous:
            current = node.with_changes(left=current)
        else:
            current = node.with_changes(right=current)
        previous = node
    if current is None:
        return None
    if dtype is not None:
        return cst.Call(func=cst.Attribute(value=current, attr=cst.Name("to")), args=[cst.Arg(dtype)])
    if bare and isinstance(current, cst.BinaryOperation):
        return current.with_changes(lpar=[], rpar=[])
    return current


def stands_alone(move: cst.Call, parent: cst.CSTNode | None) -> bool:
    """Whether `move` is the whole value of an assignment, a `return` or an argument (a list, tuple or
    dict element): no operator binds around it, so its receiver needs no parentheses of its own."""
    if isinstance(parent, cst.Arg):
        return not parent.star
    if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.Return, cst.Element)):
        return getattr(parent, "value", None) is move
    return isinstance(parent, cst.DictElement)
