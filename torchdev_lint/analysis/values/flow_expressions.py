"""What an expression evaluates to in the device flow: names, attributes, operators, subscripts.

`Expressions.eval` computes the `Value` of an expression in a `State` and
records it; arithmetic and comparisons place tensors on their operands'
device and record a conflict when the operands cannot mix; calls are
evaluated here (callee and arguments) and judged by `flow_calls.Calls`.
`bind` writes a value to an assignment target (statements and `:=` alike).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import CPU, conflicting, string_device
from torchdev_lint.analysis.knowledge.torch_api import METADATA_ATTRIBUTES, SELF_ATTRIBUTES
from torchdev_lint.analysis.syntax.scopes import dotted_name
from torchdev_lint.analysis.values.flow_calls import Calls
from torchdev_lint.analysis.values.flow_classes import ClassFacts
from torchdev_lint.analysis.values.flow_devices import device_expression
from torchdev_lint.analysis.values.flow_record import Record
from torchdev_lint.analysis.values.flow_values import OTHER, TENSOR, Kind, State, Value, hosted_scalar, join


class Expressions:
    """Evaluates expressions for one run over a unit; records into the run's `Record`."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.scope = record.scope
        self.calls = Calls(record)

    def eval(self, node: cst.BaseExpression, state: State) -> Value | None:
        # One statement's expressions all see one state: the record keeps it to place conflicts.
        self.record.state = state
        handler = _DISPATCH.get(type(node))
        # Lambdas and comprehensions run elsewhere: not followed.
        value = handler(self, node, state) if handler is not None else None
        self.record.values[node] = value
        return value

    def _elements(self, node: cst.Tuple | cst.List | cst.Set, state: State) -> Value | None:
        for element in node.elements:
            self.eval(element.value, state)
        return OTHER

    def _dict(self, node: cst.Dict, state: State) -> Value | None:
        for entry in node.elements:
            if isinstance(entry, cst.DictElement):
                self.eval(entry.key, state)
            self.eval(entry.value, state)
        return OTHER

    def _boolean(self, node: cst.BooleanOperation, state: State) -> Value | None:
        self.eval(node.left, state)
        self.eval(node.right, state)
        return None

    def _name(self, node: cst.Name, state: State) -> Value | None:
        return self.record.lookup(node.value, node, state)

    def _attribute(self, node: cst.Attribute, state: State) -> Value | None:
        key = dotted_name(node)
        if key is not None and key in state.vars:
            self.eval(node.value, state)
            return state.vars[key]
        owner = self.eval(node.value, state)
        attr = node.attr.value
        if owner is None:
            return None if key is None else self.record.lookup(key, node, state)
        if attr == "device" and owner.kind is Kind.TENSOR:
            return Value(Kind.DEVICE, owner.device) if owner.device is not None else None
        if owner.kind is Kind.TENSOR and attr in SELF_ATTRIBUTES:
            return owner
        if owner.kind is Kind.TENSOR and attr in METADATA_ATTRIBUTES:
            return OTHER
        if owner.kind is Kind.MODULE and isinstance(owner.cls, ClassFacts):
            fact = owner.cls.attrs.get(attr)
            if fact is not None:
                value, follows = fact
                return value.on(owner.device) if follows else value
        return None if key is None else self.record.lookup(key, node, state)

    def _string(self, node: cst.SimpleString, state: State) -> Value | None:
        device = string_device(node)
        return OTHER if device is None else Value(Kind.DEVICE, device)

    def _fstring(self, node: cst.FormattedString, state: State) -> Value | None:
        for part in node.parts:
            if isinstance(part, cst.FormattedStringExpression):
                value = self.eval(part.expression, state)
                if value is not None and value.pending is not None:
                    self.record.read(value, part)
        return OTHER

    def _walrus(self, node: cst.NamedExpr, state: State) -> Value | None:
        value = self.eval(node.value, state)
        self.bind(node.target, value, node.value, state)
        return value

    def _ifexp(self, node: cst.IfExp, state: State) -> Value | None:
        self.eval(node.test, state)
        body = self.eval(node.body, state)
        orelse = self.eval(node.orelse, state)
        device = device_expression(node, self.scope)
        if device is not None:
            return device
        return join(body, orelse)

    def _unary(self, node: cst.UnaryOperation, state: State) -> Value | None:
        value = self.eval(node.expression, state)
        return value if value is not None and value.kind is Kind.TENSOR else None

    def _binary(self, node: cst.BinaryOperation, state: State) -> Value | None:
        left = self.eval(node.left, state)
        right = self.eval(node.right, state)
        matmul = isinstance(node.operator, cst.MatrixMultiply)
        return self.arith(node, node.left, left, node.right, right, elementwise=not matmul)

    def _comparison(self, node: cst.Comparison, state: State) -> Value | None:
        left = self.eval(node.left, state)
        if len(node.comparisons) != 1:
            for target in node.comparisons:
                self.eval(target.comparator, state)
            return None
        comparator = node.comparisons[0].comparator
        right = self.eval(comparator, state)
        if not isinstance(
            node.comparisons[0].operator,
            (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual, cst.Equal, cst.NotEqual),
        ):
            return OTHER
        result = self.arith(node, node.left, left, comparator, right, elementwise=True)
        return None if result is None else replace(result, grad=False)

    def arith(
        self,
        node: cst.CSTNode,
        left_node: cst.BaseExpression,
        left: Value | None,
        right_node: cst.BaseExpression,
        right: Value | None,
        *,
        elementwise: bool,
    ) -> Value | None:
        """`a + b` and kin: a tensor on the tensors' device; a conflict when they differ."""
        tensors = [
            (n, v)
            for n, v in ((left_node, left), (right_node, right))
            if v is not None and v.kind is Kind.TENSOR
        ]
        if not tensors:
            return None
        self.record.read_all(node, tensors)
        if len(tensors) == 2:
            self.record.check_pair(node, tensors[0], tensors[1], elementwise)
        devices = {v.device for _, v in tensors}
        device = devices.pop() if len(devices) == 1 else None
        if None in (left, right) and hosted_scalar(tensors):
            device = None  # `total + x`: a 0-dim host tensor goes wherever `x` is
        nonscalar = any(v.nonscalar for _, v in tensors) and elementwise
        grad = any(v.grad for _, v in tensors)
        return Value(Kind.TENSOR, device, nonscalar, grad)

    def _await(self, node: cst.Await, state: State) -> Value | None:
        self.eval(node.expression, state)
        return None

    def _subscript(self, node: cst.Subscript, state: State) -> Value | None:
        value = self.eval(node.value, state)
        indices = []
        for element in node.slice:
            if isinstance(element.slice, cst.Index):
                indices.append((element.slice.value, self.eval(element.slice.value, state)))
            elif isinstance(element.slice, cst.Slice):
                for part in (element.slice.lower, element.slice.upper, element.slice.step):
                    if part is not None:
                        self.eval(part, state)
        if value is None:
            return None
        if value.pending is not None:
            if all(isinstance(element.slice, cst.Slice) for element in node.slice):
                return value  # `host[:-1]` is a view: it reads nothing and is as pending as `host`
            self.record.read(value, node)
        if value.kind is not Kind.TENSOR:
            return None
        if value.device is not None and value.device.type == "cpu":
            for index_node, index in indices:
                if (
                    index is not None
                    and index.kind is Kind.TENSOR
                    and index.device is not None
                    and conflicting(CPU, index.device)
                ):
                    self.record.conflict(node, index_node, index.device, CPU, node.value, module_call=False)
                    break
        return Value(Kind.TENSOR, value.device, grad=value.grad)

    def _call(self, node: cst.Call, state: State) -> Value | None:
        func = node.func
        callee = self.eval(func, state)
        receiver = self.record.values.get(func.value) if isinstance(func, cst.Attribute) else None
        args = [self.eval(arg.value, state) for arg in node.args]
        return self.calls.call(node, callee, receiver, args, state)

    def bind(
        self,
        target: cst.BaseExpression,
        value: Value | None,
        source: cst.BaseExpression | None,
        state: State,
    ) -> None:
        if isinstance(target, (cst.Name, cst.Attribute)):
            key = dotted_name(target)
            if key is None:
                if isinstance(target, cst.Attribute):
                    self.eval(target.value, state)
                return
            if (
                value is not None
                and value.kind is Kind.DEVICE
                and value.device is not None
                and value.device.type is None
                and value.device.name is None
            ):
                value = value.on(replace(value.device, name=key))
            state.set(key, value)
            owner = key.rpartition(".")[0] if key.endswith(".data") else ""
            if owner and (state.vars.get(owner) or TENSOR).kind is Kind.TENSOR:
                # `x.data = x.data.to(d)` moves `x` itself, whatever `x` was known to hold
                state.set(owner, value if value is not None and value.kind is Kind.TENSOR else None)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.bind(element.value, None, None, state)
        elif isinstance(target, cst.StarredElement):
            self.bind(target.value, None, None, state)
        elif isinstance(target, cst.Subscript):
            self.eval(target.value, state)


def _other(expressions: Expressions, node: cst.BaseExpression, state: State) -> Value:
    return OTHER


# The evaluator of each expression type, as plain functions: bound methods kept on
# the instance would tie every `Expressions` into a reference cycle. By exact type
# (LibCST's node classes are final): isinstance on their ABCs is slow.
_DISPATCH: dict[type[cst.CSTNode], Callable[[Expressions, Any, State], Value | None]] = {
    cst.Name: Expressions._name,
    cst.Attribute: Expressions._attribute,
    cst.Call: Expressions._call,
    cst.BinaryOperation: Expressions._binary,
    cst.Comparison: Expressions._comparison,
    cst.UnaryOperation: Expressions._unary,
    cst.Subscript: Expressions._subscript,
    cst.IfExp: Expressions._ifexp,
    cst.SimpleString: Expressions._string,
    cst.Integer: _other,
    cst.Float: _other,
    cst.Imaginary: _other,
    cst.ConcatenatedString: _other,
    cst.FormattedString: Expressions._fstring,
    cst.NamedExpr: Expressions._walrus,
    cst.Await: Expressions._await,
    cst.Tuple: Expressions._elements,
    cst.List: Expressions._elements,
    cst.Set: Expressions._elements,
    cst.Dict: Expressions._dict,
    cst.BooleanOperation: Expressions._boolean,
}
