"""The abstract values of the device-flow analysis (`analysis.values.flow`): kinds, values, joins, states.

A `Value` says what the analysis knows about one expression at one point of a
function: its kind (tensor, module, device, loader, other) and, for tensors and
modules, the device it lives on (a `devices.Device`). Every field is "known" or left at its
"unknown" default; joining two facts that disagree forgets the field, so the
lattice is shallow and fixed points are reached in a few rounds. A `State`
holds the values of every name at one program point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import Device


class Kind(Enum):
    """What an expression evaluates to; None (not a member) means unknown."""

    TENSOR = "tensor"
    MODULE = "module"
    DEVICE = "device"  # a torch.device or a device string such as "cuda:0"
    LOADER = "loader"  # an iterable of batches (a DataLoader)
    OTHER = "other"  # numbers, strings, numpy arrays...: never a tensor


@dataclass(frozen=True)
class Value:
    """What is known about one expression.

    `nonscalar`: proven to have at least one dimension (a CPU 0-dim tensor
    mixes freely with CUDA tensors in arithmetic). `grad`: may require grad
    (it came out of a module). `cls`: facts of the local nn.Module subclass a
    module is an instance of. `stateful`: the module holds parameters or
    buffers, so calling it with data on another device fails. `pending`: the
    non-blocking device-to-host copy that produced this tensor and that no
    synchronisation has completed yet.
    """

    kind: Kind
    device: Device | None = None
    nonscalar: bool = False
    grad: bool = False
    cls: object | None = None
    stateful: bool = False
    pending: cst.Call | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Value):
            return NotImplemented
        return (
            self.kind is other.kind
            and self.device == other.device
            and self.nonscalar == other.nonscalar
            and self.grad == other.grad
            and self.cls is other.cls
            and self.stateful == other.stateful
            and self.pending is other.pending
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.device, self.nonscalar, self.grad, id(self.cls), self.stateful))

    def on(self, device: Device | None) -> Value:
        return replace(self, device=device)


TENSOR = Value(Kind.TENSOR)
MODULE = Value(Kind.MODULE)
OTHER = Value(Kind.OTHER)
LOADER = Value(Kind.LOADER)


def hosted_scalar(operands: Sequence[tuple[cst.BaseExpression, Value]]) -> bool:
    """Is one of the tensor operands on the CPU and perhaps 0-dim? It then mixes with data of any
    device, and the result is where the other operand is."""
    return any(v.device is not None and v.device.type == "cpu" and not v.nonscalar for _, v in operands)


def join(a: Value | None, b: Value | None) -> Value | None:
    """The facts that hold on both paths; None when even the kind disagrees."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if a.kind is not b.kind:
        return None
    return Value(
        a.kind,
        a.device if a.device == b.device else None,
        a.nonscalar and b.nonscalar,
        a.grad or b.grad,
        a.cls if a.cls is b.cls else None,
        a.stateful and b.stateful,
        a.pending if a.pending is b.pending else None,
    )


class State:
    """Facts at one program point: values by key (`x`, `self.fc`), and whether factories land on the CPU."""

    __slots__ = ("vars", "default_cpu", "dead")

    def __init__(self, values: dict[str, Value] | None = None, default_cpu: bool = True) -> None:
        self.vars: dict[str, Value] = values if values is not None else {}
        self.default_cpu = default_cpu
        self.dead = False

    def copy(self) -> State:
        state = State(dict(self.vars), self.default_cpu)
        state.dead = self.dead
        return state

    def set(self, key: str, value: Value | None) -> None:
        self.forget(key)
        if value is not None:
            self.vars[key] = value

    def forget(self, key: str) -> None:
        self.vars.pop(key, None)
        prefix = key + "."
        for stale in [k for k in self.vars if k.startswith(prefix)]:
            del self.vars[stale]

    def same(self, other: State) -> bool:
        return self.dead == other.dead and self.default_cpu == other.default_cpu and self.vars == other.vars

    def sync(self) -> None:
        """Everything copied so far has landed: forget pending copies."""
        for key, value in list(self.vars.items()):
            if value.pending is not None:
                self.vars[key] = replace(value, pending=None)


def dead_state() -> State:
    """The state after `return`/`raise`: no path reaches here."""
    state = State()
    state.dead = True
    return state


def join_states(states: Sequence[State]) -> State:
    """The facts that hold on every live path."""
    live = [s for s in states if not s.dead]
    if not live:
        return dead_state()
    first = live[0]
    values = dict(first.vars)
    default_cpu = first.default_cpu
    for other in live[1:]:
        default_cpu = default_cpu and other.default_cpu
        merged = {}
        for key, value in values.items():
            joined = join(value, other.vars.get(key))
            if joined is not None:
                merged[key] = joined
        values = merged
    return State(values, default_cpu)
