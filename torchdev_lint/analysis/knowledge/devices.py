"""The one device vocabulary: `Device`, and what an expression says about devices.

`Device` is where a tensor or module lives (a backend such as `cpu` or `cuda`,
an optional index, or a device chosen at run time). Both readings of the code
answer with it:

- the syntactic one, here: which device a literal or a device argument names
  (`literal_device`, `string_device`, `device_argument`) and whether a call is a
  move and to where (`as_move` → `Move`), judged where the call stands;
- the device flow's (`flow.device_of`, `flow_devices`): where a value lives after
  the code before it ran.

`conflicting` says whether mixing two devices certainly fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypeGuard

import libcst as cst

from torchdev_lint.analysis.knowledge.library_models import Fact, apis
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, last_name, resolve
from torchdev_lint.syntax import keyword

ACCELERATORS = frozenset({"cuda", "mps", "xpu", "hpu"})
_BACKENDS = frozenset({"cpu", "meta"}) | ACCELERATORS


@dataclass(frozen=True)
class Device:
    """Where a tensor or module lives.

    `type` is the backend (`cpu`, `cuda`, `mps`, `meta`...) with an optional
    `index`. `type=None` is a device chosen at run time, which code that moves
    data there means for an accelerator: syntactically, a device held in a
    variable (`VARIABLE`: `device`, `args.device`, `x.device`); in the device
    flow, a device chosen by a CUDA availability check
    (`torch.device("cuda" if torch.cuda.is_available() else "cpu")`), CUDA on
    every machine that has a GPU. Two run-time devices are the same when they
    come from the same `origin` expression; `name` is the variable holding it,
    for messages and fixes.
    """

    type: str | None
    index: int | None = None
    origin: cst.CSTNode | None = field(default=None, compare=False)
    name: str | None = field(default=None, compare=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return self.type == other.type and self.index == other.index and self.origin is other.origin

    def __hash__(self) -> int:
        return hash((self.type, self.index, id(self.origin)))

    @property
    def on_accelerator(self) -> bool:
        """Positive evidence that data here is not host memory."""
        return self.type is None or self.type in ACCELERATORS

    def describe(self) -> str:
        if self.type == OWN_TYPE:
            return "the module's own device"
        if self.type is None:
            holder = f"`{self.name}`" if self.name else "a device"
            return f"{holder} (CUDA whenever CUDA is available)"
        if self.type == "cpu":
            return "the CPU"
        if self.index is not None:
            return f"{self.type}:{self.index}"
        return "CUDA" if self.type == "cuda" else self.type

    def literal(self) -> str | None:
        """The device as a string literal (`"cuda:1"`), when it has one."""
        if self.type is None or self.type == OWN_TYPE:
            return None
        return self.type if self.index is None else f"{self.type}:{self.index}"


# Where a module's parameters and submodules are, seen from its own methods: unknown, but an
# accelerator once the module is moved there, so host data created in a method cannot meet them.
# Never positive evidence of an accelerator (a module may stay on the CPU).
OWN_TYPE = "own"


def own_device(class_node: cst.ClassDef) -> Device:
    """The device of the parameters of the module class `class_node`, in its methods."""
    return Device(OWN_TYPE, origin=class_node, name="self")


CPU = Device("cpu")
CUDA = Device("cuda")
# A device held in a variable (`device`, `args.device`, `x.device`): its value
# is unknown statically, but code that moves data to it targets an accelerator.
VARIABLE = Device(None)


def conflicting(a: Device, b: Device) -> bool:
    """Would an operation mixing data on `a` and on `b` fail?

    Only certain failures count: host against accelerator, two explicit
    different CUDA ordinals, a run-time device (CUDA when available)
    against the CPU, and a module's own device against the CPU.
    """
    if a.type is None or b.type is None:
        other = b if a.type is None else a
        return other.type == "cpu"
    if OWN_TYPE in (a.type, b.type):
        return "cpu" in (a.type, b.type)  # host data met by the module's parameters: wrong once it is moved
    if a.type != b.type:
        return "cpu" in (a.type, b.type) and bool({a.type, b.type} & ACCELERATORS)
    return a.index is not None and b.index is not None and a.index != b.index


DTYPES = frozenset(
    """float float16 float32 float64 half double bfloat16 int int8 int16 int32 int64 uint8
    uint16 uint32 uint64 long short bool complex64 complex128 cfloat cdouble chalf
    float8_e4m3fn float8_e5m2 qint8 quint8 qint32""".split()
)
_DEVICE_NAME = re.compile(r"(^|_)(device|dev|gpu|gpu_id|rank|local_rank)s?($|_)", re.IGNORECASE)


@dataclass(frozen=True)
class Move:
    """A `.to(...)`, `.cuda()` or `.cpu()` call: what moves and where."""

    call: cst.Call
    receiver: cst.BaseExpression
    device: Device  # `VARIABLE` for a device held in a variable
    device_node: cst.BaseExpression | None  # the argument naming the device

    @property
    def to_accelerator(self) -> bool:
        """A host-to-device move: the target is not known to be the CPU."""
        return self.device.type != "cpu"


def is_dtype(node: cst.BaseExpression, scope: Scope) -> bool:
    """`torch.float16`, `dtype`, `x.dtype`, `batch["image"].dtype`."""
    name = resolve(node, scope)
    if name is not None and name.startswith("torch.") and name[6:] in DTYPES:
        return True
    last = last_name(node)
    return last is not None and "dtype" in last.lower()


def _names_device(node: cst.BaseExpression) -> bool:
    """A variable that holds a device: `device`, `args.device`, and a tensor's or module's
    `.device` reached through subscripts or calls (`x[0].device`, `batch["image"].device`,
    `next(model.parameters()).device`); also an element of a device list (`devices[rank]`)."""
    if isinstance(node, cst.Subscript):
        node = node.value
    last = last_name(node)
    return last is not None and bool(_DEVICE_NAME.search(last))


def string_device(node: cst.SimpleString) -> Device | None:
    """The device a string literal names (`"cuda:1"`), or None when it names none."""
    text = node.evaluated_value
    if not isinstance(text, str):
        return None
    backend, _, index = text.strip().partition(":")
    if backend not in _BACKENDS:
        return None
    if index:
        return Device(backend, int(index)) if index.isdigit() else None
    return Device(backend)


def literal_device(node: cst.BaseExpression) -> Device | None:
    """`"cuda:1"`, `"cpu"`, and `0` (an ordinal names a GPU) as a device argument."""
    if isinstance(node, cst.SimpleString):
        return string_device(node)
    if isinstance(node, cst.Integer):
        return Device("cuda", int(node.value)) if node.value.isdigit() else CUDA
    return None


def is_cuda_literal(node: cst.BaseExpression) -> bool:
    """`"cuda"`, `"cuda:1"`: a string literal naming CUDA."""
    device = string_device(node) if isinstance(node, cst.SimpleString) else None
    return device is not None and device.type == "cuda"


def is_formatted_cuda(node: cst.BaseExpression) -> bool:
    """`f"cuda:{rank}"`, `"cuda:%d" % gpu`, `"cuda:" + str(gpu)`: CUDA with an index computed
    at run time."""
    if isinstance(node, cst.FormattedString):
        head = node.parts[0] if node.parts else None
        return isinstance(head, cst.FormattedStringText) and head.value.startswith("cuda:")
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Modulo, cst.Add)):
        left = node.left
        text = left.evaluated_value if isinstance(left, cst.SimpleString) else None
        return isinstance(text, str) and text.startswith("cuda:") and text[5:] in ("", "%d", "%s", "%i")
    return False


def device_argument(node: cst.BaseExpression, scope: Scope) -> Device | None:
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
    if not _names_device(node):
        return None
    return CPU if _bound_to_cpu(node, scope) else VARIABLE


def _bound_to_cpu(node: cst.BaseExpression, scope: Scope) -> bool:
    """A name every binding of which assigns the CPU (`device = torch.device("cpu")`): a move
    to it is no move to an accelerator."""
    found = assigned_values(node, scope)
    if found is None or not found[0]:
        return False
    values, owner = found
    return all(not isinstance(v, cst.Name) and device_argument(v, owner) == CPU for v in values)


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


def places_on_device(node: cst.CSTNode | None) -> TypeGuard[cst.Call]:
    """`accelerator.prepare(...)`, `fabric.setup_dataloaders(...)`: a library call that hands back its
    arguments, in order, placed on its device (the library models' `PLACES_BATCHES`)."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in apis(Fact.PLACES_BATCHES)
    )
