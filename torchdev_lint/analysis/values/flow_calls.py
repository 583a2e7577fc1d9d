"""What a call evaluates to in the device flow: constructors, torch functions, methods, moves.

`Calls.call` gets the values of a call's callee, receiver and arguments (the
expression evaluator computes them) and answers with the value of the call,
recording on the way the device conflicts (`torch.cat` of CPU and CUDA
tensors, a CUDA module called with CPU data), the host reads of pending
non-blocking copies and the synchronisations that complete them. What each
torch API does is looked up in `torch_api`.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from torchdev_lint.analysis.data import loaders
from torchdev_lint.analysis.knowledge.devices import CPU, OWN_TYPE, Device, conflicting, is_dtype
from torchdev_lint.analysis.knowledge.library_models import Fact, apis, host_module
from torchdev_lint.analysis.knowledge.torch_api import (
    ALWAYS_NONSCALAR_FACTORIES,
    BLOCKING,
    CONTAINERS,
    DEFAULT_DEVICE_SETTERS,
    ELEMENTWISE,
    FACTORIES,
    HOST_VALUES,
    JOINS,
    KEEP_SHAPE,
    MODULE_ONLY_METHODS,
    MODULE_SAME,
    MOVE_METHODS,
    NEW_TENSOR_METHODS,
    NOT_ONE_TENSOR,
    NOT_READING,
    PARAMETER_CLASSES,
    READERS,
    SAME_DEVICE,
    STATEFUL_NN,
    STRICT,
    STRICT_FUNCTIONAL,
    SYNC_METHODS,
    SYNCS,
    VIEWS,
)
from torchdev_lint.analysis.syntax.scopes import dotted_name, resolve
from torchdev_lint.analysis.values import kinds
from torchdev_lint.analysis.values.flow_classes import (
    ClassFacts,
    class_facts,
    module_class_node,
    moves_inputs,
)
from torchdev_lint.analysis.values.flow_devices import device_expression
from torchdev_lint.analysis.values.flow_record import Record
from torchdev_lint.analysis.values.flow_values import LOADER, OTHER, TENSOR, Kind, State, Value, hosted_scalar
from torchdev_lint.syntax import keyword, keyword_is_true

_NOT_HANDLED = object()


class Calls:
    """Evaluates calls for one run over a unit; records into the run's `Record`."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.scope = record.scope

    def call(
        self,
        node: cst.Call,
        callee: Value | None,
        receiver: Value | None,
        args: list[Value | None],
        state: State,
    ) -> Value | None:
        """The value of `node`, given the values of its callee, its receiver (for `a.f()`) and its arguments."""
        func = node.func
        name = resolve(func, self.scope) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if name is not None and kinds.is_module_class(name, self.scope):
            return self._construct(node, name, args, state)
        if isinstance(func, cst.Name) and func.value in kinds.local_module_classes(self.scope.module):
            return self._construct(node, name or func.value, args, state)
        project = self.record.ctx.project
        if name is not None and project is not None and (placed := project.module_class(name)) is not None:
            return self._construct(node, name, args, state, placed)
        if name is not None:
            result = self._function(node, name, args, state)
            if result is not _NOT_HANDLED:
                return result  # type: ignore[return-value]
        if callee is not None and callee.kind is Kind.MODULE:
            return self._module_call(node, func, callee, args)
        if isinstance(func, cst.Attribute):
            return self._method(node, func, receiver, args, state)
        if isinstance(func, cst.Name):
            state.sync()  # a helper of unknown behaviour may synchronise
        return None

    def _construct(
        self, node: cst.Call, name: str, args: list[Value | None], state: State, placed: bool | None = None
    ) -> Value:
        """An instance of a module class; `placed`: a project module's class, from pass 1 (calls of
        it are checked against the device of its weights)."""
        facts = None
        if "." not in name:
            class_node = module_class_node(name, self.scope)
            facts = class_facts(class_node, self.record.ctx) if class_node is not None else None
        last = name.rsplit(".", 1)[-1]
        if facts is not None:
            stateful = facts.stateful
        elif placed is not None:
            stateful = placed
        elif name.startswith("torchvision."):
            stateful = True
        elif last in CONTAINERS:
            stateful = any(v is not None and v.kind is Kind.MODULE and v.stateful for v in args)
        else:
            stateful = bool(STATEFUL_NN.match(last))
        device = self._keyword_device(node, state)
        if device is None and facts is None and state.default_cpu:
            device = CPU
        return Value(Kind.MODULE, device, cls=facts, stateful=stateful)

    def _keyword_device(self, node: cst.Call, state: State) -> Device | None:
        arg = keyword(node, "device")
        value = self.record.values.get(arg.value) if arg is not None else None
        return value.device if value is not None and value.kind is Kind.DEVICE else None

    def _function(self, node: cst.Call, name: str, args: list[Value | None], state: State) -> object:
        if name == "torch.device":
            first = args[0] if args else None
            if first is not None and first.kind is Kind.DEVICE and len(node.args) == 1:
                return first
            return device_expression(node, self.scope)
        if name in SYNCS:
            state.sync()
            return OTHER
        if name in DEFAULT_DEVICE_SETTERS:
            state.default_cpu = False
            return OTHER
        if loaders.is_dataloader_class(name):
            return LOADER
        if name in PARAMETER_CLASSES:
            first = args[0] if args else None
            return first if first is not None and first.kind is Kind.TENSOR else TENSOR
        if name in ("torch.jit.load", "torch.hub.load"):
            location = keyword(node, "map_location")
            value = self.record.values.get(location.value) if location is not None else None
            device = value.device if value is not None and value.kind is Kind.DEVICE else None
            return Value(Kind.MODULE, device, stateful=True)
        if name in apis(Fact.CPU_TENSOR):
            return Value(Kind.TENSOR, CPU, nonscalar=True)  # `to_tensor(image)`: made on the host
        if name in READERS or host_module(name):
            for arg, value in zip(node.args, args, strict=True):
                if value is not None and value.pending is not None:
                    self.record.read(value, arg.value)
            return OTHER
        if name.startswith("builtins."):
            return None if name not in ("builtins.len", "builtins.isinstance") else OTHER
        if not (name.startswith(("torch.", "math.")) or host_module(name)):
            state.sync()  # an imported helper of unknown behaviour may synchronise
        if name.startswith("torch.nn.functional."):
            last = name[len("torch.nn.functional.") :]
            return self._tensor_function(node, last, args, strict=last in STRICT_FUNCTIONAL)
        if name.startswith("torch.") and name.count(".") == 1:
            last = name[6:]
            if last in FACTORIES:
                return self._factory(node, last, args, state)
            if last in JOINS:
                return self._join_call(node, last, args)
            if last in NOT_ONE_TENSOR or (last == "where" and len(node.args) == 1):
                return None
            return self._tensor_function(
                node, last, args, strict=last in STRICT, elementwise=last in ELEMENTWISE
            )
        return _NOT_HANDLED

    def _factory(self, node: cst.Call, name: str, args: list[Value | None], state: State) -> Value:
        device = self._keyword_device(node, state)
        explicit = keyword(node, "device") is not None
        first = args[0] if args else None
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        from_tensor = first is not None and first.kind is Kind.TENSOR
        if name == "from_numpy":
            device = CPU
        elif not explicit:
            if from_tensor and (name.endswith("_like") or name == "as_tensor"):
                device = first.device  # type: ignore[union-attr]
            elif not from_tensor and not name.endswith("_like"):  # `zeros_like(x)` is where `x` is
                device = CPU if state.default_cpu else None
        requires = keyword(node, "requires_grad")  # a leaf that requires grad: `.numpy()` needs `.detach()`
        grad = (
            requires is not None and isinstance(requires.value, cst.Name) and requires.value.value == "True"
        )
        return Value(Kind.TENSOR, device, _factory_nonscalar(name, positional, first), grad)

    def _join_call(self, node: cst.Call, name: str, args: list[Value | None]) -> Value | None:
        """`torch.cat([a, b])`: every element must be on one device."""
        if not node.args or not isinstance(node.args[0].value, (cst.List, cst.Tuple)):
            return TENSOR
        elements = [
            (e.value, self.record.values.get(e.value))
            for e in node.args[0].value.elements
            if not isinstance(e, cst.StarredElement)
        ]
        tensors = [
            (n, v) for n, v in elements if v is not None and v.kind is Kind.TENSOR and v.device is not None
        ]
        accelerated = [(n, v) for n, v in tensors if v.device.on_accelerator]  # type: ignore[union-attr]
        hosted = [(n, v) for n, v in tensors if v.device.type == "cpu"]  # type: ignore[union-attr]
        if accelerated and hosted:
            accelerator = accelerated[0][1].device
            assert accelerator is not None  # kept in `tensors` only with a device
            self.record.conflict(node, hosted[0][0], CPU, accelerator, accelerated[0][0], module_call=False)
        devices = {v.device for _, v in tensors}
        known = len(tensors) == len(elements) and len(devices) == 1
        return Value(Kind.TENSOR, devices.pop() if known else None, True, any(v.grad for _, v in tensors))

    def _tensor_function(
        self,
        node: cst.Call,
        name: str,
        args: list[Value | None],
        *,
        strict: bool = False,
        elementwise: bool = False,
    ) -> Value | None:
        """`torch.relu(x)`, `torch.matmul(a, b)`, `F.linear(x, w)`: a tensor on the inputs' device."""
        tensors = [
            (arg.value, value)
            for arg, value in zip(node.args, args, strict=True)
            if value is not None and value.kind is Kind.TENSOR and not arg.star
        ]
        if not tensors:
            return None
        self.record.read_all(node, tensors)
        if strict or elementwise:
            for index, first in enumerate(tensors):
                if any(
                    self.record.check_pair(node, first, second, elementwise)
                    for second in tensors[index + 1 :]
                ):
                    break
        devices = {v.device for _, v in tensors if v.device is not None}
        device = devices.pop() if len(devices) == 1 else None
        unknown = len(tensors) < sum(not arg.star for arg in node.args)
        if unknown and hosted_scalar(tensors):
            device = None  # `torch.add(total, x)`: a 0-dim host tensor goes wherever `x` is
        return Value(Kind.TENSOR, device, grad=any(v.grad for _, v in tensors))

    def _method(
        self,
        node: cst.Call,
        func: cst.Attribute,
        receiver: Value | None,
        args: list[Value | None],
        state: State,
    ) -> Value | None:
        method = func.attr.value
        key = dotted_name(func.value)
        if method in MODULE_ONLY_METHODS and key is not None:
            self.record.evidence_found.add(key)
        if method in SYNC_METHODS:
            state.sync()
            return None
        if receiver is not None and receiver.pending is not None and method not in NOT_READING:
            if method in VIEWS:
                return receiver  # `host.view(-1)` reads nothing: the view is as pending as `host`
            self.record.read(receiver, node)
        kind = receiver.kind if receiver is not None else None
        if method in MOVE_METHODS:
            return self._move(node, func, method, receiver, args, state)
        if method == "type_as":  # `t.type_as(x)` is `t.to(x)`: x's dtype and x's device
            return self._move(node, func, "to", receiver, args, state)
        if kind is Kind.MODULE:
            assert receiver is not None
            if method in MODULE_SAME:
                return receiver
            if method == "forward":
                return self._module_call(node, func.value, receiver, args)
            return None
        if method in BLOCKING and (receiver is None or (receiver.pending is None and receiver.device != CPU)):
            state.sync()  # a blocking read of a (maybe CUDA) tensor waits for its stream
        if kind is not Kind.TENSOR:
            return OTHER if method in HOST_VALUES else None
        assert receiver is not None
        if method in HOST_VALUES:
            return OTHER
        if method in NEW_TENSOR_METHODS:
            device = (
                self._keyword_device(node, state) if keyword(node, "device") is not None else receiver.device
            )
            return Value(Kind.TENSOR, device)
        if method in ELEMENTWISE or method in STRICT:
            for arg, value in zip(node.args, args, strict=True):
                if value is not None and value.kind is Kind.TENSOR and not arg.keyword:
                    if self.record.check_pair(
                        node, (func.value, receiver), (arg.value, value), method in ELEMENTWISE
                    ):
                        break
        if method in KEEP_SHAPE:
            grad = receiver.grad and method not in ("detach", "detach_")
            return Value(Kind.TENSOR, receiver.device, receiver.nonscalar, grad)
        if method in SAME_DEVICE:
            return Value(Kind.TENSOR, receiver.device, grad=receiver.grad)
        return None

    def _move(
        self,
        node: cst.Call,
        func: cst.Attribute,
        method: str,
        receiver: Value | None,
        args: list[Value | None],
        state: State,
    ) -> Value | None:
        """`.to(...)`, `.cuda()`, `.cpu()`: a moved tensor, or a module moved in place."""
        moves, device = self._target(node, method, args)
        kind = receiver.kind if receiver is not None else None
        non_blocking = keyword_is_true(node, "non_blocking")
        if (
            non_blocking
            and method == "to"
            and device == CPU
            and kind in (None, Kind.TENSOR)
            and (receiver is None or receiver.device != CPU)
            and not (receiver is None and self.record.host_data(func.value))
        ):
            return Value(Kind.TENSOR, CPU, receiver.nonscalar if receiver else False, pending=node)
        if device == CPU and not non_blocking and kind is not Kind.MODULE:
            if receiver is None or (receiver.pending is None and receiver.device != CPU):
                state.sync()  # a blocking copy to the host waits for the stream
        if receiver is None or kind not in (Kind.TENSOR, Kind.MODULE):
            return None
        moved = receiver.on(device) if moves else receiver
        if kind is Kind.MODULE:
            key = dotted_name(func.value)
            if key is not None:
                state.set(key, moved)  # a module moves in place
        elif moves and device != receiver.device:
            moved = replace(moved, pending=None)
        return moved

    def _target(self, node: cst.Call, method: str, args: list[Value | None]) -> tuple[bool, Device | None]:
        """Does the call change the device, and to which (None: unknown)?"""
        if method == "cpu":
            return True, CPU
        positional = [
            (a, v) for a, v in zip(node.args, args, strict=True) if a.keyword is None and not a.star
        ]
        if method == "cuda":
            if positional and isinstance(positional[0][0].value, cst.Integer):
                return True, Device("cuda", positional[0][0].value.evaluated_value)
            if positional or keyword(node, "device") is not None:
                return True, None
            return True, Device("cuda")
        for arg, value in zip(node.args, args, strict=True):
            if arg.keyword is not None and arg.keyword.value == "device":
                return True, value.device if value is not None and value.kind is Kind.DEVICE else None
        if any(a.star for a in node.args):
            return True, None
        if not positional:
            return False, None
        arg, value = positional[0]
        if isinstance(arg.value, cst.Integer):
            return True, Device("cuda", arg.value.evaluated_value)
        if value is not None and value.kind in (Kind.DEVICE, Kind.TENSOR):
            return True, value.device
        if is_dtype(arg.value, self.scope):
            return False, None
        return True, None

    def _module_call(
        self, node: cst.Call, func: cst.BaseExpression, module: Value, args: list[Value | None]
    ) -> Value:
        """Calling a module: its output lives where its weights do (or where the inputs are)."""
        inputs = [
            (arg.value, value)
            for arg, value in zip(node.args, args, strict=True)
            if value is not None and value.kind is Kind.TENSOR and not arg.star
        ]
        if not module.stateful:
            devices = {v.device for _, v in inputs}
            device = devices.pop() if len(devices) == 1 else None
            return Value(Kind.TENSOR, device, grad=True)
        device = module.device
        facts = module.cls if isinstance(module.cls, ClassFacts) else None
        if device is not None and device.type == OWN_TYPE and isinstance(func, cst.Name):
            device = None  # `self(...)` in its own method: a dummy pass, often before the module is moved
        if device is not None and not (facts is not None and moves_inputs(facts, self.record.ctx)):
            for arg_node, value in inputs:
                if value.device is not None and conflicting(device, value.device):
                    self.record.conflict(node, arg_node, value.device, device, func, module_call=True)
                    break
        return Value(Kind.TENSOR, device, grad=True)


def _factory_nonscalar(name: str, positional: list[cst.BaseExpression], first: Value | None) -> bool:
    """Does the factory call certainly build a tensor with at least one dimension?"""
    if name in ALWAYS_NONSCALAR_FACTORIES:
        return True
    if name.endswith("_like"):
        return first is not None and first.nonscalar
    if name in ("tensor", "as_tensor"):
        return bool(positional) and _sized(positional[0])
    if name in ("full", "randint"):
        return any(isinstance(p, (cst.Tuple, cst.List)) and p.elements for p in positional)
    if name == "from_numpy":
        return False
    return len(positional) >= 2 or (
        bool(positional) and (isinstance(positional[0], cst.Integer) or _sized(positional[0]))
    )


def _sized(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Tuple, cst.List)) and bool(node.elements)
