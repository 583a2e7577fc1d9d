"""Which device an expression names, for the device-flow analysis (as a `devices.Device`).

A literal (`"cuda:1"`), `torch.device(...)`, a device chosen by a CUDA
availability check (`"cuda" if torch.cuda.is_available() else "cpu"`, `torch.device("cuda") if
... else torch.device("cpu")`, `torch.accelerator.current_accelerator().type if
torch.accelerator.is_available() else "cpu"`), or a
name an enclosing scope binds once to one of those (`DEVICE = ...` at module
level). These are questions about the code's text and its bindings only, so
they can be asked of any expression without running the analysis.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import Device, string_device
from torchdev_lint.analysis.syntax.scopes import Scope, resolve
from torchdev_lint.analysis.values.flow_values import Kind, Value

# Tests that an accelerator is there, and the accelerator they then pick.
_AVAILABILITY_TESTS = frozenset({"torch.cuda.is_available", "torch.accelerator.is_available"})
_CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"


def _literal_type(node: cst.BaseExpression) -> str | None:
    device = string_device(node) if isinstance(node, cst.SimpleString) else None
    return None if device is None else device.type


def device_expression(node: cst.BaseExpression, scope: Scope) -> Value | None:
    """The device a literal, `torch.device(...)` or availability-chosen expression names."""
    if isinstance(node, cst.SimpleString):
        device = string_device(node)
        return None if device is None else Value(Kind.DEVICE, device)
    if isinstance(node, cst.IfExp):
        if _accelerator(node.body, scope) and _availability(node.test, scope):
            return Value(Kind.DEVICE, Device(None, origin=node))
        return None
    if isinstance(node, cst.Call) and resolve(node.func, scope) == "torch.device" and node.args:
        inner = device_expression(node.args[0].value, scope)
        if inner is not None and inner.device is not None and inner.device.type is None:
            return Value(Kind.DEVICE, Device(None, origin=node))
        second = node.args[1].value if len(node.args) > 1 else None
        if inner is not None and inner.device is not None and isinstance(second, cst.Integer):
            return inner.on(replace(inner.device, index=second.evaluated_value))
        return inner
    return None


def _accelerator(node: cst.BaseExpression, scope: Scope) -> bool:
    """`"cuda"`, `torch.device("cuda")`, or the current accelerator (`torch.accelerator.
    current_accelerator()`, or its `.type`): what an availability test picks when it holds."""
    if isinstance(node, cst.Attribute) and node.attr.value == "type":
        node = node.value
    if isinstance(node, cst.Call) and resolve(node.func, scope) == _CURRENT_ACCELERATOR:
        return True
    if isinstance(node, cst.Call) and resolve(node.func, scope) == "torch.device" and node.args:
        node = node.args[0].value
    return _literal_type(node) == "cuda"


def _availability(test: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """`torch.cuda.is_available()` (or `torch.accelerator.is_available()`), alone, in an `and`,
    or through a flag bound to it."""
    if isinstance(test, cst.Call):
        return resolve(test.func, scope) in _AVAILABILITY_TESTS
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _availability(test.left, scope, depth) or _availability(test.right, scope, depth)
    if isinstance(test, cst.Name) and depth < 3:
        found = scope.lookup(test.value)
        if found is not None and len(found[1]) == 1 and found[1][0].value is not None:
            return _availability(found[1][0].value, found[0], depth + 1)
    return False


def outer_device(node: cst.Name, scope: Scope) -> Value | None:
    """A device chosen once in a scope enclosing `scope` (`DEVICE = torch.device(...)` at module level)."""
    found = scope.lookup(node.value)
    if found is None or found[0] is scope:
        return None
    owner, bindings = found
    if len(bindings) != 1 or bindings[0].value is None:
        return None
    value = device_expression(bindings[0].value, owner)
    if value is None:
        return None
    return value.on(replace(value.device, name=node.value)) if value.device else value
