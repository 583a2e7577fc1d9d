"""Moves made by a helper: `inputs = to_inputs(batch, device=self.device)` where
`def to_inputs(batch, device): return {"x": batch.x.to(device), ...}` moves (parts of) the
parameter its argument binds. For TDL204 the call is then a move of that argument, to where the
helper's move goes: a device parameter of the helper is read at the call (`"cpu"` passed there
is no move to an accelerator), its default when the call leaves it out.

A helper of the file (a module-level function, or a method of the class around called through
`self`) is read here; a module-level function of another project file through pass 1's summary
(`moved_arguments`: `parameter_move` of each of its moves) and the file's facts
(`FileFacts.argument_moves`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import libcst as cst

from torchdev_lint.analysis.data.batches import batch_base, through_comprehensions
from torchdev_lint.analysis.knowledge.devices import CPU, VARIABLE, Device, Move, as_move, device_argument
from torchdev_lint.analysis.project.parameters import Parameter, parameter_of, passed_arguments
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, open_scope
from torchdev_lint.analysis.syntax.units import remember
from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.analysis.values.parameter_moves import file_function

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

_NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
# Where a move goes when no device parameter of the helper decides it (or the call leaves that
# parameter out): the CPU, a device not known to be the CPU, or nowhere known (no move).
CPU_PLACE, ACCELERATOR_PLACE, NO_PLACE = "cpu", "accelerator", ""


class ParameterMove(NamedTuple):
    """A function's move of one of its parameters (or a part of it: `batch.x.to(device)`)."""

    moved: Parameter
    device: Parameter | None  # the function's parameter naming where it goes, if one does
    place: str  # where it goes without `device` (its default), or always when `device` is None


def parameter_move(call: cst.Call, scope: Scope, ancestors: Sequence[cst.CSTNode]) -> ParameterMove | None:
    """`call` (the last of `ancestors`, in the function of `scope`) as a move of a parameter of
    that function bound once (`batch.to(device)`, `sample["image"].cuda()`, `v.to(device) for k, v
    in batch.items()`, `x.to(target)` with `target` a parameter too: a move wherever the caller
    passes a device there)."""
    move = as_move(call, scope) or _to_parameter(call, scope)
    base = batch_base(move.receiver) if move is not None else None
    if move is None or base is None:
        return None
    moved = parameter_of(cst.Name(through_comprehensions(base, ancestors)), scope)
    if moved is None:
        return None
    device = parameter_of(move.device_node, scope) if move.device_node is not None else None
    if device is not None and device.function == moved.function:
        return ParameterMove(moved, device, _place(_default(device, scope), scope))
    return ParameterMove(moved, None, CPU_PLACE if move.device.type == "cpu" else ACCELERATOR_PLACE)


def _to_parameter(call: cst.Call, scope: Scope) -> Move | None:
    """`x.to(target)` where `target` is a parameter (whatever its name says)."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "to" and len(call.args) == 1):
        return None
    arg = call.args[0]
    if arg.keyword is not None or arg.star or parameter_of(arg.value, scope) is None:
        return None
    return Move(call, func.value, VARIABLE, arg.value)


def _default(parameter: Parameter, scope: Scope) -> cst.BaseExpression | None:
    found = scope.lookup(parameter.name)
    param = found[1][0].node if found is not None else None
    return param.default if isinstance(param, cst.Param) else None


def _place(node: cst.BaseExpression | None, scope: Scope) -> str:
    device = device_argument(node, scope) if node is not None else None
    if device is None:
        return NO_PLACE
    return CPU_PLACE if device.type == "cpu" else ACCELERATOR_PLACE


def helper_moves(call: cst.Call, scope: Scope, ctx: FileContext) -> list[Move]:
    """Each argument of `call` that a helper moves to a device (see the module's docstring), as a
    move of the argument; none when `call` names no such helper."""
    if not call.args:
        return []
    callee, bound = _callee(call.func, scope)
    if callee is not None:
        module = scope.module
        moves: list[ParameterMove] = remember(
            ctx, "parameter moves", callee, lambda: _parameter_moves(callee, module)
        )
    else:
        moves = _summarised_moves(call, ctx)
    moved = []
    for move in moves:
        args = passed_arguments(call, [_slot(move.moved, bound)])
        device = _device(_given(call, move.device, bound), move.place, scope)
        if args and device is not None:
            # Not known to be the CPU: a device held elsewhere (whether the helper needs CUDA is
            # the helper's business: the pin TDL204 writes then asks whether CUDA is there).
            moved.append(Move(call, args[0].value, CPU if device.type == "cpu" else VARIABLE, None))
    return moved


def _summarised_moves(call: cst.Call, ctx: FileContext) -> list[ParameterMove]:
    """The moves of a module-level function of another file `call` names, as its file's facts
    carry pass 1's summary of them (`FileFacts.argument_moves`)."""
    text = dotted_name(call.func)
    facts = ctx.project
    entries = facts.moved_arguments(text) if facts is not None and text is not None else ()
    return [
        ParameterMove(
            Parameter(text or "", None if position < 0 else position, name),
            Parameter(text or "", None if device_position < 0 else device_position, device)
            if device
            else None,
            place,
        )
        for position, name, device_position, device, place in entries
    ]


def _slot(parameter: Parameter, bound: bool) -> tuple[int | None, str]:
    """Where a call passes `parameter` positionally (one less through `self`) and its name."""
    position = parameter.position
    if bound and position is not None:
        position = position - 1 if position > 0 else None
    return position, parameter.name


def _given(call: cst.Call, device: Parameter | None, bound: bool) -> list[cst.Arg]:
    return passed_arguments(call, [_slot(device, bound)]) if device is not None else []


def _device(given: list[cst.Arg], place: str, scope: Scope) -> Device | None:
    """Where the helper's move goes, seen from the call: the device the call passes for the
    helper's device parameter (None when what it passes is not known to be one: a dtype, a
    tensor), or the place without it."""
    if given:
        return device_argument(given[0].value, scope)
    return CPU if place == CPU_PLACE else VARIABLE if place == ACCELERATOR_PLACE else None


def _callee(func: cst.BaseExpression, scope: Scope) -> tuple[cst.FunctionDef | None, bool]:
    """The function of this file `func` names, and whether it is a method bound to `self`."""
    if isinstance(func, cst.Name):
        return file_function(func, scope.module), False
    owner = scope.enclosing_class
    if not (
        owner is not None
        and isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
    ):
        return None, False
    bindings = owner.bindings.get(func.attr.value, [])
    node = bindings[0].node if len(bindings) == 1 else None
    return (node, True) if isinstance(node, cst.FunctionDef) else (None, False)


def _parameter_moves(function: cst.FunctionDef, module: Scope) -> list[ParameterMove]:
    """The first move of each parameter in `function`'s own body (nested functions left out)."""
    scope = open_scope(function, module)
    if scope is None:
        return []
    found: dict[str, ParameterMove] = {}
    ancestors: list[cst.CSTNode] = []
    nested = 0  # functions, classes and lambdas entered inside the body

    def enter(node: cst.CSTNode) -> None:
        nonlocal nested
        ancestors.append(node)
        if type(node) in _NESTED:
            nested += 1
        elif type(node) is cst.Call and not nested:
            move = parameter_move(node, scope, ancestors)
            if move is not None:
                found.setdefault(move.moved.name, move)

    def leave(node: cst.CSTNode) -> None:
        nonlocal nested
        ancestors.pop()
        if type(node) in _NESTED:
            nested -= 1

    walk(function.body, enter, leave)
    return list(found.values())
