"""Is a value a module, a tensor, a data loader? Evidence gathered per scope.

Rules ask here instead of guessing from names themselves. Evidence is
positive only: when the code shows nothing either way the answer is
"unknown" and rules stay silent.
"""

from __future__ import annotations

import re

import libcst as cst

from torchdev_lint.analysis.scopes import Scope, dotted_name, resolve

# Capitalised names under torch.nn that are not modules.
_NN_NON_MODULES = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer"})
# Methods only an nn.Module has (optimizers share state_dict/zero_grad, tensors share .to).
MODULE_ONLY_METHODS = frozenset(
    {
        "eval",
        "train",
        "parameters",
        "named_parameters",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "buffers",
        "named_buffers",
        "forward",
        "register_buffer",
        "register_forward_hook",
        "register_forward_pre_hook",
        "requires_grad_",
    }
)
TENSOR_FACTORIES = frozenset(
    """zeros ones empty full rand randn randint randperm arange linspace logspace eye tensor
    as_tensor zeros_like ones_like empty_like full_like rand_like randn_like randint_like
    from_numpy stack cat""".split()
)
_MODULE_NAME = re.compile(r"^(model|net|network|module)$|_(model|net)$|^(model|net)_", re.IGNORECASE)


def is_module_class(name: str | None, scope: Scope) -> bool:
    """Does this qualified name (or local class name) construct an nn.Module?"""
    if name is None:
        return False
    if name.startswith("torch.nn."):
        last = name.rsplit(".", 1)[-1]
        inner = name[len("torch.nn.") :]
        return (
            last[:1].isupper() and last not in _NN_NON_MODULES and not inner.startswith(("utils.", "init."))
        )
    if name.startswith("torchvision.models."):
        return True
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
            for base in node.bases:  # type: ignore[union-attr]
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


def constructs_module(node: cst.BaseExpression, scope: Scope) -> bool:
    """`nn.Linear(...)`, `Net()`, `resnet18()`, possibly chained with `.to()`/`.eval()`."""
    while isinstance(node, cst.Call):
        func = node.func
        if is_module_class(resolve(func, scope), scope) or (
            isinstance(func, cst.Name) and func.value in local_module_classes(scope.module)
        ):
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in (
            "to",
            "cuda",
            "cpu",
            "eval",
            "train",
            "half",
            "float",
        ):
            node = func.value
            continue
        return False
    return False


def used_as_module(key: str, scope: Scope) -> bool:
    """Has `key` (a name or `self.attr`) a module-only method called on it in this scope?"""
    return any(method in MODULE_ONLY_METHODS for method, _ in scope.owner.method_calls.get(key, ()))


def is_module(node: cst.BaseExpression, scope: Scope) -> bool:
    """Positive evidence that the expression is an nn.Module instance."""
    if constructs_module(node, scope):
        return True
    key = dotted_name(node)
    if key is None:
        return False
    if used_as_module(key, scope):
        return True
    if isinstance(node, cst.Name):
        found = scope.lookup(node.value)
        if found is not None:
            owner, bindings = found
            values = [b.value for b in bindings]
            return bool(values) and all(v is not None and constructs_module(v, owner) for v in values)
    return False


def looks_like_module_name(node: cst.BaseExpression) -> bool:
    """Named like a model (`model`, `net`, `self.model`, `teacher_model`)."""
    key = dotted_name(node)
    return key is not None and bool(_MODULE_NAME.search(key.rsplit(".", 1)[-1]))


def is_tensor_factory_call(node: cst.BaseExpression, scope: Scope) -> bool:
    if not isinstance(node, cst.Call):
        return False
    name = resolve(node.func, scope)
    return name is not None and name.startswith("torch.") and name[6:] in TENSOR_FACTORIES
