"""Checkpoints loaded whole: which `torch.load` a value comes from, and whether a name uses it as a module.

`model = torch.load("model.pt")` followed by `model.eval()` loads a pickled
module (TDL104); `ckpt = torch.load(p)` followed by `ckpt["model"].eval()`
finds a module stored in a checkpoint dict (TDL105). Rules collect the item
and move uses they see and ask `loads_used_as_modules` once a scope is done.
A name bound only to loads is judged by all its uses; a name also bound to
something else (`model = Net()`, saved, then `model = torch.load(p)`) by the
uses that straight-line code reaches from a load (`reaching_bindings`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator

import libcst as cst

from torchdev_lint.analysis.knowledge.torch_api import MODULE_ONLY_METHODS, MOVE_METHODS, SAME_KIND_METHODS
from torchdev_lint.analysis.provenance.checkpoint_loads import UseIndex
from torchdev_lint.analysis.syntax.bindings import walk_bindings
from torchdev_lint.analysis.syntax.reaching_bindings import reaching_assignment
from torchdev_lint.analysis.syntax.scopes import (
    Binding,
    Scope,
    dotted_name,
    resolve,
    scope_body,
    small_statements,
)
from torchdev_lint.analysis.values.kinds import (
    is_called,
    is_module_class,
    is_self_move,
    moved_in_place,
    statement_calls,
    used_as_module,
)
from torchdev_lint.syntax import keyword


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


def unpickles_anything(load: cst.Call) -> bool:
    """`torch.load(..., weights_only=False)`: no allow-list is asked."""
    given = keyword(load, "weights_only")
    return given is not None and isinstance(given.value, cst.Name) and given.value.value == "False"


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


# What allow-lists classes for `weights_only=True` loads: a context manager for the loads under it,
# and a call that does it for the whole process. A module loaded so is still pickled whole.
ALLOW_LIST_CONTEXTS = frozenset({"torch.serialization.safe_globals"})
ALLOW_LIST_CALLS = frozenset({"torch.serialization.add_safe_globals"})
# Dict methods that return an item (`ckpt.get("ema")`).
_ITEM_GETTERS = frozenset({"get", "pop"})
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
        holders = items_taken(value)
        if holders and all(holder.value != key for holder in holders):
            wholes = [name_loads(holder.value, scope, depth + 1) for holder in holders]
            if all(whole and not any(item for _, item in whole) for whole in wholes):
                loads.extend((call, True) for whole in wholes if whole for call, _ in whole)
                continue
        return None
    return loads or None


def items_taken(value: cst.BaseExpression) -> list[cst.Name] | None:
    """The names of which `value` is an item: `ckpt["model"]`, `ckpt.get("ema")`, either of two
    (`ckpt.get("ema") or ckpt["model"]`), possibly moved or cast (`.to(d).float()`). Else None."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in SAME_KIND_METHODS
    ):
        value = value.func.value
    if isinstance(value, cst.BooleanOperation):
        left, right = items_taken(value.left), items_taken(value.right)
        return left + right if left and right else None
    if isinstance(value, cst.Subscript):
        holder = value.value
    elif (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in _ITEM_GETTERS
    ):
        holder = value.func.value
    else:
        return None
    return [holder] if isinstance(holder, cst.Name) else None


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
    scope: Scope,
    item_uses: Collection[cst.BaseExpression] = (),
    module_uses: Collection[cst.BaseExpression] = (),
) -> Iterator[tuple[cst.Call, bool]]:
    """`torch.load` calls whose result (or an item of it) a name of `scope` carries into a module use.

    `item_uses` are the receivers whose items the rule saw used as modules
    (`ckpt` of `ckpt["model"].eval()`), `module_uses` receivers used as modules
    through a move (`model` of `model.to(d).eval()`): neither is recorded by
    the scope. Call only once `scope` has been traversed.
    """
    item_keys = {dotted_name(node) for node in item_uses}
    module_keys = {dotted_name(node) for node in module_uses}
    candidates = [(name, name_loads(name, scope)) for name in list(scope.bindings)]
    candidates += [
        (key, _values_loads(key, values, scope)) for key, values in attribute_assignments(scope).items()
    ]
    mixed: list[str] = []
    for key, loads in candidates:
        if not loads:
            if loads is None and "." not in key and _binds_load(key, scope):
                mixed.append(key)
            continue
        if used_as_module_here(key, scope) or key in module_keys:
            yield from loads
        elif key in item_keys and not any(item for _, item in loads):
            yield from ((call, True) for call, _ in loads)
    if mixed:
        yield from _reached_loads(scope, mixed, item_uses, module_uses)


def _binds_load(name: str, scope: Scope) -> bool:
    """Is one of the name's bindings a load or an item of a name (`net = ckpt["model"]`)?"""
    return any(
        b.value is not None
        and (loaded_checkpoint(b.value, scope) is not None or items_taken(b.value) is not None)
        for b in scope.bindings.get(name, ())
    )


def _reached_loads(
    scope: Scope,
    names: list[str],
    item_uses: Collection[cst.BaseExpression],
    module_uses: Collection[cst.BaseExpression],
) -> Iterator[tuple[cst.Call, bool]]:
    """Loads that reach a module use of a name also bound to other values, in straight-line code.

    `tower = Tower()`, `torch.save(tower, p)`, `tower = torch.load(p)`, `tower.eval()`: the use
    reads the load whatever else the name holds elsewhere. Uses reached through a branch or loop
    that binds the name (`if model is None: model = torch.load(p)`) are not known: skipped.
    """
    owner = scope.owner
    moves = statement_calls(scope)
    uses: list[tuple[cst.BaseExpression, bool]] = []
    for name in names:
        calls = [call for method, call in owner.method_calls.get(name, ()) if method in MODULE_ONLY_METHODS]
        calls += [call for method, call in moves.get(name, ()) if method in MOVE_METHODS]
        uses += [(call.func.value, False) for call in calls if isinstance(call.func, cst.Attribute)]
        uses += [(call.func, False) for call in owner.calls.get(name, ())]
        uses += [(node, False) for node in module_uses if dotted_name(node) == name]
        uses += [(node, True) for node in item_uses if dotted_name(node) == name]
    index = UseIndex(owner.node)
    for node, item_use in uses:
        loads = _loads_reaching(node, index, scope) if isinstance(node, cst.Name) else None
        if not loads:
            continue
        if not item_use:
            yield from loads
        elif not any(item for _, item in loads):
            yield from ((call, True) for call, _ in loads)


def _loads_reaching(
    node: cst.Name, index: UseIndex, scope: Scope, depth: int = 0
) -> list[tuple[cst.Call, bool]] | None:
    """The load (or item of one) that the assignment reaching this use of a name binds, if any.

    `model = model.to(d)` is followed back to what it moves; `net = ckpt["model"]` and
    `ckpt = (ckpt.get("ema") or ckpt["model"]).float()` to the load that `ckpt` holds there.
    """
    assign = reaching_assignment(node, index.parent)
    value = assign.value if assign is not None else None
    if value is None or depth > 4:
        return None
    if is_self_move(value, node.value):
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            value = value.func.value
        return _loads_reaching(value, index, scope, depth + 1) if isinstance(value, cst.Name) else None
    loaded = loaded_checkpoint(value, scope)
    if loaded is not None:
        return [loaded]
    loads: list[tuple[cst.Call, bool]] = []
    for holder in items_taken(value) or ():  # `ckpt = ckpt["model"]` reads the load before it
        whole = _loads_reaching(holder, index, scope, depth + 1)
        if whole is None and holder.value != node.value:
            whole = name_loads(holder.value, scope)
        if not whole or any(item for _, item in whole):
            return None
        loads += [(call, True) for call, _ in whole]
    return loads or None


def used_as_module_here(key: str, scope: Scope) -> bool:
    """Module use of `key` in the scope: module-only method, called, moved in place, or
    declared a module (`net: nn.Module = torch.load(path)`)."""
    return (
        used_as_module(key, scope)
        or is_called(key, scope)
        or moved_in_place(key, scope)
        or any(
            bound.kind == "annotation"
            and isinstance(bound.target, cst.Name)
            and bound.target.value == key
            and isinstance(bound.node, cst.AnnAssign)
            and is_module_class(resolve(bound.node.annotation.annotation, scope), scope)
            for bound in walk_bindings(scope_body(scope.node), expressions=False)
        )
    )
