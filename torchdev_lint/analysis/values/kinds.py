"""Is a value a module, a tensor, a loaded checkpoint? Syntactic evidence gathered per scope.

The answers here read the code's text and the scope's bindings and uses
(`module_by_syntax`, `module_by_syntax_or_name`, `probably_module`); the
device flow's answer (`flow.is_module`, `flow.kind_of`) follows values
through assignments and calls, and `flow.module_by_any_evidence` takes
either. Rules ask here instead of guessing from names themselves. Evidence is
positive only: when the code shows nothing either way the answer is
"unknown" and rules stay silent. Uses recorded during the traversal
(`Scope.method_calls`, `Scope.calls`) are complete only once the scope has
been traversed, so rules that rely on them decide when leaving the scope.
Checkpoints loaded whole and used as modules are in `loaded_modules`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeGuard

import libcst as cst

from torchdev_lint.analysis.knowledge.torch_api import (
    FACTORIES,
    MODULE_ONLY_METHODS,
    MOVE_METHODS,
    NN_NON_MODULES,
    NON_MODULE_METHODS,
    SAME_KIND_METHODS,
)
from torchdev_lint.analysis.syntax.reaching_bindings import reaching_assignment
from torchdev_lint.analysis.syntax.scopes import (
    Binding,
    Scope,
    assigned_values,
    dotted_name,
    resolve,
    scope_body,
    small_statements,
)
from torchdev_lint.analysis.syntax.walk import first
from torchdev_lint.analysis.values.parameter_moves import file_function, parameter_taking

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.file_facts import FileFacts

# `torch.<name>(...)` calls that build a new tensor: the factories, and `cat`/`stack` of a list.
TENSOR_FACTORIES = FACTORIES | {"cat", "stack"}
# `model`, `net`, `module`, `model2`, `netG`, `teacher_model`, `base_net`, `model_without_ddp`, `model_DDP`.
_MODULE_NAME = re.compile(
    r"^(model|net|network|module)(\d*|[A-Z])$"
    r"|^[a-z0-9]+_(model|net|network)\d*$"
    r"|^(model|net)_(?i:to_save|without_ddp|ddp|fsdp|dp|ema|copy|cpu|gpu|wrapped|unwrapped)$"
)
_NON_MODULE_LITERALS = (
    cst.Dict,
    cst.DictComp,
    cst.List,
    cst.ListComp,
    cst.Tuple,
    cst.Set,
    cst.SetComp,
    cst.SimpleString,
    cst.ConcatenatedString,
    cst.FormattedString,
    cst.Integer,
    cst.Float,
    cst.Imaginary,
)
_COPIES = frozenset({"copy.deepcopy", "copy.copy"})
_NON_MODULE_BUILTINS = frozenset(
    f"builtins.{name}" for name in ("dict", "list", "tuple", "set", "str", "int", "float", "bool", "len")
) | {"collections.OrderedDict", "collections.defaultdict"}


def is_module_class(name: str | None, scope: Scope) -> bool:
    """Does this qualified name (or local class name) construct an nn.Module?"""
    if name is None:
        return False
    if name.startswith("torch.nn."):
        last = name.rsplit(".", 1)[-1]
        inner = name[len("torch.nn.") :]
        return last[:1].isupper() and last not in NN_NON_MODULES and not inner.startswith(("utils.", "init."))
    if name.startswith("torchvision.models."):
        # Factories (`resnet18`) and classes (`ResNet`); not `*_Weights` enums or `get_weight`.
        last = name.rsplit(".", 1)[-1]
        return not last.endswith("_Weights") and not last.startswith(("get_", "list_"))
    return name in local_module_classes(scope.module)


def local_module_classes(module_scope: Scope) -> frozenset[str]:
    """Classes defined at module level that subclass nn.Module, directly or via each other."""
    cached = getattr(module_scope, "_module_classes", None)
    if cached is not None:
        return cached
    classes = {
        name: binding.node
        for name, bindings in module_scope.bindings.items()
        for binding in bindings
        if isinstance(binding.node, cst.ClassDef)
    }
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name in found:
                continue
            for base in node.bases:
                qual = resolve(base.value, module_scope)
                local = dotted_name(base.value)
                if (
                    qual is not None and qual.startswith("torch.nn.") and is_module_class(qual, module_scope)
                ) or (local in found):
                    found.add(name)
                    changed = True
                    break
    result = frozenset(found)
    module_scope._module_classes = result  # type: ignore[attr-defined]
    return result


def is_module_subclass(node: cst.ClassDef, scope: Scope) -> bool:
    """Does the class derive from an nn.Module class, through imports or the file's own module classes?

    `scope` is where the class statement is (its bases are resolved there). A base
    imported from elsewhere (`from mylib import Base`) is no evidence.
    """
    return any(
        is_module_class(resolve(base.value, scope), scope)
        or dotted_name(base.value) in local_module_classes(scope.module)
        for base in node.bases
        if base.keyword is None
    )


def constructs_module(node: cst.BaseExpression, scope: Scope) -> bool:
    """`nn.Linear(...)`, `Net()`, `resnet18()`, possibly chained with `.to()`/`.eval()`."""
    while isinstance(node, cst.Call):
        func = node.func
        if is_module_class(resolve(func, scope), scope) or (
            isinstance(func, cst.Name) and func.value in local_module_classes(scope.module)
        ):
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in SAME_KIND_METHODS:
            node = func.value
            continue
        return False
    return False


def used_as_module(key: str, scope: Scope) -> bool:
    """Has `key` (a name or `self.attr`) a module-only method called on it in this scope?"""
    return any(method in MODULE_ONLY_METHODS for method, _ in scope.owner.method_calls.get(key, ()))


def is_called(key: str, scope: Scope) -> bool:
    """Is `key` itself called (`model(x)`, `self.model(x)`) in this scope?"""
    owner = scope.owner
    base, _, attr = key.rpartition(".")
    if not base:
        return bool(owner.calls.get(key))
    return any(method == attr for method, _ in owner.method_calls.get(base, ()))


def statement_calls(scope: Scope) -> dict[str, list[tuple[str, cst.Call]]]:
    """Method calls used as whole statements (`model.to(d)`), by dotted receiver.

    The owner scope's statements are walked once (not its expressions, not
    nested functions or classes) and the answer cached on the scope.
    """
    owner = scope.owner
    cached = getattr(owner, "_statement_calls", None)
    if cached is not None:
        return cached
    found: dict[str, list[tuple[str, cst.Call]]] = defaultdict(list)
    for small in small_statements(scope_body(owner.node)):
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            func = small.value.func
            if isinstance(func, cst.Attribute):
                key = dotted_name(func.value)
                if key is not None:
                    found[key].append((func.attr.value, small.value))
    owner._statement_calls = found  # type: ignore[attr-defined]
    return found


def moved_in_place(key: str, scope: Scope) -> bool:
    """`key.to(d)` or `key.cuda()` as a statement: only a module moves in place.

    Not evidence for rules that look for discarded tensor moves (TDL306): to
    them this is the bug itself.
    """
    return any(method in MOVE_METHODS for method, _ in statement_calls(scope).get(key, ()))


def module_by_syntax(node: cst.BaseExpression, scope: Scope, *, in_place_moves: bool = False) -> bool:
    """Positive evidence in the scope's code that the expression is an nn.Module instance.

    Evidence: it constructs one; a module-only method is called on it in the
    scope; every binding of the name constructs one (or annotates it as one);
    for `self.attr`, every assignment to it in the class constructs one; with
    `in_place_moves`, it is moved by a bare `key.to(d)` statement. Uses in the
    scope are complete only once the scope has been traversed.
    """
    if constructs_module(node, scope):
        return True
    key = dotted_name(node)
    if key is None:
        return False
    if used_as_module(key, scope) or (in_place_moves and moved_in_place(key, scope)):
        return True
    if isinstance(node, cst.Name):
        found = scope.lookup(node.value)
        if found is not None:
            owner, bindings = found
            # `model = model.to(device)` keeps whatever `model` was.
            kept = [b for b in bindings if b.value is None or not is_self_move(b.value, node.value)]
            return bool(kept) and all(_binding_is_module(b, owner) for b in kept)
    values = self_attribute_values(key, scope)
    return bool(values) and all(constructs_module(v, _class_scope(scope) or scope) for v in values)


def probably_module(node: cst.BaseExpression, scope: Scope) -> bool:
    """Module evidence strong enough for the save/load rules, vetoed by any contrary sign.

    `module_by_syntax` (in-place moves included), or a model-like name (`model`,
    `self.net`); but never a value that any binding shows to be a dict,
    tensor, literal, `state_dict()` or `torch.load` result, nor one on which
    tensor or dict methods are called.
    """
    if constructs_module(node, scope):
        return True
    if isinstance(node, cst.IfExp):  # `model.module if hasattr(model, "module") else model`
        return probably_module(node.body, scope) and probably_module(node.orelse, scope)
    kept = _same_kind_source(node, scope)
    if kept is not node:
        return probably_module(kept, scope)  # `model.cpu()`, `deepcopy(model).half()`
    if module_by_syntax(node, scope, in_place_moves=True):
        return not contradicts_module(node, scope)
    if not _named_like_module(node, scope):
        return False
    return not contradicts_module(node, scope) and not _bound_to_loaded_item(node, scope)


def _same_kind_source(node: cst.BaseExpression, scope: Scope) -> cst.BaseExpression:
    """What `node` is of the same kind as: the receiver of a move, cast or mode switch
    (`model.cpu()`, `net.half().eval()`), the object a copy is made of (`deepcopy(model)`)."""
    while isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in SAME_KIND_METHODS:
            node = func.value
        elif resolve(func, scope) in _COPIES and len(node.args) == 1 and not node.args[0].star:
            node = node.args[0].value
        else:
            break
    return node


def built_by_project_class(node: cst.BaseExpression, scope: Scope, project: FileFacts | None) -> bool:
    """`Encoder()` (moved, cast or copied, or a name bound only to such calls) of a class imported
    from another file of the project that the project's facts know as an nn.Module subclass."""
    if project is None:
        return False
    node = _same_kind_source(node, scope)
    values, owner = [node], scope
    if isinstance(node, cst.Name):
        found = assigned_values(node, scope)
        if found is None:
            return False
        values, owner = found
    return bool(values) and all(
        isinstance(value := _same_kind_source(v, owner), cst.Call)
        and (name := resolve(value.func, owner)) is not None
        and project.module_class(name) is not None
        for v in values
    )


def _bound_to_loaded_item(node: cst.BaseExpression, scope: Scope) -> bool:
    """A name bound to an item of a loaded file (`model = torch.load(p)["state_dict"]`,
    `model = ckpt.get("model")` with `ckpt = torch.load(p)`): whatever the file holds, often a
    state dict; its name alone says nothing of it."""
    found = scope.lookup(node.value) if isinstance(node, cst.Name) else None
    if found is None:
        return False
    owner, bindings = found
    return any(b.value is not None and _loaded_item(b.value, owner) for b in bindings)


def _loaded_item(value: cst.BaseExpression, scope: Scope) -> bool:
    if isinstance(value, cst.Subscript):
        container = value.value
    elif (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("get", "pop")
    ):
        container = value.func.value
    else:
        return False
    if isinstance(container, cst.Call):
        return resolve(container.func, scope) == "torch.load"
    found = scope.lookup(container.value) if isinstance(container, cst.Name) else None
    return found is not None and any(
        isinstance(b.value, cst.Call) and resolve(b.value.func, found[0]) == "torch.load" for b in found[1]
    )


def saved_module(
    node: cst.BaseExpression, scope: Scope, parent: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> bool:
    """`probably_module` for the object a `torch.save` call is given, where a name's `torch.load`
    bindings veto only what their reason covers: the load's own result saved again
    (`model = torch.load(p)` then `torch.save(model, out)`, often a dict). `parent` climbs from
    `node` (a name) to its function.

    A name that straight-line code binds to a module built here right before the save
    (`model = nn.Sequential(...)`, a class of the file) is that module, whatever else the name is
    bound to; one whose binding at the save is not known (branches) and that is bound both to
    loads and to a module built here (a reload after the save, a resume branch) is judged by its
    other bindings: one builds a module and none, nor a method called on it, says it is not one.
    """
    if probably_module(node, scope):
        return True
    if not isinstance(node, cst.Name):
        return False
    found = scope.lookup(node.value)
    if found is None:
        return False
    owner, bindings = found
    reaching = reaching_assignment(node, parent) if owner is scope.owner else None
    if reaching is not None and reaching.value is not None and not is_self_move(reaching.value, node.value):
        return constructs_module(reaching.value, owner)
    kept = [b for b in bindings if b.value is None or not is_self_move(b.value, node.value)]
    rest = [b for b in kept if b.value is None or not _loaded_whole(b.value, owner)]
    return (
        len(rest) < len(kept)
        and any(_binding_is_module(b, owner) for b in rest)
        and not any(_binding_is_not_module(b, owner) for b in rest)
        and not any(
            method in NON_MODULE_METHODS for method, _ in scope.owner.method_calls.get(node.value, ())
        )
    )


def _loaded_whole(value: cst.BaseExpression, scope: Scope) -> bool:
    """`torch.load(...)`, possibly moved or cast (`.to(d)`, `.eval()`): not an item of it."""
    while isinstance(value, cst.Call):
        func = value.func
        if resolve(func, scope) == "torch.load":
            return True
        if not (isinstance(func, cst.Attribute) and func.attr.value in SAME_KIND_METHODS):
            return False
        value = func.value
    return False


def _named_like_module(node: cst.BaseExpression, scope: Scope) -> bool:
    """A model-like plain name, `self.<model-like>` in a method, or a DDP's `<...>.module`.

    Other attributes (`args.model`, `cfg.net`) are often paths or configs.
    """
    if not looks_like_module_name(node):
        return False
    if isinstance(node, cst.Name):
        return True
    if not isinstance(node, cst.Attribute):
        return False
    if node.attr.value == "module":
        return _named_like_module(node.value, scope)
    base = node.value
    return (
        isinstance(base, cst.Name)
        and _class_scope(scope) is not None
        and base.value == _self_name(scope.owner.node)
    )


def contradicts_module(node: cst.BaseExpression, scope: Scope) -> bool:
    """Does anything in the scope show that `node` (a name or `a.b`) is not a module?"""
    key = dotted_name(node)
    if key is None:
        return True
    if any(method in NON_MODULE_METHODS for method, _ in scope.owner.method_calls.get(key, ())):
        return True
    if isinstance(node, cst.Name):
        found = scope.lookup(node.value)
        if found is None:
            return False
        owner, bindings = found
        if any(_binding_is_not_module(b, owner) for b in bindings):
            return True
        return (
            len(bindings) == 1
            and isinstance(bindings[0].node, cst.Param)
            and isinstance(owner.node, cst.FunctionDef)
            and read_as_data(node.value, owner.node, owner.module)
        )
    values = self_attribute_values(key, scope)
    class_scope = _class_scope(scope) or scope
    return any(_value_is_not_module(v, class_scope) for v in values)


def read_as_data(name: str, function: cst.FunctionDef, module: Scope, depth: int = 0) -> bool:
    """Does `function` read its parameter `name` as a dict (or tensor): a string key
    (`model["infos"]`), a dict or tensor method (`.items()`, `.size()`), or passing it to a
    function of the file that does (`describe(model)`, itself reading `model["infos"]`)?
    A name says little; such reads say what the callers pass."""

    def reads(node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Subscript):
            return _is_name(node.value, name) and _string_key(node)
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        if isinstance(func, cst.Attribute):
            return _is_name(func.value, name) and func.attr.value in NON_MODULE_METHODS
        callee = file_function(func, module) if depth < 2 else None
        return callee is not None and any(
            _is_name(arg.value, name)
            and (parameter := parameter_taking(node, arg, callee)) is not None
            and read_as_data(parameter, callee, module, depth + 1)
            for arg in node.args
        )

    return first(function.body, reads) is not None


def _is_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _string_key(subscript: cst.Subscript) -> bool:
    """`x["key"]`: one string index."""
    if len(subscript.slice) != 1:
        return False
    index = subscript.slice[0].slice
    return isinstance(index, cst.Index) and isinstance(
        index.value, (cst.SimpleString, cst.ConcatenatedString)
    )


def _binding_is_module(binding: Binding, scope: Scope) -> bool:
    if isinstance(binding.node, cst.Param):
        annotation = binding.node.annotation
        return annotation is not None and _annotation_is_module(annotation.annotation, scope)
    return binding.value is not None and constructs_module(binding.value, scope)


def _binding_is_not_module(binding: Binding, scope: Scope) -> bool:
    if binding.import_target is not None or isinstance(binding.node, (cst.FunctionDef, cst.ClassDef)):
        return True
    if isinstance(binding.node, cst.Param):
        annotation = binding.node.annotation
        return annotation is not None and _annotation_is_not_module(annotation.annotation, scope)
    return binding.value is not None and _value_is_not_module(binding.value, scope)


def _annotation_is_not_module(annotation: cst.BaseExpression, scope: Scope) -> bool:
    """`dict`, `str`, `Tensor`, `Optional[dict]`...: a type that is clearly not a module.

    An unknown class (`MyNet` imported from elsewhere) is no evidence either way.
    """
    if isinstance(annotation, cst.Subscript):
        annotation = annotation.value
    name = resolve(annotation, scope)
    if name is None:
        return False
    return (
        name.startswith(("builtins.", "typing.", "collections.", "os.", "pathlib.", "torch.optim."))
        or name in ("torch.Tensor", "torch.nn.Parameter")
    ) and name not in ("typing.Any", "typing.Optional", "typing.Union")


def _annotation_is_module(annotation: cst.BaseExpression, scope: Scope) -> bool:
    name = resolve(annotation, scope)
    if name is None and isinstance(annotation, cst.SimpleString):
        text = annotation.evaluated_value
        return isinstance(text, str) and text.rsplit(".", 1)[-1] == "Module"
    return (
        name == "torch.nn.Module" or name == "torch.nn.modules.module.Module" or is_module_class(name, scope)
    )


def _value_is_not_module(value: cst.BaseExpression, scope: Scope) -> bool:
    """A dict/list/str/number literal, a tensor factory, `x.state_dict()`, `torch.load(...)`."""
    while True:
        if isinstance(value, _NON_MODULE_LITERALS) or isinstance(
            value, (cst.BinaryOperation, cst.Comparison)
        ):
            return True
        if not isinstance(value, cst.Call):
            return False
        func = value.func
        name = resolve(func, scope)
        if name in _NON_MODULE_BUILTINS or name == "torch.load" or is_tensor_factory_call(value, scope):
            return True
        if isinstance(func, cst.Attribute) and func.attr.value == "state_dict":
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in SAME_KIND_METHODS:
            value = func.value
            continue
        return False


def self_attribute_values(key: str, scope: Scope) -> list[cst.BaseExpression]:
    """Values assigned to `self.attr` anywhere in the enclosing class's methods."""
    base, _, attr = key.partition(".")
    if not attr or "." in attr:
        return []
    class_scope = _class_scope(scope)
    if class_scope is None or _self_name(scope.owner.node) != base:
        return []
    cached = getattr(class_scope, "_self_attributes", None)
    if cached is None:
        cached = _collect_self_attributes(class_scope.node)  # type: ignore[arg-type]
        class_scope._self_attributes = cached  # type: ignore[attr-defined]
    return cached.get(attr, [])


def _class_scope(scope: Scope) -> Scope | None:
    owner = scope.owner
    if owner.kind == "function" and owner.parent is not None and owner.parent.kind == "class":
        return owner.parent
    return None


def _self_name(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.FunctionDef) and node.params.params:
        return node.params.params[0].name.value
    return None


def _collect_self_attributes(class_node: cst.ClassDef) -> dict[str, list[cst.BaseExpression]]:
    found: dict[str, list[cst.BaseExpression]] = defaultdict(list)
    for method in class_node.body.body:
        self_name = _self_name(method)
        if self_name is None:
            continue
        for small in small_statements(scope_body(method)):
            if isinstance(small, cst.Assign):
                targets = [t.target for t in small.targets]
                value = small.value
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                targets, value = [small.target], small.value
            else:
                continue
            for target in targets:
                if (
                    isinstance(target, cst.Attribute)
                    and isinstance(target.value, cst.Name)
                    and target.value.value == self_name
                ):
                    # `self.model = None` declares the attribute; it says nothing of its kind.
                    if not (isinstance(value, cst.Name) and value.value == "None"):
                        found[target.attr.value].append(value)
    return found


def looks_like_module_name(node: cst.BaseExpression) -> bool:
    """Named like a model (`model`, `net`, `self.model`, `teacher_model`, `netG`)."""
    key = dotted_name(node)
    return key is not None and bool(_MODULE_NAME.search(key.rsplit(".", 1)[-1]))


def module_by_syntax_or_name(node: cst.BaseExpression, scope: Scope) -> bool:
    """Module evidence in this scope, or a name that says model: what loop rules accept as a model."""
    return module_by_syntax(node, scope) or looks_like_module_name(node)


def is_tensor_factory_call(node: cst.BaseExpression, scope: Scope) -> TypeGuard[cst.Call]:
    if not isinstance(node, cst.Call):
        return False
    name = resolve(node.func, scope)
    return name is not None and name.startswith("torch.") and name[6:] in TENSOR_FACTORIES


def is_self_move(value: cst.BaseExpression, key: str) -> bool:
    """`model.to(d)`, `self.model.cuda().eval()`: a rebinding of `key` that keeps the value's kind."""
    while isinstance(value, cst.Call):
        func = value.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in SAME_KIND_METHODS):
            return False
        value = func.value
    return dotted_name(value) == key
