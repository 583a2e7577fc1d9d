"""How the methods of an nn.Module subclass use the tensors `__init__` stores on `self`.

Which `self.<name> = <tensor>` of `__init__` are plain tensors (not parameters,
buffers or submodules), and for each `self.<name>` tensor attribute: whether another method moves or
re-creates it (itself, or a value computed from it in the same expression),
and per use whether the statement also reads the method's inputs (or locals
derived from them) and which other module attributes it reads; for the class,
which names are registered as buffers, parameters or submodules (by name, or
dynamically), and which helper methods compute on the host by design (every
caller moves their result to a device).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import as_move, is_dtype
from torchdev_lint.analysis.knowledge.torch_api import (
    HOST_RESULT_METHODS,
    MATCHING_METHODS,
    REGISTERING_METHODS,
)
from torchdev_lint.analysis.syntax.bindings import paired_elements
from torchdev_lint.analysis.syntax.scopes import BUILTIN_NAMES, Scope, dotted_name, resolve
from torchdev_lint.analysis.syntax.walk import visit
from torchdev_lint.analysis.values.kinds import constructs_module
from torchdev_lint.analysis.values.module_classes import (
    init_statements,
    initialises_module,
    instance_name,
    local_names,
    self_attribute,
    value_assignments,
)
from torchdev_lint.analysis.values.parameter_moves import file_function, moved_on_entry, parameter_taking
from torchdev_lint.analysis.values.tensor_rank import TensorRank

# Reads that stay on the host: the tensor's device never meets an input's.
_HOST_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "T"})
_HOST_BUILTINS = frozenset(
    {"len", "int", "float", "bool", "str", "repr", "print", "isinstance", "id", "range"}
)
# What `model.to()` moves when assigned in `__init__`: parameters and buffers.
_PARAMETERS = frozenset(
    {"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer"}
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


def tensor_attributes(
    scope: Scope, init: cst.FunctionDef, self_name: str, facts: ClassRegistrations
) -> dict[str, TensorAttribute]:
    """`self.name = <tensor>` statements of `__init__` (a tensor of rank > 0 left on the default
    device, also through the local tensors it comes from); records the class's parameters and
    submodules and how often each attribute is assigned in `facts`."""
    locals_: dict[str, list[cst.BaseExpression]] = defaultdict(list)
    found: dict[str, TensorAttribute] = {}
    module_ready = False
    for statement in init_statements(init.body):
        if initialises_module(statement):
            module_ready = True
            continue
        for small in value_assignments(statement):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            assert small.value is not None
            for target, value in _paired_targets(targets, small.value):
                if isinstance(target, cst.Name):
                    locals_[target.value].append(value)
                attr = self_attribute(target, self_name)
                if attr is None:
                    continue
                facts.assignments[attr] += 1
                if _is_state(value, scope):
                    facts.state.add(attr)
                elif (
                    attr not in found
                    and TensorRank(scope, locals_, self_name, set(found)).rank(value) == "tensor"
                ):
                    found[attr] = TensorAttribute(small, module_ready)
    # Built as a plain tensor, then wrapped: `self.mask = nn.Parameter(self.mask, requires_grad=False)`.
    return {name: attribute for name, attribute in found.items() if name not in facts.state}


def _paired_targets(
    targets: Sequence[cst.BaseExpression], value: cst.BaseExpression
) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Each target with its value; a tuple target with the element of a tuple display it gets
    (`self.mean, self.std = torch.tensor(m), torch.tensor(s)`)."""
    pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
    for target in targets:
        pairs += paired_elements(target, value) or [(target, value)]
    return pairs


def _is_state(value: cst.BaseExpression, scope: Scope) -> bool:
    """A parameter, buffer or submodule: what `model.to()` moves."""
    return constructs_module(value, scope) or (
        isinstance(value, cst.Call) and resolve(value.func, scope) in _PARAMETERS
    )


def scan_methods(
    scope: Scope,
    methods: list[cst.FunctionDef],
    init: cst.FunctionDef,
    attributes: dict[str, TensorAttribute],
    facts: ClassRegistrations,
) -> None:
    """Record every method's uses of the attributes and registrations; the uses in helpers whose
    result every caller moves to a device count as computed on the host."""
    host_helpers = results_moved_by_callers(methods)
    by_name = {method.name.value: method for method in methods}
    for method in methods:
        method_self = instance_name(method)
        if method_self is not None:
            host_side = method.name.value in host_helpers
            AttributeUses(
                scope, method, method_self, attributes, facts, method is init, host_side, by_name
            ).scan()


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
        host_side: bool = False,
        methods: dict[str, cst.FunctionDef] | None = None,
    ) -> None:
        self.scope = scope
        self.method = method
        self.self_name = self_name
        self.attributes = attributes
        self.facts = facts
        self.is_init = is_init
        # A helper whose result every caller moves to a device: its uses compute on the host.
        self.host_side = host_side
        self.stack: list[cst.CSTNode] = []
        self.inputs = local_names(method) - {self_name}
        self.methods = methods or {}  # the class's, by name

    def scan(self) -> None:
        visit(self.method.body, self)

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
                if parent.attr.value in MATCHING_METHODS and not self._casts_only(parent):
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
                if _moves_argument(parent) or (
                    isinstance(current, cst.Arg) and self._moved_by_helper(parent, current)
                ):
                    attribute.moved_or_recreated = True
                    return
                break
            if isinstance(parent, (cst.Arg, cst.Index, cst.SubscriptElement, cst.Slice)):
                current = parent
                continue
            if isinstance(parent, cst.Subscript) and parent.value is current:
                current = parent
                continue
            if isinstance(parent, cst.AssignTarget) and self._stores_host_data(parent):
                return
            if isinstance(parent, cst.Comparison) and not _identity_test(parent):
                current = parent  # `self.mask == 0` is a tensor
                continue
            if isinstance(
                parent,
                (
                    cst.For,
                    cst.Comparison,
                    cst.ComparisonTarget,
                    cst.If,
                    cst.IfExp,
                    cst.While,
                    cst.FormattedStringExpression,  # `f"{self.name}"`: formatted as text, as `str()`
                ),
            ):
                return
            break
        if self._derived_value_moved(current):
            attribute.moved_or_recreated = True
            return
        if self.host_side:
            return
        statement = next((n for n in reversed(self.stack) if isinstance(n, cst.BaseSmallStatement)), None)
        if statement is not None:
            names = _Names(self.self_name)
            # What an assignment stores to is not what it computes with; an index computes apart
            # from what it indexes (`x[:, self.order]`: CUDA tensors take indices on the CPU).
            below = self.stack[self.stack.index(statement) :]
            read: cst.CSTNode | None = next(
                (n for n in reversed(below) if isinstance(n, cst.SubscriptElement)), None
            )
            if read is None:
                read = statement.value if isinstance(statement, (cst.Assign, cst.AnnAssign)) else statement
            if read is not None:
                visit(read, names)
            attribute.uses.append((bool(names.names & self.inputs), names.attributes))

    def _casts_only(self, method: cst.Attribute) -> bool:
        """`self.name.to(x.dtype)`, `.to(torch.float16)`: a cast that leaves the tensor where it is."""
        index = self.stack.index(method)
        call = self.stack[index - 1] if index > 0 else None
        if not (isinstance(call, cst.Call) and call.func is method and method.attr.value == "to"):
            return False
        given = [arg for arg in call.args if arg.keyword is None and not arg.star]
        keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
        return (
            bool(given)
            and is_dtype(given[0].value, self.scope)
            and "device" not in keywords
            and len(given) == 1
        )

    def _moved_by_helper(self, call: cst.Call, arg: cst.Arg) -> bool:
        """`brisque(x, sv=self.sv)` or `self.score(x, self.sv)` where the function of the file moves
        that parameter before anything else reads it (`sv = sv.to(x)`)."""
        method = self.methods.get(self_attribute(call.func, self.self_name) or "")
        callee = method or file_function(call.func, self.scope.module)
        if callee is None:
            return False
        parameter = parameter_taking(call, arg, callee, bound=method is not None)
        return parameter is not None and moved_on_entry(callee, parameter)

    def _stores_host_data(self, target: cst.AssignTarget) -> bool:
        """`self.counts[i:j] = codes.cpu()`: a write of host data into the attribute keeps it a
        host tensor; the statement computes nothing with it on the inputs' device."""
        assignment = self.stack[self.stack.index(target) - 1]
        if not isinstance(assignment, cst.Assign) or not isinstance(assignment.value, cst.Call):
            return False
        move = as_move(assignment.value, self.scope)
        return move is not None and move.device.type == "cpu"

    def _derived_value_moved(self, node: cst.CSTNode) -> bool:
        """`(self.table * w).to(x.device)`, `x.new_tensor(self.table[i])`: what the statement
        computes from the attribute is moved to a device in the same expression."""
        child = node
        for parent in reversed(self.stack[: self.stack.index(node)]):
            if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return False
            if isinstance(parent, cst.Call) and (
                (parent.func is child and moves_to_device(parent))
                or (isinstance(child, cst.Arg) and _moves_argument(parent))
            ):
                return True
            child = parent
        return False


def moves_to_device(call: cst.Call) -> bool:
    """`t.to(x.device)`, `t.to(device)`, `t.cuda()`, `t.type_as(x)`: the result lands on a device the call names."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value in ("cuda", "type_as"):
        return True
    return func.attr.value == "to" and any(_names_device(arg) for arg in call.args)


def _names_device(arg: cst.Arg) -> bool:
    if arg.keyword is not None:
        return arg.keyword.value == "device"
    if isinstance(arg.value, cst.SimpleString):
        return "cuda" in arg.value.value
    return "device" in (dotted_name(arg.value) or "").rsplit(".", 1)[-1]


def results_moved_by_callers(methods: list[cst.FunctionDef]) -> set[str]:
    """Private methods whose result every caller in the class moves to a device
    (`self._build_filters(...).to(x.device)`), directly or from inside another such method:
    what they compute stays on the host by design. A private method is called by its class
    only; one also named without a call (`map(self._build, ...)`) has callers unseen."""
    calls: dict[str, list[tuple[str, bool]]] = defaultdict(list)  # callee -> (caller, moved)
    for method in methods:
        self_name = instance_name(method)
        if self_name is not None:
            finder = _SelfCalls(self_name)
            visit(method.body, finder)
            for callee, moved in finder.calls:
                calls[callee].append((method.name.value, moved))
    host: set[str] = set()
    changed = True
    while changed:
        changed = False
        for callee, callers in calls.items():
            private = callee.startswith("_") and not callee.endswith("__")
            if private and callee not in host and all(moved or caller in host for caller, moved in callers):
                host.add(callee)
                changed = True
    return host


class _SelfCalls(cst.CSTVisitor):
    """`self.<method>(...)` calls of one method, and whether each result is moved to a device at once."""

    def __init__(self, self_name: str) -> None:
        self.self_name = self_name
        self.calls: list[tuple[str, bool]] = []
        self.moved: set[cst.Call] = set()
        self.callees: set[cst.BaseExpression] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and moves_to_device(node):
            self.moved.add(func.value)  # visited after its mover: the receiver is a child
        callee = self_attribute(func, self.self_name)
        if callee is not None:
            self.callees.add(func)
            self.calls.append((callee, node in self.moved))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        name = self_attribute(node, self.self_name)
        if name is not None and node not in self.callees:  # named, not called: who calls it is unseen
            self.calls.append((name, False))


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
