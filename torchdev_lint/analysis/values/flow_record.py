"""What one run of the device flow over a unit records, and where it records it.

The statement walker and the expression and call evaluators share one
`Record`: the value of every evaluated expression, the operations that mix
devices (`Conflict`, for TDL302) and the host reads of unsynchronised
non-blocking copies (`AsyncRead`, for TDL310), plus the names module-only
methods were called on (evidence that a name is a module, for the next run).
`Flow` is the finished result rules read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data import loaders
from torchdev_lint.analysis.knowledge.devices import Device, conflicting
from torchdev_lint.analysis.provenance.host_facts import FileHostFacts
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name
from torchdev_lint.analysis.values.flow_devices import outer_device
from torchdev_lint.analysis.values.flow_values import LOADER, Kind, State, Value
from torchdev_lint.analysis.values.host_values import HOST, host_condition

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


@dataclass(frozen=True)
class Conflict:
    """An operation whose operands are known to sit on devices that cannot mix.

    `moved` is the operand to move (the host-side one, or a module's input),
    `target` the device it must go to, `target_expr` an expression for that
    device that is valid at the operation (None when there is none), `holder`
    the other operand (the module called, or the other tensor).
    """

    node: cst.CSTNode
    moved: cst.BaseExpression
    moved_device: Device
    target: Device
    target_expr: cst.BaseExpression | None
    holder: cst.BaseExpression
    module_call: bool


@dataclass(frozen=True)
class AsyncRead:
    """A host read of a tensor whose non-blocking device-to-host copy may still be running."""

    copy: cst.Call
    read: cst.CSTNode


@dataclass
class Flow:
    """The result of analysing one function or module."""

    values: dict[cst.CSTNode, Value | None] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    async_reads: list[AsyncRead] = field(default_factory=list)

    def value(self, node: cst.CSTNode) -> Value | None:
        return self.values.get(node)


class Record:
    """The shared memory of one run over a unit (see the module docstring)."""

    def __init__(self, scope: Scope, ctx: FileContext, evidence: frozenset[str]) -> None:
        self.scope = scope
        self.ctx = ctx
        self.evidence = evidence
        self.evidence_found: set[str] = set()
        self.values: dict[cst.CSTNode, Value | None] = {}
        self.conflicts: dict[cst.CSTNode, Conflict | None] = {}
        self.reads: dict[cst.CSTNode, AsyncRead | None] = {}
        self.expect_error = 0  # inside `with pytest.raises(...)` and kin: conflicts are expected
        # The state the expression being evaluated sees (set by the evaluator), for `_still`.
        self.state = State()
        # What a key not in the state holds (`lookup`): it depends on the key alone within a run.
        self._outside: dict[str, Value | None] = {}
        self._host_facts: FileHostFacts | None = None  # made on the first `host_data`

    def host_data(self, node: cst.BaseExpression) -> bool:
        """Is `node` host data by construction (`x.to("cpu")`, a file function returning that)? A
        non-blocking copy of it to the CPU copies nothing asynchronously."""
        if self._host_facts is None:
            self._host_facts = FileHostFacts(self.scope.module, self.ctx.project)
        return host_condition(node, self.scope, self._host_facts) == HOST

    def result(self) -> Flow:
        return Flow(
            self.values,
            [c for c in self.conflicts.values() if c is not None],
            [r for r in self.reads.values() if r is not None],
        )

    def lookup(self, key: str, node: cst.BaseExpression, state: State) -> Value | None:
        """What a name or `a.b` key holds: its state, a device an enclosing scope binds, or evidence."""
        value = state.vars.get(key)
        if value is not None:
            return value
        if key in self._outside:
            return self._outside[key]
        value = self._outside[key] = self._outside_value(key, node)
        return value

    def _outside_value(self, key: str, node: cst.BaseExpression) -> Value | None:
        """What `key` (`node`'s dotted name) holds when the state knows nothing of it: the same
        for every occurrence in a run, since the scope and the evidence do not change."""
        if isinstance(node, cst.Name):
            outer = outer_device(node, self.scope)
            if outer is not None:
                return outer
        if key in self.evidence:
            return Value(Kind.MODULE, stateful=True)
        if loaders.named_like_loader(node):
            return LOADER
        return None

    def check_pair(
        self,
        node: cst.CSTNode,
        a: tuple[cst.BaseExpression, Value],
        b: tuple[cst.BaseExpression, Value],
        elementwise: bool,
    ) -> bool:
        """Record a conflict when two tensor operands sit on devices that cannot mix."""
        a_value, b_value = a[1], b[1]
        if a_value.device is None or b_value.device is None:
            return False
        if not conflicting(a_value.device, b_value.device):
            return False
        # Move the host-side operand to the other one's device.
        if a_value.device.type == "cpu":
            moved, holder = a, b
        elif b_value.device.type == "cpu":
            moved, holder = b, a
        else:
            moved, holder = b, a
        if elementwise and moved[1].device.type == "cpu" and not moved[1].nonscalar:  # type: ignore[union-attr]
            return False  # a CPU 0-dim tensor mixes with CUDA tensors
        self.conflict(node, moved[0], moved[1].device, holder[1].device, holder[0], module_call=False)  # type: ignore[arg-type]
        return True

    def conflict(
        self,
        node: cst.CSTNode,
        moved: cst.BaseExpression,
        moved_device: Device,
        target: Device,
        holder: cst.BaseExpression,
        *,
        module_call: bool,
    ) -> None:
        if self.expect_error:
            return
        self.conflicts[node] = Conflict(
            node,
            moved,
            moved_device,
            target,
            self._device_node(target, holder, module_call),
            holder,
            module_call,
        )

    def _device_node(
        self, device: Device, holder: cst.BaseExpression, module_call: bool
    ) -> cst.BaseExpression | None:
        """An expression naming `device` at the operation: a literal, its variable, or `<tensor>.device`."""
        literal = device.literal()
        if literal is not None:
            return cst.SimpleString(f'"{literal}"')
        if device.name is not None:
            try:
                expression = cst.parse_expression(device.name)
            except cst.ParserSyntaxError:
                expression = None
            # Only when the name still holds that device here.
            if expression is not None and self._still(device, expression):
                return expression
        if not module_call and isinstance(holder, (cst.Name, cst.Attribute)) and dotted_name(holder):
            return cst.Attribute(value=holder, attr=cst.Name("device"))
        return None

    def _still(self, device: Device, expression: cst.BaseExpression) -> bool:
        key = dotted_name(expression)
        if key is None:
            return False
        state = self.state
        value = (
            self.lookup(key, expression, state) if isinstance(expression, cst.Name) else state.vars.get(key)
        )
        return value is not None and value.kind is Kind.DEVICE and value.device == device

    def read_all(self, node: cst.CSTNode, operands: list[tuple[cst.BaseExpression, Value]]) -> None:
        for _, value in operands:
            if value.pending is not None:
                self.read(value, node)

    def read(self, value: Value, node: cst.CSTNode) -> None:
        """`node` reads `value`, whose non-blocking copy no synchronisation has completed."""
        assert value.pending is not None
        self.reads[node] = AsyncRead(value.pending, node)
