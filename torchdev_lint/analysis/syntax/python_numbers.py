"""Is an expression a Python number (not a tensor, not an array)? Positive evidence only.

`(torch.arange(n) + offset).cuda()` builds its tensor on the CPU whatever `offset` is, but only a
Python number keeps it one computation that `device=` on the factory moves whole: a tensor
operand may live on another device, an array makes the result a CPU tensor again. So TDL203 asks
`number_kind`: `"int"`, `"float"`, or `"number"` (one of the two, which one is not known here:
`t.item()`, `math.fsum(...)`), or None where the code does not show a Python number.

Evidence: literals (`3`, `-0.5`, `True`), `len(...)`, `int(...)`, `float(...)`, `round(x)`,
`x.size(0)`, `x.shape[-1]`, `x.numel()`, `x.ndim`, `x.item()`, the `math` module, arithmetic and
conditionals of those, names bound only to those, and parameters annotated `int` or `float`.
"""

from __future__ import annotations

from typing import Literal

import libcst as cst

from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, resolve

NumberKind = Literal["int", "float", "number"]

_MAX_DEPTH = 3
_INT_CALLS = frozenset({"builtins.len", "builtins.int", "builtins.bool"})
_INT_MATH = frozenset({"floor", "ceil", "isqrt", "gcd", "lcm", "comb", "perm", "factorial", "trunc"})
# Methods of a tensor (or a size) giving a Python int: `x.size(0)` (with an argument), `x.numel()`.
_INT_METHODS = frozenset({"numel", "nelement", "dim", "ndimension", "element_size", "get_device"})
_INT_ATTRIBUTES = frozenset({"ndim"})
_ANNOTATIONS: dict[str, NumberKind] = {"int": "int", "float": "float", "bool": "int"}


def integer_literal(node: cst.BaseExpression) -> int | None:
    """The value of an integer literal, with its sign (`3`, `-1`); None for anything else."""
    sign = 1
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node, sign = node.expression, -1
    return sign * int(node.evaluated_value) if isinstance(node, cst.Integer) else None


def number_kind(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> NumberKind | None:
    """What Python number `node` is (see the module doc), or None where that is not shown."""
    if isinstance(node, cst.Integer):
        return "int"
    if isinstance(node, cst.Float):
        return "float"
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return "int"
    if isinstance(node, cst.UnaryOperation):
        if isinstance(node.operator, cst.Not):
            return "int"
        return number_kind(node.expression, scope, depth)
    if isinstance(node, cst.BinaryOperation):
        return _arithmetic(node, scope, depth)
    if isinstance(node, cst.IfExp):
        return _either(number_kind(node.body, scope, depth), number_kind(node.orelse, scope, depth))
    if isinstance(node, cst.Call):
        return _call(node, scope, depth)
    if isinstance(node, cst.Subscript):
        return "int" if _size_entry(node) else None
    if isinstance(node, cst.Attribute):
        if node.attr.value in _INT_ATTRIBUTES:
            return "int"
        name = resolve(node, scope)
        return "float" if name is not None and name.startswith("math.") else None
    if isinstance(node, cst.Name):
        return _name(node, scope, depth)
    return None


def _arithmetic(node: cst.BinaryOperation, scope: Scope, depth: int) -> NumberKind | None:
    left, right = number_kind(node.left, scope, depth), number_kind(node.right, scope, depth)
    if left is None or right is None:
        return None
    if isinstance(node.operator, cst.Divide):
        return "float"
    if isinstance(node.operator, cst.Power):
        return "number" if left == "int" and right == "int" else _either(left, right, joined=True)
    return _either(left, right, joined=True)


def _either(a: NumberKind | None, b: NumberKind | None, joined: bool = False) -> NumberKind | None:
    """Two numbers that may both be the result (`joined`: combined by arithmetic)."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if joined and "float" in (a, b):
        return "float"
    return "number"


def _call(node: cst.Call, scope: Scope, depth: int) -> NumberKind | None:
    name = resolve(node.func, scope)
    if name in _INT_CALLS:
        return "int"
    if name == "builtins.float":
        return "float"
    if name == "builtins.abs" and len(node.args) == 1 and not node.args[0].star:
        return number_kind(node.args[0].value, scope, depth)
    if name == "builtins.round":
        return "int" if len(node.args) == 1 else "number"
    if name is not None and name.startswith("math."):
        return "int" if name[5:] in _INT_MATH else "float"
    if name in ("builtins.min", "builtins.max") and len(node.args) > 1:
        kinds = [number_kind(arg.value, scope, depth) if not arg.star else None for arg in node.args]
        found: NumberKind | None = kinds[0]
        for kind in kinds[1:]:
            found = _either(found, kind)
        return found
    if isinstance(node.func, cst.Attribute):
        method = node.func.attr.value
        if method == "size" and len(node.args) == 1 and not (node.args[0].keyword or node.args[0].star):
            return "int"
        if method in _INT_METHODS and not node.args:
            return "int"
        if method == "item" and not node.args:
            return "number"
    return None


def _size_entry(node: cst.Subscript) -> bool:
    """`x.shape[-1]`, `x.size()[0]`: one entry (not a slice) of a tensor's size."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return False
    value = node.value
    if isinstance(value, cst.Attribute):
        return value.attr.value == "shape"
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "size"
        and not value.args
    )


def _name(node: cst.Name, scope: Scope, depth: int) -> NumberKind | None:
    found = scope.lookup(node.value)
    if found is None:
        return None
    bindings = found[1]
    if len(bindings) == 1 and isinstance(bindings[0].node, cst.Param):
        annotation = bindings[0].node.annotation
        written = annotation.annotation if annotation is not None else None
        return _ANNOTATIONS.get(written.value) if isinstance(written, cst.Name) else None
    assigned = assigned_values(node, scope) if depth < _MAX_DEPTH else None
    if assigned is None:
        return None
    values, owner = assigned
    kind: NumberKind | None = number_kind(values[0], owner, depth + 1)
    for value in values[1:]:
        kind = _either(kind, number_kind(value, owner, depth + 1))
    return kind
