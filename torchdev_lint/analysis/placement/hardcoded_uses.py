"""TDL301's hard-coded CUDA uses of one module, gathered as the traversal passes them.

A use is `.cuda()`, a CUDA literal given to `.to(...)`, `torch.device(...)` or `device=`, or
assigned to a name that holds a device (`DEVICE = "cuda"`). Harmless ones are left out
(`device_contexts.harmless_here`), and all of them in a project that says it is CUDA-only
(`device-policy = "cuda-only"`); the rest are grouped per statement (one finding each), with
the edits of the fix (`device_edits`) and the tensor a move follows (`if mask.is_cuda:`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.context.device_contexts import (
    configures,
    device_object_harmless,
    discarded_tensor_move,
    harmless_here,
    names_device,
    overridden_by_exec,
    torch_cuda_signature,
)
from torchdev_lint.analysis.context.guards import cuda_choices, followed_tensor, names_gpu
from torchdev_lint.analysis.knowledge.torch_api import DEVICE_TYPE_PARAMETERS
from torchdev_lint.analysis.placement.device_edits import (
    StatementUses,
    choice_edit,
    device_call_edit,
    literal_edit,
)
from torchdev_lint.analysis.placement.device_variable import DeviceEdit, DeviceVariable
from torchdev_lint.analysis.project.constructor_defaults import never_overridden_defaults
from torchdev_lint.analysis.syntax.scopes import dotted_name
from torchdev_lint.syntax import keyword, positional

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


class HardcodedUses:
    """The module's hard-coded CUDA uses so far, by statement; `take` hands them over."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.device_variable = DeviceVariable(ctx)
        self._statements: dict[cst.BaseStatement, StatementUses] = {}
        self._cuda_only = ctx.settings.device_policy == "cuda-only"

    def call(self, node: cst.Call) -> None:
        """`.cuda()`, `.to("cuda")`, `torch.device("cuda")`, `f(device="cuda")` (the call being visited)."""
        if self._cuda_only:
            return
        func = node.func
        variable = self.device_variable
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            if isinstance(func.value, cst.Name) and self.ctx.qualname(func.value) == "torch":
                return
            if torch_cuda_signature(node) and not discarded_tensor_move(func, self.ctx):
                self._record(node, node, variable.moved_with_to(node), device_parameter=False)
            return
        scope = self.ctx.scope
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            args = positional(node)
            if args and not discarded_tensor_move(func, self.ctx):
                for literal in cuda_choices(args[0].value, scope):
                    self._record(literal, node, literal_edit(variable, literal))
        elif self.ctx.qualname(func) == "torch.device":
            args = positional(node)
            if args and not device_object_harmless(node, self.ctx.ancestors):
                for literal in cuda_choices(args[0].value, scope):
                    self._record(literal, node, device_call_edit(variable, node, literal))
        given = keyword(node, "device")
        if (
            given is not None
            and not configures(node)
            and self.ctx.qualname(func) not in DEVICE_TYPE_PARAMETERS
        ):
            for literal in cuda_choices(given.value, scope):
                self._record(literal, node, literal_edit(variable, literal))

    def assign(self, node: cst.Assign) -> None:
        """`DEVICE = "cuda"`, `self.device = "xpu" if xpu_ok() else "cuda"` (not a setting: `args.device`)."""
        literals = [] if self._cuda_only else cuda_choices(node.value, self.ctx.scope)
        if literals and overridden_by_exec(self.ctx.ancestors):
            return
        for target in node.targets if literals else ():
            name = dotted_name(target.target)
            if name is not None and names_device(name):
                for literal in literals:
                    self._record(literal, node, choice_edit(self.device_variable, literal, node.value))
                return

    def unpassed_defaults(self, function: cst.FunctionDef) -> list[tuple[str, cst.Param, cst.BaseExpression]]:
        """(class, parameter, default) of each CUDA default of this `__init__` that no construction in
        the project passes (`constructor_defaults`) and that is not harmless where it is written."""
        if self._cuda_only:
            return []
        found = never_overridden_defaults(function, self.ctx.scope, self.ctx.project)
        return [
            (owner, param, default)
            for owner, param, default in found
            if not harmless_here(default, param, self.ctx, device_parameter=False)
        ]

    def take(self) -> list[StatementUses]:
        """The uses gathered, one entry per statement, forgotten here."""
        found = list(self._statements.values())
        self._statements.clear()
        return found

    def _record(
        self,
        node: cst.BaseExpression,
        site: cst.CSTNode,
        edit: DeviceEdit | None,
        *,
        device_parameter: bool = True,
    ) -> None:
        """Record a use at `node` (inside `site`, the call or assignment) unless it is harmless; under
        a test of a tensor's device (`if mask.is_cuda:`) it should follow that tensor instead."""
        ctx = self.ctx
        if harmless_here(node, site, ctx, device_parameter=device_parameter):
            return
        tensor = followed_tensor(site, ctx.ancestors)
        if tensor is not None and names_gpu(node):
            return  # `y.cuda(bias.get_device())` under `if bias.is_cuda:` names the GPU it follows
        statement = next(a for a in reversed(ctx.ancestors) if isinstance(a, cst.BaseStatement))
        uses = self._statements.setdefault(statement, StatementUses())
        uses.add(node, edit)
        if tensor is not None:
            uses.followed = ctx.code_for(tensor)
