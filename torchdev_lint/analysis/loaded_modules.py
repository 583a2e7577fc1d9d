"""Checkpoints loaded whole: which `torch.load` a value comes from, and whether a name uses it as a module.

`model = torch.load("model.pt")` followed by `model.eval()` loads a pickled
module (TDL104); `ckpt = torch.load(p)` followed by `ckpt["model"].eval()`
finds a module stored in a checkpoint dict (TDL105). Rules collect the item
and move uses they see and ask `loads_used_as_modules` once a scope is done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator

import libcst as cst

from torchdev_lint.analysis.kinds import (
    is_called,
    is_self_move,
    moved_in_place,
    used_as_module,
)
from torchdev_lint.analysis.scopes import Binding, Scope, dotted_name, resolve, scope_body, small_statements
from torchdev_lint.analysis.torch_api import MODULE_ONLY_METHODS, MOVE_METHODS, SAME_KIND_METHODS


def loaded_checkpoint(node: cst.BaseExpression, scope: Scope) -> tuple[cst.Call, bool] | None:
    """The `torch.load(...)` call an expression's value comes from, and whether it is an item of it.

    `torch.load(p)` → (call, False); `torch.load(p).to(d)` → (call, False);
    `torch.load(p)["model"]` → (call, True). Anything else → None.
    """
    item = False
    while True:
        if isinstance(node, cst.Subscript) and not item:
            node, item = node.value, True
            continue
        if not isinstance(node, cst.Call):
            return None
        func = node.func
        if resolve(func, scope) == "torch.load":
            return node, item
        if isinstance(func, cst.Attribute) and func.attr.value in SAME_KIND_METHODS and not item:
            node = func.value
            continue
        return None


def name_loads(name: str, scope: Scope, depth: int = 0) -> list[tuple[cst.Call, bool]] | None:
    """When every binding of `name` in `scope` is a `torch.load` result (or an item of one), those loads.

    `model = model.to(d)` rebindings are transparent and `net = ckpt["model"]`
    follows `ckpt`; bindings to the path the name is then loaded from
    (`ckpt = "a.pt"` or a parameter `ckpt`, then `ckpt = torch.load(ckpt)`) are
    skipped, since a path is never used as a module; any other binding, or a
    name not bound in `scope` itself, gives None.
    """
    bindings = scope.bindings.get(name)
    if not bindings:
        return None
    if any(_loads_itself(b.value, name, scope) for b in bindings if b.value is not None):
        bindings = [b for b in bindings if not _is_path_binding(b, scope)]
    if not bindings or any(b.value is None for b in bindings):
        return None
    return _values_loads(name, [b.value for b in bindings if b.value is not None], scope, depth)


_PATH_BUILDERS = frozenset({"os.path.join", "os.path.expanduser", "pathlib.Path", "builtins.str"})


def _loads_itself(value: cst.BaseExpression, name: str, scope: Scope) -> bool:
    """`name = torch.load(name, ...)`: the name goes from a path to the loaded object."""
    loaded = loaded_checkpoint(value, scope)
    if loaded is None or loaded[0] is not value:
        return False
    args = loaded[0].args
    return bool(args) and args[0].keyword is None and not args[0].star and dotted_name(args[0].value) == name


def _is_path_binding(binding: Binding, scope: Scope) -> bool:
    """A parameter, a string, or a path built by `os.path.join`/`Path`/`str`."""
    if isinstance(binding.node, cst.Param):
        return True
    value = binding.value
    return isinstance(value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)) or (
        isinstance(value, cst.Call) and resolve(value.func, scope) in _PATH_BUILDERS
    )


def _values_loads(
    key: str, values: list[cst.BaseExpression], scope: Scope, depth: int = 0
) -> list[tuple[cst.Call, bool]] | None:
    if not values or depth > 4:
        return None
    loads: list[tuple[cst.Call, bool]] = []
    for value in values:
        if is_self_move(value, key):
            continue
        loaded = loaded_checkpoint(value, scope)
        if loaded is not None:
            loads.append(loaded)
            continue
        if (
            isinstance(value, cst.Subscript)
            and isinstance(value.value, cst.Name)
            and value.value.value != key
        ):
            whole = name_loads(value.value.value, scope, depth + 1)
            if whole is not None and not any(item for _, item in whole):
                loads.extend((call, True) for call, _ in whole)
                continue
        return None
    return loads or None


def attribute_assignments(scope: Scope) -> dict[str, list[cst.BaseExpression]]:
    """Values assigned to dotted targets (`self.model = ...`) in the owner scope's statements."""
    owner = scope.owner
    cached = getattr(owner, "_attribute_assignments", None)
    if cached is not None:
        return cached
    found: dict[str, list[cst.BaseExpression]] = defaultdict(list)
    for small in small_statements(scope_body(owner.node)):
        if isinstance(small, cst.Assign):
            for target in small.targets:
                key = dotted_name(target.target) if isinstance(target.target, cst.Attribute) else None
                if key is not None:
                    found[key].append(small.value)
        elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Attribute):
            key = dotted_name(small.target)
            if key is not None and small.value is not None:
                found[key].append(small.value)
    owner._attribute_assignments = found  # type: ignore[attr-defined]
    return found


def module_use_receiver(call: cst.Call, is_statement: bool) -> cst.BaseExpression:
    """What a call would use as a module: `r` in `r.eval()`, `r(x)`, or `r.to(d)` as a statement.

    For `a.b(x)` with no module-only method that is `a.b` itself, being called.
    """
    func = call.func
    if isinstance(func, cst.Attribute):
        method = func.attr.value
        if method in MODULE_ONLY_METHODS or (is_statement and method in MOVE_METHODS):
            return func.value
    return func


def unmoved(node: cst.BaseExpression) -> cst.BaseExpression:
    """`x` for `x.to(d)` or `x.cuda().cpu()`: a move keeps a module the same module."""
    while (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in MOVE_METHODS
    ):
        node = node.func.value
    return node


def loads_used_as_modules(
    scope: Scope, item_uses: Collection[str] = (), module_uses: Collection[str] = ()
) -> Iterator[tuple[cst.Call, bool]]:
    """`torch.load` calls whose result (or an item of it) a name of `scope` carries into a module use.

    `item_uses` are names whose items the rule saw used as modules
    (`ckpt["model"].eval()`), `module_uses` names used as modules through a
    move (`model.to(d).eval()`): neither is recorded by the scope.
    Call only once `scope` has been traversed.
    """
    candidates = [(name, name_loads(name, scope)) for name in list(scope.bindings)]
    candidates += [
        (key, _values_loads(key, values, scope)) for key, values in attribute_assignments(scope).items()
    ]
    for key, loads in candidates:
        if not loads:
            continue
        if used_as_module_here(key, scope) or key in module_uses:
            yield from loads
        elif key in item_uses and not any(item for _, item in loads):
            yield from ((call, True) for call, _ in loads)


def used_as_module_here(key: str, scope: Scope) -> bool:
    """Module use of `key` in the scope: module-only method, called, or moved in place."""
    return used_as_module(key, scope) or is_called(key, scope) or moved_in_place(key, scope)
