"""Moves made by a helper of the file: `inputs = to_inputs(batch, device=self.device)` where
`def to_inputs(batch, device): return {"x": batch.x.to(device), ...}` moves (parts of) the
parameter its argument binds. For TDL204 the call is then a move of that argument, to where the
helper's move goes: a device parameter of the helper is read at the call (`"cpu"` passed there
is no move to an accelerator), its default when the call leaves it out. Methods (`self.to_inputs`)
and other files' helpers are not followed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data.batches import batch_base
from torchdev_lint.analysis.knowledge.devices import CPU, VARIABLE, Device, Move, as_move, device_argument
from torchdev_lint.analysis.project.parameters import passed_arguments
from torchdev_lint.analysis.syntax.loops import names_in
from torchdev_lint.analysis.syntax.scopes import Scope, open_scope, parameters
from torchdev_lint.analysis.syntax.units import remember
from torchdev_lint.analysis.syntax.walk import first
from torchdev_lint.analysis.values.parameter_moves import file_function, parameter_taking

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

_NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_REBINDING = (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For)


def helper_moves(call: cst.Call, scope: Scope, ctx: FileContext) -> list[Move]:
    """Each argument of `call` that a module-level function of this file, or a method of the class
    around (`self.to_inputs(batch)`), moves to a device (the parameter it binds, or a part of it:
    `batch.x.to(device)`, `batch["image"].cuda()`), as a move of the argument; none when `call`
    names no such function."""
    if not call.args:
        return []
    callee, bound = _callee(call.func, scope)
    if callee is None:
        return []
    module = scope.module
    moved = remember(ctx, "moved parameters", callee, lambda: _moved_parameters(callee, module))
    found = []
    for arg in call.args if moved else ():
        name = None if arg.star else parameter_taking(call, arg, callee, bound=bound)
        move = moved.get(name) if name is not None else None
        device = _device_at_call(move, callee, call, scope, bound) if move is not None else None
        if device is not None:
            # Not known to be the CPU: a device held elsewhere (whether the helper needs CUDA is
            # the helper's business: the pin TDL204 writes then asks whether CUDA is there).
            found.append(Move(call, arg.value, CPU if device.type == "cpu" else VARIABLE, None))
    return found


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


def _moved_parameters(function: cst.FunctionDef, module: Scope) -> dict[str, Move]:
    """The parameters `function`'s own body (nested functions left out) moves, or a part of each,
    with the first such move; a parameter rebound there is left out (the moved value may not be the
    argument). `.to(name)` of another parameter counts, its device told at the call."""
    names = {param.name.value for param in parameters(function)}
    rebound: set[str] = set()
    moves: dict[str, Move] = {}
    scope: Scope | None = None

    def note(node: cst.CSTNode) -> bool:
        nonlocal scope
        kind = type(node)
        if kind in _REBINDING:
            rebound.update(names_in(node.target) & names)  # type: ignore[attr-defined]
        elif kind is cst.Call:
            scope = scope or open_scope(function, module)
            move = (as_move(node, scope) if scope is not None else None) or _to_parameter(node, names)  # type: ignore[arg-type]
            base = batch_base(move.receiver) if move is not None else None
            if move is not None and base in names:
                moves.setdefault(base, move)
        return False

    first(function.body, note, prune=_NESTED)
    return {name: move for name, move in moves.items() if name not in rebound}


def _to_parameter(call: cst.Call, names: set[str]) -> Move | None:
    """`x.to(target)` where `target` is a parameter of the function: a move wherever the caller
    passes a device there."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "to" and len(call.args) == 1):
        return None
    arg = call.args[0]
    if (
        arg.keyword is not None
        or arg.star
        or not isinstance(arg.value, cst.Name)
        or arg.value.value not in names
    ):
        return None
    return Move(call, func.value, VARIABLE, arg.value)


def _device_at_call(
    move: Move, callee: cst.FunctionDef, call: cst.Call, scope: Scope, bound: bool
) -> Device | None:
    """Where the helper's move goes, seen from the call (None: no move there, a dtype or a tensor
    passed): a parameter of the helper naming the device is the argument the call passes for it,
    or its default."""
    node = move.device_node
    params = callee.params
    positional = [*params.posonly_params, *params.params][1 if bound else 0 :]
    slots: list[tuple[int | None, cst.Param]] = list(enumerate(positional))
    slots += [(None, p) for p in params.kwonly_params]
    param = next(
        (slot for slot in slots if isinstance(node, cst.Name) and slot[1].name.value == node.value), None
    )
    if param is None:
        return move.device
    position, declared = param
    given = passed_arguments(call, [(position, declared.name.value)])
    if given:
        return device_argument(given[0].value, scope)
    if declared.default is not None:
        return device_argument(declared.default, scope.module)
    return None
