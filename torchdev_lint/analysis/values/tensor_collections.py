"""What a local collection of tensors holds: its bound values, the factories' shapes and dtypes.

`xs = [torch.randn(3, 8) for _ in range(4)]` holds items of one shape built on
the host; `[torch.randn(s) for s in sizes]` items that differ in shape. Rules
that join items before moving them (TDL201) ask here whether the join is
possible and whether it gives the same tensor.
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.knowledge.torch_api import SHAPED_FACTORIES
from torchdev_lint.analysis.provenance.checkpoint_loads import UseIndex
from torchdev_lint.analysis.syntax.loops import depends_on, names_in
from torchdev_lint.analysis.syntax.scopes import Scope, resolve
from torchdev_lint.analysis.syntax.walk import first
from torchdev_lint.analysis.values.kinds import is_tensor_factory_call
from torchdev_lint.syntax import keyword

# Builtins that only read what they are given.
_READING_BUILTINS = frozenset(
    f"builtins.{name}" for name in ("len", "print", "enumerate", "zip", "reversed", "sorted", "list", "tuple")
)


def collection_values(node: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression] | None:
    """The values a local collection name is bound to (in its function), or None; None too when
    the function may put other items into it (`_only_read`): its items are not only those values."""
    if not isinstance(node, cst.Name):
        return None
    found = scope.lookup(node.value)
    if found is None or found[0].kind != "function" or not found[1]:
        return None
    values = [b.value for b in found[1] if b.value is not None]
    if len(values) != len(found[1]):
        return None
    owner = found[0]
    return values if _only_read(node.value, owner) else None


def _only_read(name: str, owner: Scope) -> bool:
    """Is every other use of the local collection `name` in its function a read: iterated, indexed,
    `in`, measured, handed to torch or a reading builtin? Anything else (`xs.append(t)`,
    `xs[0] = t`, `xs += [t]`, `bank = xs` then `bank.append(t)`, a helper) may add items."""
    index: UseIndex | None = getattr(owner, "_use_index", None)
    if index is None:
        index = owner._use_index = UseIndex(owner.node)  # type: ignore[attr-defined]  # once per function
    for use in index.names(name):
        above = index.parent(use)
        if isinstance(above, cst.AssignTarget) and above.target is use:
            continue  # one of its bindings
        if isinstance(above, (cst.For, cst.CompFor)) and above.iter is use:
            if isinstance(above, cst.For) and _items_rebound(above):
                return False  # `for f in frames: f.data = f.data.to(d)`: the items are moved in place
            continue
        if isinstance(above, cst.ComparisonTarget) and above.comparator is use:
            continue
        if isinstance(above, cst.Subscript) and above.value is use:
            if not isinstance(index.parent(above), (cst.AssignTarget, cst.AugAssign, cst.Del)):
                continue  # `xs[0]` read
        if isinstance(above, cst.Attribute) and above.attr is use:
            continue  # `obj.xs`: another name
        if isinstance(above, cst.Arg) and above.value is use and not above.star:
            call = index.parent(above)
            callee = resolve(call.func, owner) or "" if isinstance(call, cst.Call) else ""
            if callee.startswith("torch.") or callee in _READING_BUILTINS:
                continue
        return False
    return True


def is_list(node: cst.BaseExpression, scope: Scope) -> bool:
    """A name bound only to list/tuple displays or list comprehensions (stack accepts those)."""
    if not isinstance(node, cst.Name):
        return False
    found = scope.lookup(node.value)
    if found is None or not found[1]:
        return False
    return all(isinstance(b.value, (cst.List, cst.Tuple, cst.ListComp)) for b in found[1])


def factory_shape(node: cst.BaseExpression, scope: Scope) -> tuple[str, ...] | None:
    """The shape of `torch.randn(1, 3, 8, 8)` as argument texts, for shape-only factories."""
    if not is_tensor_factory_call(node, scope):
        return None
    name = resolve(node.func, scope) or ""
    if name[6:] not in SHAPED_FACTORIES:
        return None
    args = [a for a in node.args if a.keyword is None]
    if any(a.star for a in args) or not args:
        return None
    if len(args) == 1 and isinstance(args[0].value, (cst.Tuple, cst.List)):
        values = [e.value for e in args[0].value.elements]
    else:
        values = [a.value for a in args]
    module = cst.Module(body=[])
    return tuple(module.code_for_node(v) for v in values)


def shapes_differ(iterable: cst.BaseExpression, scope: Scope) -> bool:
    """Items known to differ in shape: a multi-scale list (sizes from the comprehension, or unequal literals)."""
    for value in collection_values(iterable, scope) or ():
        if isinstance(value, cst.ListComp) and isinstance(value.elt, cst.Call):
            if is_tensor_factory_call(value.elt, scope) and depends_on(
                value.elt, names_in(value.for_in.target)
            ):
                return True
        if isinstance(value, (cst.List, cst.Tuple)):
            shapes = {factory_shape(e.value, scope) for e in value.elements}
            if len(shapes) > 1:
                return True
    return False


def one_shape(iterable: cst.BaseExpression, scope: Scope) -> tuple[str, ...] | None:
    """The common shape of a list comprehension of one shape-only factory call, else None."""
    values = collection_values(iterable, scope)
    if values is None or len(values) != 1 or not isinstance(values[0], cst.ListComp):
        return None
    comp = values[0]
    if comp.for_in.inner_for_in is not None or comp.for_in.ifs:
        return None
    shape = factory_shape(comp.elt, scope)
    if shape is None or depends_on(comp.elt, names_in(comp.for_in.target)):
        return None
    return shape


def _items_rebound(loop: cst.For) -> bool:
    """Does the loop over the collection assign an attribute of its item (`f.data = ...`)?"""
    target = loop.target.value if isinstance(loop.target, cst.Name) else None
    return target is not None and (
        first(
            loop.body,
            lambda node: (
                isinstance(node, cst.AssignTarget)
                and isinstance(node.target, cst.Attribute)
                and isinstance(node.target.value, cst.Name)
                and node.target.value.value == target
            ),
        )
        is not None
    )


def host_items_of_one_dtype(iterable: cst.BaseExpression, scope: Scope) -> bool:
    """Items provably on the CPU, all of one dtype: a local list built of shape-only torch
    factories (`torch.randn(3)`) without `device=`, all with the same `dtype=` (or none).
    Joining such items on the host and then moving the batch gives the same tensor as
    moving each item and joining on the device; items on several devices (or of several
    dtypes, promoted by the join) would not be provably so."""
    values = collection_values(iterable, scope)
    if not values:
        return False
    dtypes = set()
    for value in values:
        if isinstance(value, cst.ListComp) and value.for_in.inner_for_in is None:
            elements = [value.elt]
        elif isinstance(value, (cst.List, cst.Tuple)):
            elements = [e.value for e in value.elements]
        else:
            return False
        for element in elements:
            if not isinstance(element, cst.Call):
                return False
            if factory_shape(element, scope) is None or keyword(element, "device") is not None:
                return False
            dtype = keyword(element, "dtype")
            if dtype is not None and isinstance(value, cst.ListComp):
                if depends_on(dtype.value, names_in(value.for_in.target)):
                    return False  # `[torch.zeros(3, dtype=dt) for dt in dtypes]`: one dtype per item
            dtypes.add(None if dtype is None else cst.Module(body=[]).code_for_node(dtype.value))
    return len(dtypes) == 1
