"""Data loaders and their batches: what is a loader, is it pinned, is a value one of its batches.

A batch that a `DataLoader` yields is already a batch: moving it is the one
transfer per step that training needs. Rules about per-item transfers must
recognise it to stay silent; rules about pinned memory and blocking copies
need to know which loader a batch came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

from torchdev_lint.analysis.devices import Move
from torchdev_lint.analysis.loops import enclosing_loops, rebound_before, target_names
from torchdev_lint.analysis.scopes import Scope, assigned_values, dotted_name, resolve
from torchdev_lint.syntax import keyword_is_true

DATALOADER_CLASSES = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# Calls that pass the items of their iterable argument through (`enumerate(loader)`).
_PASS_THROUGH = frozenset({"enumerate", "iter", "tqdm", "trange", "islice", "cycle", "chain", "track"})
_LOADER_NAME = re.compile(r"loader|(^|_)dl($|_)|(^|_)dls($|_)", re.IGNORECASE)
_BATCH_NAME = re.compile(r"batch|(^|_)(iter|iterator)($|_)", re.IGNORECASE)
_MAX_DEPTH = 6


def is_dataloader_call(node: cst.BaseExpression, scope: Scope) -> bool:
    """`DataLoader(...)` under any import spelling or alias."""
    return isinstance(node, cst.Call) and resolve(node.func, scope) in DATALOADER_CLASSES


def _last_part(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Call):
        node = node.func
    key = dotted_name(node)
    return None if key is None else key.rsplit(".", 1)[-1]


def named_like_loader(node: cst.BaseExpression) -> bool:
    """`train_loader`, `self.val_dataloader`, `train_dl`, `self.train_dataloader()`."""
    last = _last_part(node)
    return last is not None and bool(_LOADER_NAME.search(last))


def named_like_batches(node: cst.BaseExpression) -> bool:
    """`batches`, `batch_iter`, `data_iter`: names that say they hold batches."""
    last = _last_part(node)
    return last is not None and bool(_BATCH_NAME.search(last))


def _unwrap(node: cst.BaseExpression, scope: Scope) -> cst.BaseExpression:
    """`enumerate(tqdm(loader))` → `loader`."""
    while isinstance(node, cst.Call) and node.args and node.args[0].keyword is None:
        name = resolve(node.func, scope)
        if name is None or name.rsplit(".", 1)[-1] not in _PASS_THROUGH:
            break
        node = node.args[0].value
    return node


def _bound_values(node: cst.BaseExpression, scope: Scope) -> list[tuple[cst.BaseExpression, Scope]] | None:
    """The values every binding of a name assigns, or None when any binding is opaque."""
    found = assigned_values(node, scope)
    return None if found is None else [(value, found[1]) for value in found[0]]


def dataloader_calls(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> list[cst.Call]:
    """The `DataLoader(...)` calls an iterable is known to come from (all of them), else []."""
    node = _unwrap(node, scope)
    if is_dataloader_call(node, scope):
        return [node]  # type: ignore[list-item]
    values = _bound_values(node, scope)
    if values is None or depth >= _MAX_DEPTH:
        return []
    calls: list[cst.Call] = []
    for value, owner in values:
        found = dataloader_calls(value, owner, depth + 1)
        if not found:
            return []
        calls.extend(found)
    return calls


def is_loader(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """A DataLoader, a value bound to one, `iter()` of one, or something named like a loader."""
    node = _unwrap(node, scope)
    if is_dataloader_call(node, scope) or named_like_loader(node):
        return True
    values = _bound_values(node, scope)
    return (
        values is not None
        and depth < _MAX_DEPTH
        and all(is_loader(value, owner, depth + 1) for value, owner in values)
    )


def is_batch_source(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """Does iterating `node` yield batches rather than single items?

    Loaders (see `is_loader`), anything named like batches, `next()` of a
    loader, and names bound to any of these.
    """
    node = _unwrap(node, scope)
    if is_loader(node, scope) or named_like_batches(node):
        return True
    if isinstance(node, cst.Call) and resolve(node.func, scope) == "builtins.next" and node.args:
        return is_batch_source(node.args[0].value, scope, depth + 1)
    values = _bound_values(node, scope)
    return (
        values is not None
        and depth < _MAX_DEPTH
        and all(is_batch_source(value, owner, depth + 1) for value, owner in values)
    )


def iterates_mapping(node: cst.BaseExpression) -> bool:
    """`d.items()`, `d.values()`, `d.keys()`: a dict's entries, not a collection of items."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in ("items", "values", "keys")
    )


def is_pinned(call: cst.Call) -> bool:
    """`DataLoader(..., pin_memory=True)` with a literal True."""
    return keyword_is_true(call, "pin_memory")


def batch_base(node: cst.BaseExpression) -> str | None:
    """The name under `batch`, `batch[0]`, `batch["image"]`, `batch.x`."""
    while isinstance(node, (cst.Subscript, cst.Attribute)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def batch_loop(move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope) -> cst.For | None:
    """The enclosing `for ... in <loader>` loop whose batch `move` moves, if any.

    The batch must be the loop's own target (or an element of it) and not be
    rebound earlier in the iteration, so it still is what the loader yielded.
    """
    base = batch_base(move.receiver)
    if base is None:
        return None
    base = _through_comprehensions(base, ancestors)
    for loop in enclosing_loops(ancestors):
        if not isinstance(loop, cst.For) or base not in target_names(loop.target):
            continue
        if rebound_before(ancestors, loop, base):
            return None
        return loop if is_loader(loop.iter, scope) else None
    return None


def _through_comprehensions(name: str, ancestors: Sequence[cst.CSTNode]) -> str:
    """`v` in `{k: v.to(d) for k, v in batch.items()}` stands for `batch`."""
    for node in reversed(ancestors):
        if isinstance(node, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            comp = node.for_in
            if comp.inner_for_in is None and name in target_names(comp.target):
                source = comp.iter
                if iterates_mapping(source):
                    source = source.func.value  # type: ignore[attr-defined]
                inner = batch_base(source)
                if inner is None:
                    return name
                name = inner
    return name


def moves_loader_batch(move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope) -> bool:
    """Is this a host-to-device move of a batch a loader yielded?"""
    return move.to_accelerator and batch_loop(move, ancestors, scope) is not None


def pinned_batch(move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope) -> bool:
    """Is the moved value a batch from a loader known to pin memory (all its sources pinned)?"""
    loop = batch_loop(move, ancestors, scope)
    if loop is None:
        return False
    calls = dataloader_calls(loop.iter, scope)
    return bool(calls) and all(is_pinned(call) for call in calls)
