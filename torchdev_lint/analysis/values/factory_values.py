"""Which tensor factories take `device=`, and where creating on the device gives the values,
dtype and autograd status that creating on the CPU and moving gives.

Random factories draw from the target device's generator once given `device=` (the same
distribution, other numbers); `arange`/`linspace`/`logspace` are computed by device kernels in
floating point (the last bits may differ from the CPU's) except `arange` in an integer dtype;
a factory given `requires_grad=` makes a leaf on the device where the moved copy was not one.
`device_difference` says which of these applies to a factory call. `created_on_device` writes the
factory call that a fix passing `device=` puts in place of the move; `filled` folds a `.zero_()` or
`.fill_(<number>)` into the factory; `already_as_moved` tells a move that asks for what the
factory already gave (a no-op).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import is_dtype
from torchdev_lint.analysis.syntax.reaching_bindings import (
    assigned_between,
    parents_along,
    reaching_assignment,
)
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, last_name, resolve
from torchdev_lint.analysis.syntax.walk import children, first
from torchdev_lint.analysis.values.kinds import TENSOR_FACTORIES, is_tensor_factory_call
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
# `.cuda()`/`.cpu()`/`.half()`/`.float()` without arguments: the factory keyword giving what they ask.
_IMPLIED = {
    "cuda": ("device", frozenset({"cuda"})),
    "cpu": ("device", frozenset({"cpu"})),
    "half": ("dtype", frozenset({"torch.half", "torch.float16"})),
    "float": ("dtype", frozenset({"torch.float", "torch.float32"})),
}
# `.to(device, dtype, non_blocking, copy)`: parameters a freshly created tensor can drop or keep.
_TO_KEYWORDS = frozenset({"device", "dtype", "non_blocking", "copy"})
# Names of tensors kept on a device (`x_gpu`, `feats_dev`): `.to(x_gpu)` takes its device and dtype.
_TENSOR_ON_DEVICE = re.compile(r"^\w+_(gpu|dev|cuda)s?$", re.IGNORECASE)


# Why `torch.<factory>(..., device=d)` may differ from the factory's result moved to `d`.
DeviceDifference = Literal["leaf", "random", "arithmetic"]


def device_difference(factory: cst.Call, factory_name: str, scope: Scope) -> DeviceDifference | None:
    """Why `torch.<factory_name>(..., device=d)` may differ from the factory's result moved to
    `d`, or None where it is the same bit for bit and still not a leaf: `"leaf"` (given
    `requires_grad=`, it becomes the leaf that receives `.grad`), `"random"` (drawn from the
    device's generator) or `"arithmetic"` (computed by device kernels in floating point)."""
    grad = keyword(factory, "requires_grad")
    if grad is not None and not (isinstance(grad.value, cst.Name) and grad.value.value == "False"):
        return "leaf"  # the result would become a leaf that receives `.grad`; the moved copy is not
    if factory_name in _RANDOM:
        return "random"
    if factory_name in _DEVICE_ARITHMETIC:
        dtype = keyword(factory, "dtype")
        exact = factory_name == "arange" and dtype is not None and _integer_dtype(dtype.value, scope)
        return None if exact else "arithmetic"
    return None


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
    target = move_arguments(move, scope, string)
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


def moves_nothing(move: cst.Call, path: Sequence[cst.CSTNode], scope: Scope) -> bool:
    """Whether `move`, a discarded `x.to(...)`/`x.cuda()`... (`path`: its ancestors, root first),
    asks for what `x` already has by construction: the assignment reaching it is a factory call
    whose `dtype=`/`device=` give it (`already_as_moved`), and nothing assigns to `x`, or to the
    names those read, in between (an in-place `x.masked_fill_(...)` may come between)."""
    assert isinstance(move.func, cst.Attribute)
    receiver = move.func.value
    if not isinstance(receiver, cst.Name):
        return False
    parent = parents_along([*path, move, move.func, receiver])
    assignment = reaching_assignment(receiver, parent)
    if assignment is None:
        return False
    factory = assignment.value
    if factory is None or not is_tensor_factory_call(factory, scope):
        return False
    if (resolve(factory.func, scope) or "")[6:] not in DEVICE_FACTORIES:
        return False
    values = already_as_moved(move, factory, scope)
    if values is None:
        return False
    roots, stack = {receiver.value}, list[cst.CSTNode](values)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            roots.add(node.value)
        stack.extend(children(node))
    return not assigned_between(assignment, move, roots, parent)


def already_as_moved(move: cst.Call, factory: cst.Call, scope: Scope) -> list[cst.BaseExpression] | None:
    """The factory's `dtype=`/`device=` values when they give all that the move (`.to(...)`,
    `.cuda()`...) on its result asks for, so the move changes nothing; None otherwise.

    `.to(...)` needs each argument to be the same code as the factory's keyword of that role
    (`.to(q.dtype)` for `dtype=q.dtype`, `.to(q.device, q.dtype)` needs both), and no call in
    it; `.cuda()`, `.cpu()`, `.half()` and `.float()` need `device="cuda"`, `device="cpu"`,
    `dtype=torch.float16` or `dtype=torch.float32`. Any other argument (`non_blocking=`,
    `copy=`, `memory_format=`) does more. Whether the names read mean the same at both places
    is the caller's question: the values returned hold them.
    """
    assert isinstance(move.func, cst.Attribute)
    method = move.func.attr.value
    if method != "to":
        if move.args or method not in _IMPLIED:
            return None
        role, wanted = _IMPLIED[method]
        given = keyword(factory, role)
        if given is None:
            return None
        value = given.value
        text = value.evaluated_value if isinstance(value, cst.SimpleString) else resolve(value, scope)
        return [value] if text in wanted else None
    if any(arg.star for arg in move.args):
        return None
    args = positional(move)
    if not move.args or len(args) > 2:
        return None
    if len(args) == 2:
        roles = ["device", "dtype"]
    else:  # `.to(x)`: a device or a dtype, whichever of the factory's it is
        roles = ["dtype" if _same(arg.value, keyword(factory, "dtype")) else "device" for arg in args]
    roles += [arg.keyword.value for arg in move.args if arg.keyword is not None]
    if any(role not in ("device", "dtype") for role in roles):
        return None
    values = [arg.value for arg in move.args]
    if not all(_same(value, keyword(factory, role)) for value, role in zip(values, roles, strict=True)):
        return None
    if any(first(value, lambda node: isinstance(node, cst.Call)) is not None for value in values):
        return None  # a call may give something else the second time
    return values


def _same(value: cst.BaseExpression, given: cst.Arg | None) -> bool:
    return given is not None and value.deep_equals(given.value)


def move_arguments(
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
            literal = string(f"cuda:{args[0].value.evaluated_value}", call)  # `0x1` is `cuda:1`
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
    if device_arg is None and _maybe_tensor(device):
        return None  # `.to(feats_gpu)`: a tensor's device and dtype, not a device to write as `device=`
    dtype_arg = keyword(call, "dtype")
    dtype = dtype_arg.value if dtype_arg is not None else None
    if len(args) > 1:
        if dtype is not None or not is_dtype(args[1].value, scope):
            return None
        dtype = args[1].value
    return device, dtype


def _maybe_tensor(node: cst.BaseExpression) -> bool:
    """A name that ends like a tensor kept on a device (`x_gpu`, `feats_dev`), not a device's own
    (`device`, `args.gpu`, `cuda_device`, `dev`)."""
    last = last_name(node)
    return last is not None and _TENSOR_ON_DEVICE.match(last) is not None


def _with_dtype(factory: cst.Call, dtype: cst.BaseExpression) -> cst.Call:
    """`factory` creating in `dtype`: its own `dtype=` replaced, or one added."""
    given = keyword(factory, "dtype")
    if given is None:
        return with_keyword(factory, "dtype", dtype)
    return factory.with_changes(
        args=[arg.with_changes(value=dtype) if arg is given else arg for arg in factory.args]
    )


def filled(factory: cst.Call, init: cst.Call) -> cst.Call | None:
    """`torch.empty(<sizes>, **options)` (`factory`, its sizes positional) initialised by `init`,
    a `.zero_()` or `.fill_(<number literal>)` on its result, as one factory call giving the
    same tensor: `torch.zeros(<sizes>, **options)` for `.zero_()` and `.fill_(0)` (`0.0`, not
    `-0.0`, whose sign bit `zeros` would lose), else `torch.full((<sizes>), <number>, **options)`
    (torch's `full` is `empty(...).fill_(value)`, so the number is cast to the dtype as before).
    None for any other `init`: a value that is a tensor or a name may be one on another device."""
    assert isinstance(factory.func, cst.Attribute) and isinstance(init.func, cst.Attribute)
    method = init.func.attr.value
    if method == "zero_" and not init.args:
        return factory.with_changes(func=factory.func.with_changes(attr=cst.Name("zeros")))
    if method != "fill_" or len(init.args) != 1 or init.args[0].keyword is not None or init.args[0].star:
        return None
    value = init.args[0].value
    number = value.expression if isinstance(value, cst.UnaryOperation) else value
    if isinstance(value, cst.UnaryOperation) and not isinstance(value.operator, (cst.Minus, cst.Plus)):
        return None
    if not isinstance(number, (cst.Integer, cst.Float)) or number.lpar:
        return None
    if number is value and number.evaluated_value == 0:
        return factory.with_changes(func=factory.func.with_changes(attr=cst.Name("zeros")))
    sizes = [arg for arg in factory.args if arg.keyword is None]
    options = [arg for arg in factory.args if arg.keyword is not None]
    if not sizes or any(arg.star for arg in sizes):
        return None
    last = sizes[-1]
    one = len(sizes) == 1  # `(n,)`: a tuple of one needs its comma
    elements = [cst.Element(arg.value, comma=arg.comma) for arg in sizes[:-1]]
    elements.append(cst.Element(last.value, comma=cst.Comma() if one else cst.MaybeSentinel.DEFAULT))
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    shape = cst.Arg(cst.Tuple(elements), comma=comma)
    fill = cst.Arg(value.deep_clone(), comma=comma if options else cst.MaybeSentinel.DEFAULT)
    return factory.with_changes(
        func=factory.func.with_changes(attr=cst.Name("full")), args=[shape, fill, *options]
    )


def unplaced_factory(made: cst.BaseExpression, scope: Scope) -> cst.Call | None:
    """The factory call without `device=` (one that takes it) that made `made`: `made` itself, or
    the one value its name is given in `scope`, the unit where it is used."""
    if isinstance(made, cst.Name):
        assigned = assigned_values(made, scope)
        if assigned is None or assigned[1] is not scope or len(assigned[0]) != 1:
            return None
        made = assigned[0][0]
    if not isinstance(made, cst.Call) or keyword(made, "device") is not None:
        return None
    name = resolve(made.func, scope)
    return made if name is not None and name.startswith("torch.") and name[6:] in DEVICE_FACTORIES else None
