"""The edits of TDL301's fix: each hard-coded CUDA use of a statement routed through the module's
one device variable (`analysis/placement/device_variable.py`), gathered per statement (`StatementUses`).

`"cuda"` and `torch.device("cuda")` become the variable; `DEVICE = "cuda"` becomes the choice
itself (`"cuda" if torch.cuda.is_available() else "cpu"`). An indexed `"cuda:1"` names one GPU
and has no edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.placement.device_variable import DeviceEdit, DeviceVariable
from torchdev_lint.analysis.syntax.walk import contains

if TYPE_CHECKING:
    from torchdev_lint.rule import Replacement


def literal_edit(variable: DeviceVariable, literal: cst.BaseExpression) -> DeviceEdit | None:
    """`"cuda"` → `device`."""
    if not isinstance(literal, cst.SimpleString) or literal.evaluated_value != "cuda":
        return None
    return variable.through(literal, lambda name: name)


def device_call_edit(
    variable: DeviceVariable, call: cst.Call, literal: cst.BaseExpression
) -> DeviceEdit | None:
    """`torch.device("cuda")` → `device`; as the value of an assignment it becomes the choice itself.
    No edit for a `literal` in a conditional (`torch.device("xpu" if xpu else "cuda")`)."""
    if len(call.args) != 1 or literal is not call.args[0].value:
        return None
    if isinstance(variable.ctx.parent(), cst.Assign):
        return choice_edit(variable, literal, literal)
    if not isinstance(literal, cst.SimpleString) or literal.evaluated_value != "cuda":
        return None
    return variable.through(call, lambda name: name)


def choice_edit(
    variable: DeviceVariable, literal: cst.BaseExpression, value: cst.BaseExpression
) -> DeviceEdit | None:
    """`DEVICE = "cuda"` → `DEVICE = "cuda" if torch.cuda.is_available() else "cpu"`: the one definition.
    No edit for a `literal` inside the assigned `value` (`"xpu" if xpu else "cuda"`)."""
    if literal is not value or not isinstance(literal, cst.SimpleString):
        return None
    choice = variable.choice(literal, literal)
    return None if choice is None else DeviceEdit(literal, choice, None)


@dataclass
class StatementUses:
    """The hard-coded uses of one statement (one finding), their edits, and the tensor the statement
    follows (`mask` under `if mask.is_cuda:`), as written, if any."""

    nodes: list[cst.BaseExpression] = field(default_factory=list)
    edits: list[DeviceEdit] = field(default_factory=list)
    followed: str | None = None

    def add(self, node: cst.BaseExpression, edit: DeviceEdit | None) -> None:
        self.nodes.append(node)
        if edit is not None:
            self.edits.append(edit)

    def replacements(self) -> dict[cst.CSTNode, Replacement] | None:
        """One replacement map for every use (an edit inside another is dropped), plus the variable's
        definition when the module lacks one; None without edits, or when the statement follows a
        tensor (the module's variable is not where that tensor lives)."""
        edits = [e for e in self.edits if not any(o is not e and contains(o.old, e.old) for o in self.edits)]
        if not edits or self.followed is not None:
            return None
        replacements: dict[cst.CSTNode, Replacement] = {e.old: e.new for e in edits}
        definition = next((e.definition for e in edits if e.definition is not None), None)
        if definition is not None:
            anchor, statement = definition
            replacements[anchor] = cst.FlattenSentinel([anchor, statement])
        return replacements
