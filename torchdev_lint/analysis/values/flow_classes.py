"""What a file's own nn.Module subclasses declare about their attributes.

`self.fc = nn.Linear(...)` in a method makes `fc` a stateful submodule that the
module's `.to()` moves along; `self.register_buffer("mean", ...)` a tensor
that follows it; `self.cache = torch.zeros(...)` a tensor that stays where it
was built. The device flow reads these facts when it sees `self.fc` in a
method or an instance of the class elsewhere.

A plain class (or a unittest.TestCase) sets its instances up in one method,
`__init__` (`setUp`): `initialiser` names it and the attributes other methods
assign or move in place; `flow_statements.initialised` runs it and hands its
other methods what it leaves in `self.<attr>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import libcst as cst

from torchdev_lint.analysis.knowledge.torch_api import CONTAINERS, PARAMETER_CLASSES, STATEFUL_NN
from torchdev_lint.analysis.syntax.bindings import own_bindings, unpacked
from torchdev_lint.analysis.syntax.scopes import (
    Scope,
    block_statements,
    dotted_name,
    resolve,
    small_statements,
)
from torchdev_lint.analysis.syntax.units import memo, method_class, scope_of
from torchdev_lint.analysis.syntax.walk import first, walk
from torchdev_lint.analysis.values import kinds
from torchdev_lint.analysis.values.flow_values import TENSOR, Kind, Value

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


class ModuleContext(Protocol):
    """What a class's facts need of the file: its tree and module scope (a `FileContext`, or
    pass 1's `_PassOneContext`)."""

    @property
    def scope(self) -> Scope: ...

    @property
    def module(self) -> cst.Module: ...


@dataclass
class ClassFacts:
    """What a module-level nn.Module subclass declares about its attributes.

    `attrs` maps `self.<name>` to (value, follows): `follows` is True for
    parameters, buffers and submodules, which the module's `.to()` moves along.
    """

    node: cst.ClassDef
    attrs: dict[str, tuple[Value, bool]]
    stateful: bool
    _moves_inputs: bool | None = None


def module_class_node(name: str, scope: Scope) -> cst.ClassDef | None:
    module = scope.module
    if name not in kinds.local_module_classes(module):
        return None
    for binding in module.bindings.get(name, ()):
        if isinstance(binding.node, cst.ClassDef):
            return binding.node
    return None


def class_facts(node: cst.ClassDef, ctx: ModuleContext) -> ClassFacts | None:
    """Attributes a module class gives itself in its methods (memoised per class)."""
    cache = memo(ctx)
    key = ("class", node)
    if key in cache:
        return cache[key]  # type: ignore[return-value]
    cache[key] = None  # guards against a class that (indirectly) derives from itself
    module_scope = ctx.scope.module
    if node.name.value not in kinds.local_module_classes(module_scope):
        return None
    attrs: dict[str, tuple[Value, bool]] = {}
    stateful = False
    for base in node.bases:
        name = resolve(base.value, module_scope)
        if name is not None and name.startswith("torch.nn."):
            last = name.rsplit(".", 1)[-1]
            stateful = stateful or bool(STATEFUL_NN.match(last)) or last in CONTAINERS
        elif isinstance(base.value, cst.Name):
            parent = module_class_node(base.value.value, module_scope)
            facts = class_facts(parent, ctx) if parent is not None else None
            if facts is not None:
                attrs.update(facts.attrs)
                stateful = stateful or facts.stateful
    found: dict[str, list[tuple[Value | None, bool]]] = {}
    for statement in block_statements(node.body):
        if isinstance(statement, cst.FunctionDef) and statement.params.params:
            self_name = statement.params.params[0].name.value
            for small in small_statements(block_statements(statement.body)):
                _class_assignment(small, self_name, module_scope, found, node)
    for attr, entries in found.items():
        values = {value for value, _ in entries}
        if len(values) == 1 and None not in values:
            value = values.pop()
            follows = all(f for _, f in entries)
            attrs[attr] = (value, follows)  # type: ignore[assignment]
            stateful = stateful or (follows and (value.kind is Kind.TENSOR or value.stateful))  # type: ignore[union-attr]
        else:
            attrs.pop(attr, None)
    facts = ClassFacts(node, attrs, stateful)
    cache[key] = facts
    return facts


def _class_assignment(
    small: cst.BaseSmallStatement,
    self_name: str,
    scope: Scope,
    found: dict[str, list[tuple[Value | None, bool]]],
    class_node: cst.ClassDef,
) -> None:
    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
        for target in targets:
            if (
                isinstance(target, cst.Attribute)
                and isinstance(target.value, cst.Name)
                and target.value.value == self_name
            ):
                found.setdefault(target.attr.value, []).append(
                    _attribute_value(small.value, scope, class_node)
                )
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == self_name
            and func.attr.value in ("register_buffer", "register_parameter", "add_module", "register_module")
            and len(call.args) >= 2
            and isinstance(call.args[0].value, cst.SimpleString)
        ):
            attr = call.args[0].value.evaluated_value
            if not isinstance(attr, str):
                return
            value = call.args[1].value
            if isinstance(value, cst.Name) and value.value == "None":
                entry: tuple[Value | None, bool] = (None, True)
            elif func.attr.value in ("add_module", "register_module"):
                entry = (Value(Kind.MODULE, stateful=True), True)
            else:
                entry = (TENSOR, True)
            found.setdefault(attr, []).append(entry)


def _attribute_value(
    value: cst.BaseExpression, scope: Scope, class_node: cst.ClassDef
) -> tuple[Value | None, bool]:
    if isinstance(value, cst.Call):
        name = resolve(value.func, scope)
        if name in PARAMETER_CLASSES:
            return TENSOR, True
        if kinds.constructs_module(value, scope):
            last = (name or "").rsplit(".", 1)[-1]
            local = isinstance(value.func, cst.Name) and value.func.value in kinds.local_module_classes(scope)
            stateful = (
                local
                or bool(STATEFUL_NN.match(last))
                or last in CONTAINERS
                or (name or "").startswith("torchvision.")
            )
            return Value(Kind.MODULE, stateful=stateful), True
        if kinds.is_tensor_factory_call(value, scope):
            return TENSOR, False
    return None, False


# Methods through which a module places itself or its data its own way.
_OWN_PLACEMENT = frozenset({"to", "cuda", "cpu", "_apply", "to_empty"})


def runs_placed(function: cst.FunctionDef, facts: ClassFacts, ctx: FileContext) -> bool:
    """Does the method (a plain one: `units.method_class`) run once the module may have been
    moved, so that its parameters and submodules are on the module's own device? Not `__init__`
    nor the methods only `__init__` calls (the module is still where it was built), nor methods
    of a class that places itself its own way (`to`, `_apply` overridden)."""
    if not facts.stateful or function.name.value == "__init__":
        return False
    cache = memo(ctx)
    key = ("construction methods", facts.node)
    if key not in cache:
        cache[key] = _construction_methods(facts.node)
    return function.name.value not in cache[key]  # type: ignore[operator]


def _construction_methods(node: cst.ClassDef) -> frozenset[str]:
    """`__init__`, the methods called only from construction methods (`self._build()`), and every
    method where the class places itself its own way."""
    methods = {s.name.value: s for s in block_statements(node.body) if isinstance(s, cst.FunctionDef)}
    if _OWN_PLACEMENT & methods.keys():
        return frozenset(methods)
    callers: dict[str, set[str]] = {name: set() for name in methods}
    for caller, method in methods.items():

        def note(child: cst.CSTNode, caller: str = caller) -> None:
            if (
                isinstance(child, cst.Attribute)
                and isinstance(child.value, cst.Name)
                and child.value.value == "self"
                and child.attr.value in callers
            ):
                callers[child.attr.value].add(caller)

        walk(method, note, lambda child: None)
    found = {"__init__"}
    changed = True
    while changed:
        changed = False
        for name, seen_from in callers.items():
            if name not in found and seen_from and seen_from <= found:
                found.add(name)
                changed = True
    return frozenset(found)


_TENSOR_READS = ("shape", "size(", "device", "dtype", "dim(", "ndim")


def input_device(method: cst.CSTNode, ctx: FileContext) -> cst.Attribute | None:
    """`x.device` for the method's first input read as a tensor (`x.shape`, `x.size(0)`...): where
    data it makes should be made."""
    if not isinstance(method, cst.FunctionDef):
        return None
    code = ctx.code_for(method)
    for param in method.params.params[1:]:
        name = param.name.value
        if any(f"{name}.{read}" in code for read in _TENSOR_READS):
            return cst.Attribute(value=cst.Name(name), attr=cst.Name("device"))
    return None


def moves_inputs(facts: ClassFacts, ctx: ModuleContext) -> bool:
    """Does the class move data itself (a `.to(`/`.cuda(` outside `__init__`)? Then its inputs may be anywhere."""
    if facts._moves_inputs is None:
        code = "".join(
            ctx.module.code_for_node(statement)
            for statement in block_statements(facts.node.body)
            if not (isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__")
        )
        facts._moves_inputs = ".to(" in code or ".cuda(" in code
    return facts._moves_inputs


@dataclass
class _PassOneContext:
    scope: Scope
    module: cst.Module


def placed_module_classes(module: cst.Module, scope: Scope) -> dict[str, bool]:
    """For pass 1 (other files construct these classes): each module-level nn.Module subclass of
    the file, with whether a call of an instance runs where its weights are, so that inputs on
    another device fail (it holds parameters, buffers or stateful submodules, and does not move
    its inputs itself)."""
    ctx = _PassOneContext(scope, module)
    found = {}
    for name in kinds.local_module_classes(scope):
        node = module_class_node(name, scope)
        facts = class_facts(node, ctx) if node is not None else None
        if facts is not None:
            found[name] = facts.stateful and not moves_inputs(facts, ctx)
    return found


# Methods that move a module or tensor in place (`self.model.cpu()` elsewhere makes its device unknown).
_IN_PLACE_MOVES = frozenset({"to", "cuda", "cpu", "xpu", "mps", "to_empty", "apply"})


@dataclass(frozen=True)
class Initialiser:
    """The method that sets up the instances of a plain class (not an nn.Module): `__init__`, or a TestCase's `setUp`.

    Its other methods may use what it leaves in `self.<attr>`, except the
    attributes in `unknown`, which another method assigns or moves in place.
    """

    method: cst.FunctionDef
    unknown: frozenset[str]


def initialiser(function: cst.FunctionDef, ctx: FileContext) -> Initialiser | None:
    """The initialiser whose `self.<attr>` facts `function`, another plain method of its class, may use."""
    scope = scope_of(function, ctx)
    class_node = method_class(function, scope) if scope is not None else None
    if class_node is None:
        return None
    found = _initialiser(class_node, ctx)
    return None if found is None or found.method is function else found


def _initialiser(node: cst.ClassDef, ctx: FileContext) -> Initialiser | None:
    cache = memo(ctx)
    key = ("initialiser", node)
    if key not in cache:
        cache[key] = _find_initialiser(node, ctx)
    return cache[key]  # type: ignore[return-value]


def _find_initialiser(node: cst.ClassDef, ctx: FileContext) -> Initialiser | None:
    module_scope = ctx.scope.module
    name = node.name.value
    if name in kinds.local_module_classes(module_scope):
        return None  # a module's attributes follow its `.to()`: `class_facts` covers them
    bases = [resolve(base.value, module_scope) or dotted_name(base.value) or "" for base in node.bases]
    test_case = any(base.rsplit(".", 1)[-1] == "TestCase" for base in bases)
    if not test_case and any(base not in ("object", "builtins.object") for base in bases):
        return None  # a base (a model class from a library) may be a module or set the attributes itself
    wanted = "setUp" if test_case else "__init__"
    methods = [s for s in block_statements(node.body) if isinstance(s, cst.FunctionDef)]
    if any(m.name.value == "forward" for m in methods):
        return None  # a module in all but name
    method = next((m for m in methods if m.name.value == wanted), None)
    if method is None or method.decorators or not method.params.params:
        return None  # a decorated initialiser (a skip, a wrapper) may not run as written
    if _subclassed(name, module_scope) or _calls_setattr(node):
        return None  # a subclass may set the attributes up differently
    code = ctx.module.code_for_node(method)
    if not any(word in code for word in (".cuda(", ".to(", "device")) or _RETURN.search(code):
        return None  # nothing placed on a device, or a path that leaves early
    unknown: set[str] = set()
    for other in block_statements(node.body):
        if other is not method:
            walk(other, lambda child: _note_write(child, unknown), lambda child: None)
    return Initialiser(method, frozenset(unknown))


_RETURN = re.compile(r"\breturn\b|\byield\b")


def _calls_setattr(node: cst.ClassDef) -> bool:
    """Does the class set attributes by name (`setattr(self, name, value)`), out of the flow's sight?

    A search that stops at the first call, not a text search of the class's code: generating the
    code of a 3,000-line class cost more than the rest of the file's check. Asked before the
    initialiser's code is generated: on accelerate's `Accelerator` it stops 150 lines in.
    """
    return first(node, _is_setattr_call) is not None


def _is_setattr_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "setattr"


def _subclassed(name: str, module_scope: Scope) -> bool:
    return any(
        isinstance(binding.node, cst.ClassDef)
        and any(dotted_name(base.value) == name for base in binding.node.bases)
        for bindings in module_scope.bindings.values()
        for binding in bindings
    )


# Bindings that may write an attribute (`self.x = ...`, `for self.i in ...`, `with ... as self.f`).
_ATTRIBUTE_WRITES = frozenset({"assign", "annotation", "aug-assign", "for", "with", "walrus", "del"})


def _note_write(node: cst.CSTNode, found: set[str]) -> None:
    """Adds the attribute names `node` assigns (`x.attr = ...`) or moves in place (`x.attr.cpu()`)."""
    for bound in own_bindings(node):
        if bound.kind in _ATTRIBUTE_WRITES:
            found.update(t.attr.value for t in unpacked(bound.target) if isinstance(t, cst.Attribute))
    if isinstance(node, cst.Call):
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value in _IN_PLACE_MOVES
            and isinstance(func.value, cst.Attribute)
        ):
            found.add(func.value.attr.value)
