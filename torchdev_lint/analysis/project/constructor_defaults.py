"""A CUDA device default no constructor call (or function call) overrides (TDL301 across calls, issue 13).

`class TextEncoder: def __init__(self, device="cuda")` stores the device in `self.device`
and moves data there (`tokens.to(self.device)`). A parameter default is a setting whoever
constructs the class overrides, so TDL301 leaves it alone on its own; but when every
construction in the project leaves it out, the program always runs on CUDA (it fails on a
machine without a GPU and ignores MPS). This module is the LibCST side:

- `ConstructorUses`: two summary fields, noted during the summary's one traversal
  (`summaries._Collector`):
  - `cuda_defaults`: `{"TextEncoder": [[1, "device"]]}`, for each module-level class
    without decorators whose `__init__` parameter (position counting `self`, None when
    keyword-only) defaults to `"cuda"`, `"cuda:N"` or `torch.device("cuda")`, and is used
    as a device: stored as `self.X` (as is or through `torch.device(...)`) with `self.X`
    used as one in the class (`.to(self.X)`, `device=self.X`), or used as one in `__init__`
    itself (`nn.Embedding(n, d, device=device)`), not rebound before. A class that builds itself
    (`cls(...)`, `type(self)(...)`) has calls this cannot see: left out.
  - `function_defaults`: the same for module-level functions without decorators whose CUDA default
    their body uses as a device (`def spectrum(x, device="cuda"): x.to(device)`), not rebound; a
    position counts the arguments a call passes to reach it (`[3, "device"]` for the third).
  - `constructions`: `calls`, per callee text naming a class-like name (`Encoder`,
    `enc.TextEncoder`) or a function (an import or a module-level function of the file, not
    torch's own), the slots each call passes: `[positional count, [keywords]]`, or
    `["*"]` for a call that passes `*args`/`**kwargs` or runs only where CUDA is (a CUDA-only
    program may keep the default); `escapes`, texts of such names used as a value
    (a base class, an argument, stored, returned: constructed or called where this cannot see);
    `refs`, what each text refers to (`summaries.reference_of`, or `["here", "Class"]`).
- `never_overridden_defaults`: for the rule, the defaults of an `__init__` that
  `FileFacts.cuda_defaults` (`analysis/project/constructor_facts.py`) says no call overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import is_cuda_literal
from torchdev_lint.analysis.syntax.scopes import Scope, block_statements, dotted_name, resolve
from torchdev_lint.analysis.syntax.walk import walk

if TYPE_CHECKING:
    from torchdev_lint.analysis.context.requirements import CudaRequirements
    from torchdev_lint.analysis.project.file_facts import FileFacts

Reference = list[Any]
References = Callable[[str, Scope], Reference | None]

# Where a function's name is handed on as a value: an argument, an element, a return, a binding
# (exact types: LibCST's node classes are final).
_HANDED_ON = frozenset({cst.Arg, cst.Element, cst.DictElement, cst.Return, cst.Assign, cst.Decorator})
# Calls where a class name is not handed on as a value: `isinstance(x, Encoder)`, `super(Encoder, self)`.
_TYPE_TESTS = frozenset({"isinstance", "issubclass", "super"})
_IMPORTS = (cst.Import, cst.ImportFrom, cst.ImportAlias)


class ConstructorUses:
    """The constructor facts of one file, noted node by node."""

    def __init__(self, reference_of: References, module: Scope) -> None:
        self.reference_of = reference_of  # `summaries.reference_of`: what a name refers to
        self._stored: dict[tuple[str, str], list[Any]] = {}  # (class, attribute): [position, parameter]
        self._devices: set[tuple[str, str]] = set()  # (class, attribute) used as a device
        self._direct: dict[str, list[list[Any]]] = {}  # class: parameters `__init__` uses as a device
        self._functions: dict[str, list[list[Any]]] = {}  # module-level function: parameters used as a device
        self._self_built: set[str] = set()  # classes calling `cls(...)` or `type(self)(...)`
        self._calls: dict[str, list[cst.Call]] = {}
        self._escapes: set[str] = set()
        self._refs: dict[str, Reference | None] = {}
        assert isinstance(module.node, cst.Module)
        for statement in module.node.body:  # the definitions only, before the traversal
            if isinstance(statement, cst.ClassDef):
                self._define(statement, module)
            elif isinstance(statement, cst.FunctionDef) and not statement.decorators:
                defaults = _cuda_parameters(statement, module, reached_from=1)
                used = (
                    _used_as_device(statement, defaults, _assigned_names(statement.body)) if defaults else []
                )
                if used:
                    self._functions[statement.name.value] = used

    def _define(self, node: cst.ClassDef, scope: Scope) -> None:
        """A module-level class (`scope`: the module's): its `__init__`'s stored CUDA defaults."""
        if node.decorators:
            return  # a registry or a dataclass builds it from what this cannot see
        init = next(
            (
                s
                for s in block_statements(node.body)
                if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"
            ),
            None,
        )
        if init is None:
            return
        defaults = _cuda_parameters(init, scope, reached_from=0)
        if not defaults:
            return
        rebound = _assigned_names(init.body)
        self._direct[node.name.value] = _used_as_device(init, defaults, rebound)
        for statement in block_statements(init.body):
            for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                stored = _stored_parameter(small, scope)
                if stored is not None and stored[1] in defaults and stored[1] not in rebound:
                    self._stored[node.name.value, stored[0]] = defaults[stored[1]]

    def call(self, node: cst.Call, scope: Scope, text: str | None, reference: Reference | None) -> None:
        """A call: a construction, a class building itself, or a move to `self.X`."""
        func = node.func
        if text in ("cls", "self.__class__") or (
            isinstance(func, cst.Call) and isinstance(func.func, cst.Name) and func.func.value == "type"
        ):
            owner = _module_class(scope)
            if owner is not None:
                self._self_built.add(owner)
        if text is not None and _class_like(text):
            self._refs.setdefault(text, reference or _class_here(text, scope))
            self._calls.setdefault(text, []).append(node)
        elif text is not None and _names_function(reference):
            self._refs.setdefault(text, reference)
            self._calls.setdefault(text, []).append(node)
        if self._stored:
            owner = _module_class(scope)
            for text in _device_arguments(node) if owner is not None else ():
                if text.startswith("self.") and text.count(".") == 1:
                    self._devices.add((owner, text[5:]))  # type: ignore[arg-type]

    def value(self, node: cst.Name | cst.Attribute, ancestors: Sequence[cst.CSTNode], scope: Scope) -> None:
        """A class-like name (the last of `ancestors`) used other than by calling it, reading an
        attribute of it, importing it, annotating or testing a type with it; or a function's name
        handed on as a value (`_handed_on`)."""
        last = node.value if isinstance(node, cst.Name) else node.attr.value
        if len(ancestors) < 2:
            return
        parent = ancestors[-2]
        kind = type(parent)
        if not _class_like(last):
            self._handed_on(node, parent, kind, scope)
            return
        if kind is cst.Attribute or kind is cst.Call and parent.func is node:  # type: ignore[attr-defined]
            return
        if kind in (cst.ClassDef, cst.FunctionDef, cst.Param, cst.AssignTarget, *_IMPORTS):
            return
        if kind is cst.Arg and (parent.keyword is node or _type_test(ancestors)):  # type: ignore[attr-defined]
            return
        if any(isinstance(a, (cst.Annotation, *_IMPORTS)) for a in ancestors[-6:-1]):
            return
        text = dotted_name(node)
        if text is None:
            return
        reference = self.reference_of(text, scope) or _class_here(text, scope)
        if reference is not None:
            self._refs.setdefault(text, reference)
            self._escapes.add(text)

    def _handed_on(
        self, node: cst.Name | cst.Attribute, parent: cst.CSTNode, kind: type, scope: Scope
    ) -> None:
        """A function's name handed on as a value (`pool.map(load, files)`, `partial(load, device=d)`):
        its calls are not all seen. Asked of every lowercase name, so the cheap tests come first."""
        if kind not in _HANDED_ON or (kind is cst.Arg and parent.keyword is node):  # type: ignore[attr-defined]
            return
        text = dotted_name(node)
        reference = self.reference_of(text, scope) if text is not None else None
        if text is not None and reference is not None and _names_function(reference):
            self._refs.setdefault(text, reference)
            self._escapes.add(text)

    def fields(self, requirements: CudaRequirements) -> dict[str, Any]:
        defaults: dict[str, list[list[Any]]] = {}
        used = [(key[0], parameter) for key, parameter in self._stored.items() if key in self._devices]
        used += [(owner, parameter) for owner, parameters in self._direct.items() for parameter in parameters]
        for owner, parameter in used:
            found = defaults.setdefault(owner, []) if owner not in self._self_built else []
            if parameter not in found:
                found.append(parameter)
        # Whether a construction runs only where CUDA is is asked call by call; for a function's
        # calls the summary's `cuda_sites` (every call of the text so) answers, which costs nothing more.
        calls = {
            text: [_slots(call, requirements if _constructs(text, reference) else None) for call in nodes]
            for text, nodes in self._calls.items()
            if (reference := self._refs.get(text)) is not None
        }
        refs = {text: reference for text, reference in self._refs.items() if reference is not None}
        return {
            "cuda_defaults": defaults,
            "function_defaults": self._functions,
            "constructions": {"calls": calls, "escapes": sorted(self._escapes & refs.keys()), "refs": refs},
        }


def never_overridden_defaults(
    function: cst.FunctionDef, scope: Scope, facts: FileFacts | None
) -> list[tuple[str, cst.Param, cst.BaseExpression]]:
    """(class or function, parameter, default) of each CUDA default of this `__init__` or module-level
    function (`scope`: its own) that no call in the project overrides (`FileFacts.cuda_defaults`)."""
    owner = scope.parent
    if facts is None or not facts.cuda_defaults or owner is None:
        return []
    if owner.kind == "module":
        name = function.name.value
    elif function.name.value == "__init__" and owner.kind == "class" and owner.parent is not None:
        if owner.parent.kind != "module":
            return []
        assert isinstance(owner.node, cst.ClassDef)
        name = owner.node.name.value
    else:
        return []
    params = function.params
    return [
        (name, param, param.default)
        for param in (*params.posonly_params, *params.params, *params.kwonly_params)
        if param.default is not None and (name, param.name.value) in facts.cuda_defaults
    ]


def _cuda_parameters(function: cst.FunctionDef, scope: Scope, reached_from: int) -> dict[str, list[Any]]:
    """The parameters defaulting to CUDA, each as `[position, name]`: the positional arguments a call
    passes to reach it (`reached_from` 0 for `__init__`, whose `self` a call does not pass; 1 for a
    function), None when keyword-only."""
    params = function.params
    positional = [*params.posonly_params, *params.params]
    return {
        param.name.value: [index + reached_from if index < len(positional) else None, param.name.value]
        for index, param in enumerate((*positional, *params.kwonly_params))
        if param.default is not None and _cuda_default(param.default, scope)
    }


def _class_like(dotted: str) -> bool:
    """`Encoder`, `enc.TextEncoder`: the last name starts with a capital (a class, by convention)."""
    return dotted.rsplit(".", 1)[-1][:1].isupper()


def _used_as_device(
    function: cst.FunctionDef, defaults: dict[str, list[Any]], rebound: set[str]
) -> list[list[Any]]:
    """The CUDA defaults (`[position, name]`) that the body itself uses as a device, not rebound first."""
    used = _device_names(function.body) - rebound
    return [defaults[name] for name in defaults if name in used]


def _constructs(text: str, reference: Reference) -> bool:
    """A call of a class-like name, not one of torch's own."""
    return _class_like(text) and not _torch_api(reference)


def _names_function(reference: Reference | None) -> bool:
    """A reference that may name a module-level function: an import, or a function of this file
    (not a method, not torch's own API)."""
    if reference is None or reference[0] == "star":
        return False
    if reference[0] == "here":
        return "." not in reference[1]
    return not _torch_api(reference) and not _class_like(reference[2])


def _cuda_default(node: cst.BaseExpression, scope: Scope) -> bool:
    """`"cuda"`, `"cuda:0"`, `torch.device("cuda")`."""
    if isinstance(node, cst.Call) and node.args and resolve(node.func, scope) == "torch.device":
        return is_cuda_literal(node.args[0].value)
    return is_cuda_literal(node)


def _stored_parameter(small: cst.BaseSmallStatement, scope: Scope) -> tuple[str, str] | None:
    """`self.device = device` or `self.device = torch.device(device)`: (attribute, parameter)."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target, value = small.targets[0].target, small.value
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        target, value = small.target, small.value
    else:
        return None
    if isinstance(value, cst.Call) and len(value.args) == 1 and resolve(value.func, scope) == "torch.device":
        value = value.args[0].value
    text = dotted_name(target)
    if (
        not isinstance(value, cst.Name)
        or text is None
        or not text.startswith("self.")
        or text.count(".") != 1
    ):
        return None
    return text[5:], value.value


def _assigned_names(body: cst.BaseSuite) -> set[str]:
    """Names the body binds again (`device = torch.device(device)`): no longer the caller's value."""
    found: set[str] = set()

    def enter(node: cst.CSTNode) -> None:
        targets: list[cst.BaseExpression] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, (cst.For, cst.NamedExpr)):
            targets = [node.target]
        for target in targets:
            found.update(n.value for n in _names_in(target))

    walk(body, enter, _ignore)
    return found


def _device_names(body: cst.BaseSuite) -> set[str]:
    """What the body uses as a device (`device` of `nn.Linear(2, 2, device=device)`)."""
    found: set[str] = set()

    def enter(node: cst.CSTNode) -> None:
        if type(node) is cst.Call:
            found.update(_device_arguments(node))

    walk(body, enter, _ignore)
    return found


def _names_in(target: cst.BaseExpression) -> list[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _names_in(element.value)]
    return []


def _device_arguments(call: cst.Call) -> list[str]:
    """`x` of `.to(x)`, `.to(device=x)`, `f(device=x)` (a name or an attribute chain)."""
    found = []
    for arg in call.args:
        is_target = arg.keyword is None and arg is call.args[0] and _method(call) == "to"
        if is_target or (arg.keyword is not None and arg.keyword.value == "device"):
            text = dotted_name(arg.value)
            if text is not None:
                found.append(text)
    return found


def _ignore(node: cst.CSTNode) -> None:
    return None


def _method(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _module_class(scope: Scope) -> str | None:
    """The module-level class whose method (or code nested in one) `scope` is."""
    current: Scope | None = scope
    while current is not None and current.parent is not None:
        parent = current.parent
        if current.kind != "class" and parent.kind == "class" and parent.parent is not None:
            if parent.parent.kind == "module":
                assert isinstance(parent.node, cst.ClassDef)
                return parent.node.name.value
            return None
        current = parent
    return None


def _class_here(text: str, scope: Scope) -> Reference | None:
    """`["here", "Encoder"]` when `text` names only a module-level class of this file."""
    if "." in text:
        return None
    found = scope.lookup(text)
    if found is None:
        return None
    owner, bindings = found
    if owner.kind == "module" and len(bindings) == 1 and isinstance(bindings[0].node, cst.ClassDef):
        return ["here", text]
    return None


def _type_test(ancestors: Sequence[cst.CSTNode]) -> bool:
    """The argument (`ancestors[-2]`) belongs to `isinstance(...)`, `issubclass(...)` or `super(...)`."""
    call = ancestors[-3] if len(ancestors) > 2 else None
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value in _TYPE_TESTS


def _torch_api(reference: Reference) -> bool:
    """`nn.Linear` with `from torch import nn`: torch's classes are the project's only when checking
    torch itself, so whether such a call runs only with CUDA (the costly part) is not asked."""
    return reference[0] == "module" and reference[1] == 0 and reference[2].split(".", 1)[0] == "torch"


def _slots(call: cst.Call, requirements: CudaRequirements | None) -> list[Any]:
    """`[positional count, [keywords]]`; `["*"]` when the call passes everything it may (`*args`,
    `**kwargs`) or runs only where CUDA is (asked where `requirements` are given)."""
    if any(arg.star for arg in call.args) or (requirements is not None and requirements.requires_cuda(call)):
        return ["*"]
    keywords = sorted(arg.keyword.value for arg in call.args if arg.keyword is not None)
    return [sum(1 for arg in call.args if arg.keyword is None), keywords]
