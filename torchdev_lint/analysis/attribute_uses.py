"""How the methods of an nn.Module subclass use the tensors `__init__` stores on `self`.

For each `self.<name>` tensor attribute: whether another method moves or
re-creates it, and per use whether the statement also reads the method's
inputs (or locals derived from them) and which other module attributes it
reads; and for the class, which names are registered as buffers, parameters
or submodules (by name, or dynamically).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst

from torchdev_lint.analysis.module_classes import local_names, self_attribute
from torchdev_lint.analysis.scopes import BUILTIN_NAMES, Scope, dotted_name, resolve
from torchdev_lint.analysis.torch_api import HOST_RESULT_METHODS, MATCHING_METHODS, REGISTERING_METHODS

# Reads that stay on the host: the tensor's device never meets an input's.
_HOST_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "T"})
_HOST_BUILTINS = frozenset(
    {"len", "int", "float", "bool", "str", "repr", "print", "isinstance", "id", "range"}
)


@dataclass
class TensorAttribute:
    """A `self.name = <tensor>` of `__init__`, and what the other methods do with it."""

    assignment: cst.Assign | cst.AnnAssign
    after_module_init: bool
    # Per use in another method: whether its statement reads the method's inputs or
    # locals, and the module attributes it reads.
    uses: list[tuple[bool, set[str]]] = field(default_factory=list)
    moved_or_recreated: bool = False


@dataclass
class ClassRegistrations:
    """What a module class registers (buffers, parameters, submodules) and how often it assigns each attribute."""

    registered: set[str] = field(default_factory=set)  # by register_buffer/register_parameter/setattr
    dynamic_registration: bool = False
    state: set[str] = field(default_factory=set)  # parameters and submodules assigned in `__init__`
    assignments: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class AttributeUses(cst.CSTVisitor):
    """What one method does with the tensor attributes of `__init__`."""

    def __init__(
        self,
        scope: Scope,
        method: cst.FunctionDef,
        self_name: str,
        attributes: dict[str, TensorAttribute],
        facts: ClassRegistrations,
        is_init: bool,
    ) -> None:
        self.scope = scope
        self.method = method
        self.self_name = self_name
        self.attributes = attributes
        self.facts = facts
        self.is_init = is_init
        self.stack: list[cst.CSTNode] = []
        self.inputs = local_names(method) - {self_name}

    def scan(self) -> None:
        self.method.body.visit(self)

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)  # popped by on_leave, which LibCST calls even for skipped children
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(node, cst.Call):
            self._registration(node)
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and not self.is_init:
            targets = node.targets if isinstance(node, cst.Assign) else [node]
            for target in targets:
                attribute = self.attributes.get(self_attribute(target.target, self.self_name) or "")
                if attribute is not None:
                    attribute.moved_or_recreated = True
        if isinstance(node, cst.Attribute) and not self.is_init:
            name = self_attribute(node, self.self_name)
            attribute = self.attributes.get(name or "")
            if attribute is not None:
                self._judge(node, attribute)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()

    def _registration(self, call: cst.Call) -> None:
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and func.attr.value in REGISTERING_METHODS
            and dotted_name(func.value) == self.self_name
        ):
            if isinstance(func, cst.Name) and func.value == "setattr" and call.args:
                self._registered_name(call.args[1].value if len(call.args) > 1 else None)
            return
        self._registered_name(call.args[0].value if call.args else None)

    def _registered_name(self, node: cst.BaseExpression | None) -> None:
        if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
            self.facts.registered.add(node.evaluated_value)
        else:
            self.facts.dynamic_registration = True

    def _judge(self, use: cst.Attribute, attribute: TensorAttribute) -> None:
        """Climb from `self.name` through what keeps it a tensor; decide what the use needs."""
        current: cst.CSTNode = use
        for parent in reversed(self.stack[:-1]):
            if isinstance(parent, cst.Attribute) and parent.value is current:
                if parent.attr.value in MATCHING_METHODS:
                    attribute.moved_or_recreated = True
                    return
                if parent.attr.value in _HOST_ATTRIBUTES or parent.attr.value in HOST_RESULT_METHODS:
                    return
                current = parent
                continue
            if isinstance(parent, cst.Call):
                if parent.func is current:  # `self.name.view(...)`: still the tensor
                    current = parent
                    continue
                name = resolve(parent.func, self.scope)
                if name is not None and name.removeprefix("builtins.") in _HOST_BUILTINS:
                    return
                if _moves_argument(parent):
                    attribute.moved_or_recreated = True
                    return
                break
            if isinstance(parent, (cst.Arg, cst.Index, cst.SubscriptElement, cst.Slice)):
                current = parent
                continue
            if isinstance(parent, cst.Subscript) and parent.value is current:
                current = parent
                continue
            if isinstance(parent, cst.Comparison) and not _identity_test(parent):
                current = parent  # `self.mask == 0` is a tensor
                continue
            if isinstance(
                parent, (cst.For, cst.Comparison, cst.ComparisonTarget, cst.If, cst.IfExp, cst.While)
            ):
                return
            break
        statement = next((n for n in reversed(self.stack) if isinstance(n, cst.BaseSmallStatement)), None)
        if statement is not None:
            names = _Names(self.self_name)
            # What an assignment stores to is not what it computes with.
            read = statement.value if isinstance(statement, (cst.Assign, cst.AnnAssign)) else statement
            if read is not None:
                read.visit(names)
            attribute.uses.append((bool(names.names & self.inputs), names.attributes))


def _identity_test(comparison: cst.Comparison) -> bool:
    """`x is None`, `k in table`: answered on the host."""
    return any(
        isinstance(target.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn))
        for target in comparison.comparisons
    )


class _Names(cst.CSTVisitor):
    def __init__(self, self_name: str) -> None:
        self.self_name = self_name
        self.names: set[str] = set()
        self.attributes: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = self_attribute(node, self.self_name)
        if name is not None:
            self.attributes.add(name)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value not in BUILTIN_NAMES:
            self.names.add(node.value)


def _moves_argument(call: cst.Call) -> bool:
    """`x.new_tensor(t)`, `torch.as_tensor(t, device=...)`: the argument is copied to a device."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in MATCHING_METHODS:
        return True
    return any(arg.keyword is not None and arg.keyword.value == "device" for arg in call.args)
