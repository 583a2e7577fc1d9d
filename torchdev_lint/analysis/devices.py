"""What an expression says about devices: is this call a move, and to where?

A syntactic answer, by backend name (`CPU`, `CUDA`, `VARIABLE` for a device
held in a variable), for rules that judge a call where it stands. The device
flow's answer (`flow.device_of`: where a value lives after the code before
it ran, as a `flow_values.Device`) is the semantic one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from torchdev_lint.analysis.scopes import Scope, resolve
from torchdev_lint.syntax import keyword

CPU = "cpu"
CUDA = "cuda"
# A device held in a variable (`device`, `args.device`, `x.device`): its value
# is unknown statically, but code that moves data to it targets an accelerator.
VARIABLE = "variable"

DTYPES = frozenset(
    """float float16 float32 float64 half double bfloat16 int int8 int16 int32 int64 uint8
    uint16 uint32 uint64 long short bool complex64 complex128 cfloat cdouble chalf
    float8_e4m3fn float8_e5m2 qint8 quint8 qint32""".split()
)
_DEVICE_NAME = re.compile(r"(^|_)(device|dev|gpu|gpu_id|rank|local_rank)s?($|_)", re.IGNORECASE)
_BACKENDS = {"cpu": CPU, "cuda": CUDA, "mps": "mps", "xpu": "xpu", "meta": "meta", "hpu": "hpu"}


@dataclass(frozen=True)
class Move:
    """A `.to(...)`, `.cuda()` or `.cpu()` call: what moves and where."""

    call: cst.Call
    receiver: cst.BaseExpression
    device: str  # CPU, CUDA, VARIABLE or another backend name
    device_node: cst.BaseExpression | None  # the argument naming the device

    @property
    def to_accelerator(self) -> bool:
        """A host-to-device move: the target is not known to be the CPU."""
        return self.device != CPU


def is_dtype(node: cst.BaseExpression, scope: Scope) -> bool:
    """`torch.float16`, `dtype`, `x.dtype`, `batch["image"].dtype`."""
    name = resolve(node, scope)
    if name is not None and name.startswith("torch.") and name[6:] in DTYPES:
        return True
    last = _last_name(node)
    return last is not None and "dtype" in last.lower()


def _last_name(node: cst.BaseExpression) -> str | None:
    """The name an expression ends in: `dtype` for `batch["image"].dtype`, `device` for `device`."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return node.value if isinstance(node, cst.Name) else None


def _names_device(node: cst.BaseExpression) -> bool:
    """A variable that holds a device: `device`, `args.device`, and a tensor's or module's
    `.device` reached through subscripts or calls (`x[0].device`, `batch["image"].device`,
    `next(model.parameters()).device`); also an element of a device list (`devices[rank]`)."""
    if isinstance(node, cst.Subscript):
        node = node.value
    last = _last_name(node)
    return last is not None and bool(_DEVICE_NAME.search(last))


def literal_device(node: cst.BaseExpression) -> str | None:
    """`"cuda:1"` → CUDA, `"cpu"` → CPU, `0` → CUDA (an ordinal names a GPU)."""
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        if isinstance(text, bytes):
            return None
        return _BACKENDS.get(text.split(":", 1)[0].strip())
    if isinstance(node, cst.Integer):
        return CUDA
    return None


def is_cuda_literal(node: cst.BaseExpression) -> bool:
    """`"cuda"`, `"cuda:1"`: a string literal naming CUDA."""
    return isinstance(node, cst.SimpleString) and literal_device(node) == CUDA


def device_argument(node: cst.BaseExpression, scope: Scope) -> str | None:
    """The device an expression used as a device argument designates, if it is one."""
    literal = literal_device(node)
    if literal is not None:
        return literal
    if isinstance(node, cst.Call) and resolve(node.func, scope) == "torch.device":
        if not node.args:
            return None
        first = node.args[0].value
        inner = literal_device(first)
        if inner is not None:
            return inner
        return VARIABLE if isinstance(first, (cst.IfExp, cst.Name, cst.Attribute)) else None
    if isinstance(node, cst.IfExp):
        sides = {device_argument(node.body, scope), device_argument(node.orelse, scope)}
        return VARIABLE if None not in sides else None
    return VARIABLE if _names_device(node) else None


def as_move(call: cst.Call, scope: Scope) -> Move | None:
    """Describe `call` as a device move, or None (a dtype cast, not a method call...)."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None
    method = func.attr.value
    if method == "cuda":
        device_arg = call.args[0].value if call.args and call.args[0].keyword is None else None
        return Move(call, func.value, CUDA, device_arg)
    if method == "cpu":
        return Move(call, func.value, CPU, None) if not call.args else None
    if method != "to":
        return None
    device_keyword = keyword(call, "device")
    if device_keyword is not None:
        device_value = device_keyword.value
        return Move(call, func.value, device_argument(device_value, scope) or VARIABLE, device_value)
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if not positional:
        return None
    first = positional[0].value
    if is_dtype(first, scope):
        return None
    device = device_argument(first, scope)
    return None if device is None else Move(call, func.value, device, first)
