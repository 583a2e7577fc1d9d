"""Moves of single items inside a loop or comprehension over an in-memory collection.

`for x in xs: model(x.to(d))` and `torch.stack([x.cuda() for x in xs])`
transfer one item per iteration where one transfer of the joined batch would
do. These helpers recognise such a loop (over a collection, not a loader's
batches), the move of the item itself (`x.to(d)`, `x[0].cuda()`, or
`y = x.to(d)` earlier in the body) and the moves that only align an input
with a layer's device and dtype, which are not host-to-device transfers.
`batched_loop` writes the loop that calls a model once on the stacked batch instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data.loaders import is_batch_source, iterates_mapping
from torchdev_lint.analysis.knowledge.devices import Move, as_move
from torchdev_lint.analysis.syntax.loops import depends_on, innermost_loop, used_outside_loop
from torchdev_lint.analysis.syntax.scopes import Scope, module_reference
from torchdev_lint.analysis.syntax.units import memo
from torchdev_lint.analysis.values.tensor_collections import one_shape
from torchdev_lint.syntax import keyword, method_call

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


def chain_root(node: cst.BaseExpression) -> str | None:
    """The name a chain of method calls, attributes and subscripts starts from."""
    while True:
        if isinstance(node, cst.Call):
            node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            return node.value if isinstance(node, cst.Name) else None


def per_item_move(move: Move, item: str, varying: frozenset[str]) -> bool:
    """A host-to-device move of the item itself (`x.to(d)`, `x.unsqueeze(0).cuda()`, `x[0].to(d)`),
    to a device that does not change per iteration. `xs[i:i + 8].to(d)` in `for i in ...` moves
    a slice of another tensor, a batch, and does not count."""
    if not move.to_accelerator or chain_root(move.receiver) != item:
        return False
    return move.device_node is None or not depends_on(move.device_node, varying)


def aligns_devices(move: Move, scope: Scope) -> bool:
    """`.to(t.device)` / `.to(first_device)` with `first_device = t.device`: gathering tensors
    that may sit on several devices onto one, not a host-to-device transfer (stacking first
    would mix devices)."""
    node = move.device_node
    if isinstance(node, cst.Name):
        found = scope.lookup(node.value)
        values = [b.value for b in found[1]] if found is not None else []
        if values and all(v is not None for v in values):
            return all(isinstance(v, cst.Attribute) and v.attr.value == "device" for v in values)
    return isinstance(node, cst.Attribute) and node.attr.value == "device"


def matches_layer(move: Move, scope: Scope) -> bool:
    """`.to(device=target_device, dtype=target_dtype)` with both taken from a tensor or layer
    (`w.device`, `w.dtype`): an input made to match the layer it feeds, inside model code
    where the items already live on a device, not a host-to-device transfer."""
    dtype = keyword(move.call, "dtype")
    positional = [a.value for a in move.call.args if a.keyword is None]
    dtype_node = dtype.value if dtype is not None else (positional[1] if len(positional) > 1 else None)
    return (
        dtype_node is not None
        and aligns_devices(move, scope)
        and all(_from_attribute(v, "dtype") for v in _values(dtype_node, scope))
    )


def _values(node: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression]:
    """A name's assigned values when all are known, else the expression itself."""
    if isinstance(node, cst.Name):
        found = scope.lookup(node.value)
        bindings = found[1] if found is not None else []
        values = [b.value for b in bindings if b.value is not None]
        if values and len(values) == len(bindings):
            return values
    return [node]


def _from_attribute(node: cst.BaseExpression, attr: str) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == attr


def item_collection(iterable: cst.BaseExpression, scope: Scope) -> bool:
    """An in-memory collection of single items: not batches from a loader, not a dict view."""
    return not is_batch_source(iterable, scope) and not iterates_mapping(iterable)


def item_loop(ctx: FileContext) -> cst.For | None:
    """The innermost loop around the node being visited, when it is a `for <name> in <collection>` loop."""
    loop = innermost_loop(ctx.ancestors)
    if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name):
        return None
    if loop.asynchronous is not None:
        return None
    # Asked for each call in the loop: once per loop and scope (a comprehension's may differ), which
    # is sound since a scope's bindings are all collected when it opens.
    key = ("item collection", loop, ctx.scope)
    cache = memo(ctx)
    found = cache.get(key)
    if found is None:
        found = cache[key] = item_collection(loop.iter, ctx.scope)
    return loop if found else None


def moved_aliases(loop: cst.For, item: str, scope: Scope) -> dict[str, Move]:
    """`x = item.to(d)` statements directly in the body: x → the move (x assigned once)."""
    found: dict[str, Move] = {}
    body = loop.body
    if not isinstance(body, cst.IndentedBlock):
        return found
    for statement in body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
                and isinstance(small.value, cst.Call)
            ):
                move = as_move(small.value, scope)
                if move is not None and chain_root(move.receiver) == item:
                    found[small.targets[0].target.value] = move
    return found


def comprehension_move(comp: cst.ListComp | cst.GeneratorExp, scope: Scope) -> Move | None:
    """The per-item host-to-device move a one-loop comprehension makes of its items, if any."""
    loop = comp.for_in
    if loop.inner_for_in is not None or loop.asynchronous is not None:
        return None
    if not isinstance(loop.target, cst.Name) or not item_collection(loop.iter, scope):
        return None
    move = as_move(comp.elt, scope) if isinstance(comp.elt, cst.Call) else None
    item = loop.target.value
    if move is None or not per_item_move(move, item, frozenset({item})) or aligns_devices(move, scope):
        return None
    return move


def moves_only(move: Move) -> bool:
    """Does the move change nothing but the device (no dtype, tensor or memory format)?"""
    extra = [a for a in move.call.args if a.value is not move.device_node]
    return all(a.keyword is not None and a.keyword.value == "non_blocking" for a in extra)


def batched_loop(
    loop: cst.For, model_call: cst.Call, move: Move, scope: Scope, ancestors: Sequence[cst.CSTNode]
) -> cst.SimpleStatementLine | None:
    """The statement that replaces `for x in xs: out.append(model(x.to(d)))` (`model_call` and
    `move` found in it, `ancestors` those of the move): `out.extend(model(torch.stack(xs).to(d))
    .unbind(0))`, one model call on the stacked batch (`torch.cat`/`split(1)` for items whose
    first dimension is 1); None when the loop is not exactly that, its items are not a list of
    one shape built in the function, the item is used after the loop, or a comment would be lost."""
    body = loop.body
    if loop.orelse is not None or not isinstance(body, cst.IndentedBlock) or len(body.body) != 1:
        return None
    line = body.body[0]
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    expr = line.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
        return None
    append = expr.value
    if not (
        isinstance(append.func, cst.Attribute)
        and append.func.attr.value == "append"
        and len(append.args) == 1
        and append.args[0].value is model_call
        and len(model_call.args) == 1
        and model_call.args[0].value is move.call
        and isinstance(move.receiver, cst.Name)
    ):
        return None
    shape = one_shape(loop.iter, scope)
    torch_name = module_reference(scope, "torch")
    item = move.receiver.value
    if shape is None or torch_name is None or used_outside_loop(ancestors, loop, item):
        return None
    join, split = ("cat", "split") if shape[:1] == ("1",) else ("stack", "unbind")
    joined = cst.Call(func=cst.Attribute(value=torch_name, attr=cst.Name(join)), args=[cst.Arg(loop.iter)])
    moved = method_call(joined, move.call.func.attr.value, tuple(move.call.args))  # type: ignore[attr-defined]
    outputs = method_call(
        model_call.with_changes(args=[cst.Arg(moved)]),
        split,
        [cst.Arg(cst.Integer("1" if join == "cat" else "0"))],
    )
    extend = append.with_changes(
        func=append.func.with_changes(attr=cst.Name("extend")), args=[cst.Arg(outputs)]
    )
    if body.header.comment is not None or any(e.comment is not None for e in body.footer):
        return None  # a comment on the `for` line or after the body would have nowhere to go
    own = [e for e in line.leading_lines if e.comment is not None]
    return line.with_changes(
        body=[expr.with_changes(value=extend)], leading_lines=[*loop.leading_lines, *own]
    )
