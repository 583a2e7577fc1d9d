"""Function parameters as the project analysis names them, on both sides of a call.

A summary says what a function does with its parameters (`"save_checkpoint"`,
position 0, `"encoder"`); a caller's check finds the argument a call passes for
one (`argument(call, position, name)`), and the callee's check asks whether a
name it reads is one of its own parameters, and which. Functions are named as
summaries name them: `"f"` for a module-level function, `"Class.method"` for a
method of a module-level class; anything nested has no name (no summary).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import libcst as cst

from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.syntax import keyword, positional


class Parameter(NamedTuple):
    """A parameter of a named function: its position among the positional parameters
    (None when keyword-only) and its name."""

    function: str
    position: int | None
    name: str


def function_qualname(scope: Scope) -> str | None:
    """`"f"` or `"Class.method"` for the scope of a module-level function or method."""
    node = scope.node
    parent = scope.parent
    if scope.kind != "function" or not isinstance(node, cst.FunctionDef) or parent is None:
        return None
    if parent.kind == "module":
        return node.name.value
    if parent.kind == "class" and parent.parent is not None and parent.parent.kind == "module":
        assert isinstance(parent.node, cst.ClassDef)
        return f"{parent.node.name.value}.{node.name.value}"
    return None


def parameter_of(node: cst.BaseExpression, scope: Scope) -> Parameter | None:
    """The parameter of a named function that `node` (a name) is, when that is its only binding
    (a name rebound in the body is no longer only the caller's argument)."""
    if not isinstance(node, cst.Name):
        return None
    found = scope.lookup(node.value)
    if found is None or len(found[1]) != 1:
        return None
    owner, (binding,) = found
    param = binding.node
    function = function_qualname(owner)
    if function is None or not isinstance(param, cst.Param) or not isinstance(owner.node, cst.FunctionDef):
        return None
    params = owner.node.params
    positional = [*params.posonly_params, *params.params]
    if any(param is p for p in positional):
        return Parameter(function, next(i for i, p in enumerate(positional) if p is param), node.value)
    if any(param is p for p in params.kwonly_params):
        return Parameter(function, None, node.value)
    return None  # `*args`, `**kwargs`


def passed_arguments(call: cst.Call, parameters: Iterable[tuple[int | None, str]]) -> list[cst.Arg]:
    """The arguments `call` passes for these parameters (call position, name): by keyword, or at
    that position when no `*args` comes before it."""
    given = positional(call)
    found = []
    for position, name in parameters:
        arg = keyword(call, name)
        if arg is None and position is not None and position < len(given):
            arg = given[position]
        if arg is not None:
            found.append(arg)
    return found
