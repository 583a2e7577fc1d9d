"""One module-level device variable for fixes that replace a hard-coded CUDA device.

`x.cuda()` and `torch.device("cuda")` become `x.to(device)` and `device`,
where `device` is the module's existing `torch.device("cuda" if
torch.cuda.is_available() else "cpu")` when it binds one before the site, or
a new definition placed after the import of torch (under a name the module
does not use yet). Asked at the site being fixed (it reads the traversal's
ancestors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.context.availability import is_availability_call
from torchdev_lint.analysis.knowledge.devices import literal_device
from torchdev_lint.analysis.syntax.scopes import Scope, module_reference, resolve
from torchdev_lint.analysis.syntax.walk import contains, walk
from torchdev_lint.syntax import positional

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# The names a new definition may take, in order of preference.
_DEFINITION_NAMES = ("device", "default_device", "compute_device")


@dataclass(frozen=True)
class DeviceEdit:
    """One use rewritten; `definition` is the (anchor, statement) that defines the variable, when missing."""

    old: cst.CSTNode
    new: cst.BaseExpression
    definition: tuple[cst.BaseStatement, cst.SimpleStatementLine] | None


class DeviceVariable:
    """Builds the edits that route a use through the module's device variable (see the module docstring)."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._names_in_use: set[str] | None = None

    def choice(self, at: cst.CSTNode, cuda: cst.SimpleString | None = None) -> cst.IfExp | None:
        """`"cuda" if torch.cuda.is_available() else "cpu"`, in the quotes legal at `at`."""
        torch = module_reference(self.ctx.scope, "torch")
        cpu = self.ctx.string("cpu", at=at)
        cuda = cuda or self.ctx.string("cuda", at=at)
        if torch is None or cpu is None or cuda is None:
            return None
        available = cst.Attribute(
            value=cst.Attribute(value=torch, attr=cst.Name("cuda")), attr=cst.Name("is_available")
        )
        return cst.IfExp(test=cst.Call(func=available), body=cuda, orelse=cpu)

    def moved_with_to(self, call: cst.Call) -> DeviceEdit | None:
        """`x.cuda(non_blocking=True)` → `x.to(device, non_blocking=True)`; `.cuda(1)` has no fix."""
        assert isinstance(call.func, cst.Attribute)
        if positional(call) or any(arg.star for arg in call.args):
            return None
        func = call.func.with_changes(attr=cst.Name("to"))
        rest = list(call.args)

        def moved(name: cst.Name) -> cst.BaseExpression:
            comma = (
                cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if rest else cst.MaybeSentinel.DEFAULT
            )
            return call.with_changes(func=func, args=[cst.Arg(name, comma=comma), *rest])

        return self.through(call, moved)

    def through(
        self, old: cst.BaseExpression, build: Callable[[cst.Name], cst.BaseExpression]
    ) -> DeviceEdit | None:
        """Replace `old` by an expression of the module's device variable, defining it if needed;
        None when no fix is built (findings only: the free name costs a walk of the module)."""
        if not self.ctx.fixes:
            return None
        scope = self.ctx.scope
        existing = self._existing_definition()
        if existing is not None:
            return DeviceEdit(old, build(cst.Name(existing)), None)
        site_index = _top_level_index(self.ctx.ancestors)
        if module_reference(scope.module, "torch") is None or site_index is None:
            return None
        name = self._free_name()
        anchor = self._anchor()
        if name is None or anchor is None or (not self._in_function() and site_index <= anchor[0]):
            return None
        definition = self._definition(name, anchor[1])
        if definition is None:
            return None
        return DeviceEdit(old, build(cst.Name(name)), (anchor[1], definition))

    def _existing_definition(self) -> str | None:
        """A module-level name bound once to the device choice, visible here and defined before this code."""
        module = self.ctx.scope.module
        body = module.node.body  # type: ignore[attr-defined]
        site_index = _top_level_index(self.ctx.ancestors)
        for name, bindings in module.bindings.items():
            if (
                len(bindings) != 1
                or bindings[0].value is None
                or not self._is_choice(bindings[0].value, module)
            ):
                continue
            found = self.ctx.scope.lookup(name)
            if found is None or found[0] is not module:
                continue
            index = next((i for i, s in enumerate(body) if contains(s, bindings[0].node)), None)
            if index is not None and (self._in_function() or (site_index or 0) > index):
                return name
        return None

    def _in_function(self) -> bool:
        """Code in a function runs after the module has been executed, definitions included."""
        return any(isinstance(a, (cst.FunctionDef, cst.Lambda)) for a in self.ctx.ancestors)

    def _is_choice(self, value: cst.BaseExpression, scope: Scope) -> bool:
        """`"cuda" if torch.cuda.is_available() else "cpu"`, bare or in `torch.device(...)`."""
        if (
            isinstance(value, cst.Call)
            and resolve(value.func, scope) == "torch.device"
            and len(value.args) == 1
        ):
            value = value.args[0].value
        return (
            isinstance(value, cst.IfExp)
            and is_availability_call(value.test, scope)
            and isinstance(value.body, cst.SimpleString)
            and value.body.evaluated_value == "cuda"
            and (fallback := literal_device(value.orelse)) is not None
            and fallback.type == "cpu"
        )

    def _free_name(self) -> str | None:
        """`device`, unless the module already uses that name anywhere (then another)."""
        if self._names_in_use is None:
            self._names_in_use = _names_in_use(self.ctx.module)
        return next((n for n in _DEFINITION_NAMES if n not in self._names_in_use), None)

    def _anchor(self) -> tuple[int, cst.BaseStatement] | None:
        """The top-level statement after which the definition goes: the import of torch and the imports after it."""
        body = self.ctx.module.body
        torch = module_reference(self.ctx.scope.module, "torch")
        bindings = self.ctx.scope.module.bindings.get(torch.value, []) if torch is not None else []
        start = next(
            (i for i, s in enumerate(body) for b in bindings if b.import_target and contains(s, b.node)),
            None,
        )
        if start is None:
            return None
        end = start
        while end + 1 < len(body) and _is_import_line(body[end + 1]):
            end += 1
        return end, body[end]

    def _definition(self, name: str, anchor: cst.BaseStatement) -> cst.SimpleStatementLine | None:
        torch = module_reference(self.ctx.scope.module, "torch")
        choice = self.choice(anchor)
        if torch is None or choice is None:
            return None
        value = cst.Call(func=cst.Attribute(value=torch, attr=cst.Name("device")), args=[cst.Arg(choice)])
        return cst.SimpleStatementLine(
            body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value)],
            leading_lines=[cst.EmptyLine()],
        )


def _top_level_index(ancestors: list[cst.CSTNode]) -> int | None:
    """Index in the module body of the top-level statement holding the current node."""
    if len(ancestors) < 2 or not isinstance(ancestors[0], cst.Module):
        return None
    statement = ancestors[1]
    return next((i for i, s in enumerate(ancestors[0].body) if s is statement), None)


def _is_import_line(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _names_in_use(module: cst.Module) -> set[str]:
    """Every name the module binds or reads (not attribute names or keyword-argument names)."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = []

    def enter(node: cst.CSTNode) -> None:
        parent = stack[-1] if stack else None
        stack.append(node)
        if not isinstance(node, cst.Name):
            return
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            return
        names.add(node.value)

    walk(module, enter, lambda node: stack.pop())
    return names
