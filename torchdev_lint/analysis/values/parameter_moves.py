"""Functions of a file that move a tensor parameter before anything else reads it (`sv = sv.to(x)`,
the first statement that names `sv`): an argument passed there is moved where it is used, so a
module attribute handed to such a helper follows the input's device (TDL313)."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.knowledge.torch_api import MATCHING_METHODS
from torchdev_lint.analysis.project.parameters import passed_arguments
from torchdev_lint.analysis.syntax.scopes import Scope, block_statements
from torchdev_lint.analysis.syntax.walk import first


def file_function(func: cst.BaseExpression, module: Scope) -> cst.FunctionDef | None:
    """The module-level function of this file that `func` names, when it is bound once."""
    bindings = module.bindings.get(func.value, []) if isinstance(func, cst.Name) else []
    node = bindings[0].node if len(bindings) == 1 else None
    return node if isinstance(node, cst.FunctionDef) else None


def parameter_taking(
    call: cst.Call, arg: cst.Arg, callee: cst.FunctionDef, *, bound: bool = False
) -> str | None:
    """The name of `callee`'s parameter that `arg` of `call` binds (by keyword or position);
    `bound`: a method called on its instance (`self.helper(...)`), whose first parameter is taken."""
    params = callee.params
    positional = [*params.posonly_params, *params.params][1 if bound else 0 :]
    slots: list[tuple[int | None, str]] = [
        (position, param.name.value) for position, param in enumerate(positional)
    ]
    slots += [(None, param.name.value) for param in params.kwonly_params]
    return next(
        (
            name
            for slot, name in slots
            if any(given is arg for given in passed_arguments(call, [(slot, name)]))
        ),
        None,
    )


def moved_on_entry(function: cst.FunctionDef, parameter: str) -> bool:
    """Does the first statement of `function` that names `parameter` rebind it moved
    (`sv = sv.to(x)`, `mu = mu.to(img).repeat(n, 1)`, `w = w.type_as(x).T`)?"""
    for statement in block_statements(function.body):
        if first(statement, lambda node: type(node) is cst.Name and node.value == parameter) is not None:
            return _rebinds_moved(statement, parameter)
    return False


def _rebinds_moved(statement: cst.BaseStatement, name: str) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if not (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and small.targets[0].target.value == name
    ):
        return False
    node: cst.BaseExpression = small.value
    moved = False
    while True:  # down a chain of method calls, attributes and subscripts: `w.to(x).T[0]`
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            moved = moved or node.func.attr.value in MATCHING_METHODS
            node = node.func.value
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return moved and isinstance(node, cst.Name) and node.value == name
