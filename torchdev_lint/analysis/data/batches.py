"""Batches moved inside the loop that iterates their loader, and what happens to their host memory.

`batch_move` recognises `x.to(d)` in `for x, y in loader:` (or on a part
unpacked from the batch) as the one transfer per step training needs
(`result_unused`: unless the moved batch is bound to a name nothing reads);
`batch_loaders` says whether the loaders that yield it pin memory (and collate by default), and
`host_written_after` whether the host batch may be written while a
non-blocking copy from it is still reading it (TDL205's fix safety).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise
from typing import NamedTuple, Protocol

import libcst as cst

from torchdev_lint.analysis.data.loaders import is_loader, iterates_mapping, loader_origin
from torchdev_lint.analysis.knowledge.devices import Move, as_move, is_dtype
from torchdev_lint.analysis.knowledge.torch_api import (
    DESCRIPTIVE_ATTRIBUTES,
    DTYPE_CAST_METHODS,
    MEMORY_SHARING_METHODS,
)
from torchdev_lint.analysis.project.parameters import Parameter
from torchdev_lint.analysis.syntax.loops import (
    Loop,
    body_statement,
    bound_in,
    bound_in_body,
    count_name,
    enclosing_loops,
    path_inside,
    statements_before,
    target_names,
)
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, resolve
from torchdev_lint.syntax import keyword, keyword_is_true

_MAX_DEPTH = 6  # unpacking steps followed back to the loop target (`x, y = parts`, `parts = batch`)

# --- Batches inside the loop that iterates them ---------------------------------------------


def batch_base(node: cst.BaseExpression) -> str | None:
    """The name under `batch`, `batch[0]`, `batch["image"]`, `batch.x`."""
    while isinstance(node, (cst.Subscript, cst.Attribute)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


@dataclass(frozen=True)
class BatchMove:
    """A move of (part of) a batch that the loop `loop` iterates (or draws with `next(source)` on each
    pass: `batch_sources.drawn_batch_move`); `source` is what yields the batches.

    `host` are the access paths that reach the host tensor being copied: the
    moved expression itself and what it was unpacked from in the loop body
    (`batch` for `x, y = batch`); a name alone means "anything under it".
    `whole` says the moved value is the batch itself (`for batch in loader: batch.to(d)`),
    which even PyTorch's default collation may make a mapping class with a `.to()` of its own,
    where a part of a batch (`x` in `for x, y in loader`, `batch["image"]`) is what the
    default collation made a tensor (`BatchLoaders.collated_part`).
    """

    move: Move
    loop: Loop
    host: tuple[tuple[str, ...], ...]
    whole: bool
    source: cst.BaseExpression


def batch_move(
    move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope, through_casts: bool = False
) -> BatchMove | None:
    """`move` (the last of `ancestors`) as a move of a batch a loader yields, if it is one.

    The moved value must be the loop's target (or part of it), or be unpacked
    from it in the loop body (`x, y = batch`, `images = batch["image"]`), and
    not be rebound in between, so it still is what the loader yielded. With
    `through_casts`, dtype casts in front of the move are looked through
    (`x.float().to(d)` moves `x`'s data; `uncast`); a cast behind it
    (`x.to(d).float()`) never hides the move.
    """
    moved = uncast(move.receiver, scope) if through_casts else move.receiver
    base = batch_base(moved)
    if base is None:
        return None
    mapped = through_comprehensions(base, ancestors)
    receiver = access_path(moved) if mapped == base else (mapped,)
    for loop in enclosing_loops(ancestors):
        if not isinstance(loop, cst.For):
            continue
        if mapped not in target_names(loop.target) and mapped not in bound_in_body(loop):
            continue
        sources = _batch_sources(loop, body_statement(ancestors, loop), mapped, path_inside(ancestors, loop))
        if sources is None or receiver is None or not is_loader(loop.iter, scope):
            return None
        whole = (
            isinstance(moved, cst.Name) and mapped == base and not sources and _is_batch(loop, base, scope)
        )
        return BatchMove(move, loop, (receiver, *sources), whole, loop.iter)
    return None


def _is_batch(loop: cst.For, name: str, scope: Scope) -> bool:
    """Does `name` hold the whole batch the loader yields (`for batch in loader`, `for i, batch in
    enumerate(loader)`), not a part unpacked from it (`x` in `for x, y in loader`)?"""
    target: cst.BaseExpression = loop.target
    if isinstance(target, cst.Tuple) and isinstance(loop.iter, cst.Call):
        if resolve(loop.iter.func, scope) != "builtins.enumerate" or len(target.elements) != 2:
            return False
        target = target.elements[1].value
    return isinstance(target, cst.Name) and target.value == name


def uncast(node: cst.BaseExpression, scope: Scope) -> cst.BaseExpression:
    """What dtype casts are applied to: `x` in `x.float()`, `x.long()`, `x.to(torch.float32)`,
    `x.type(torch.float32)`, `x.half().to(dtype=torch.float16)`; `node` itself otherwise."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and _dtype_cast(node, scope):
        node = node.func.value
    return node


def _dtype_cast(call: cst.Call, scope: Scope) -> bool:
    """A method call that casts its receiver to a dtype and does not move it."""
    if not isinstance(call.func, cst.Attribute):
        return False
    method = call.func.attr.value
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if method in DTYPE_CAST_METHODS:
        return not positional and not any(arg.star for arg in call.args)  # `memory_format=` only
    if method not in ("to", "type") or (method == "to" and as_move(call, scope) is not None):
        return False
    dtype = keyword(call, "dtype")
    first = positional[0] if positional else dtype.value if dtype is not None else None
    return first is not None and is_dtype(first, scope)


def result_unused(ancestors: Sequence[cst.CSTNode]) -> bool:
    """Is the last of `ancestors`, a move, bound (through a chain such as `.to(d).float()`) to a
    local name its function never reads (`data_cuda = data.to(d)`, the model given `data`)? Such
    a move is no evidence that the batches are used on the device."""
    index = len(ancestors) - 1
    while index >= 2:
        attribute, call = ancestors[index - 1], ancestors[index - 2]
        if not (
            isinstance(attribute, cst.Attribute) and isinstance(call, cst.Call) and call.func is attribute
        ):
            break
        index -= 2
    holder = ancestors[index - 1] if index >= 1 else None
    function = next((node for node in reversed(ancestors) if isinstance(node, cst.FunctionDef)), None)
    if function is None or not isinstance(holder, cst.Assign) or len(holder.targets) != 1:
        return False
    target = holder.targets[0].target
    return isinstance(target, cst.Name) and count_name(function, target.value) == 1


def _batch_sources(
    loop: cst.For,
    statement: cst.BaseStatement | None,
    name: str,
    inside: Sequence[cst.CSTNode] = (),
    depth: int = 0,
) -> tuple[tuple[str, ...], ...] | None:
    """When `name` holds the loop's batch (or part of it) just before `statement`: the accesses
    it was unpacked from in the body (empty for the loop target itself); None otherwise.
    `inside`: the path from the loop down to the move, when `statement` holds it."""
    if statement is None:
        before: list[cst.BaseStatement] = []
        if name in bound_in_body(loop):
            return None
    else:
        before = statements_before(loop, statement)
        if not isinstance(statement, cst.SimpleStatementLine) and _bound_on_the_way(inside, statement, name):
            return None  # rebound inside the compound statement before the move, or in an inner loop
    for index in range(len(before) - 1, -1, -1):
        if name not in bound_in([before[index]]):
            continue
        source = _unpacked_from(before[index], name)
        root = None if source is None else batch_base(source)
        path = None if source is None else access_path(source)
        if root is None or path is None or depth >= _MAX_DEPTH:
            return None
        earlier = _batch_sources(loop, before[index], root, depth=depth + 1)
        return None if earlier is None else (path, *earlier)
    return () if name in target_names(loop.target) else None


def _bound_on_the_way(inside: Sequence[cst.CSTNode], statement: cst.BaseStatement, name: str) -> bool:
    """May `name` be rebound in `statement` before the move at the end of `inside` reads it: by a
    statement before it in a block on the way down (`if cuda: x = x.cuda()` reads the batch's `x`),
    or anywhere in a loop on the way (a later pass). True when the way is not known."""
    start = next((i for i, node in enumerate(inside) if node is statement), None)
    if start is None:
        return name in bound_in([statement])
    for parent, child in pairwise(inside[start:]):
        if isinstance(parent, (cst.For, cst.While)) and name in bound_in([parent]):
            return True
        if isinstance(parent, cst.IndentedBlock):
            body = list(parent.body)
            if name in bound_in(body[: next(i for i, s in enumerate(body) if s is child)]):
                return True
    return False


def _unpacked_from(statement: cst.BaseStatement, name: str) -> cst.BaseExpression | None:
    """In `x = batch[0]`, `x, y = batch`, `x, y = batch[0], batch[1]`: the access `name` comes from."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    target, value = small.targets[0].target, small.value
    if isinstance(target, cst.Name):
        source: cst.BaseExpression | None = value if target.value == name else None
    elif not isinstance(target, (cst.Tuple, cst.List)):
        source = None
    elif isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements):
        pairs = zip(target.elements, value.elements, strict=True)
        source = next(
            (v.value for t, v in pairs if isinstance(t.value, cst.Name) and t.value.value == name), None
        )
    else:
        source = value  # `x, y = batch`: x is a part of the batch
    return source if source is not None and batch_base(source) is not None else None


def through_comprehensions(name: str, ancestors: Sequence[cst.CSTNode]) -> str:
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


class BatchLoaders(NamedTuple):
    """What the loaders a moved batch may come from say of it (`batch_loaders`)."""

    # All of them pin memory (and none places batches on the device); a loader parameter counts
    # as pinned when the project facts say every call passes one.
    pinned: bool
    # The moved value is a part of a batch that PyTorch's default collation made (`x` in
    # `for x, y in loader`, `batch["image"]`), so a tensor, not a project class whose `.to()` may
    # take other arguments. A whole batch (`batch.to(d)`) may be a collated mapping class.
    collated_part: bool


def batch_loaders(batch: BatchMove, scope: Scope, facts: PinnedParameters | None = None) -> BatchLoaders:
    """Follow the batch's loop to its loaders once and say what they make of it."""
    origin = loader_origin(batch.source, scope)
    pinned = origin.pinned(facts.pinned if facts is not None else None)
    collated = not batch.whole and origin.collated(facts.collated if facts is not None else None)
    return BatchLoaders(pinned, collated)


class PinnedParameters(Protocol):
    """What the project facts say of a loader parameter (see `analysis/project_facts.FileFacts`)."""

    def pinned(self, parameter: Parameter) -> bool: ...

    def collated(self, parameter: Parameter) -> bool: ...


# --- Is the host batch written after its copy? -----------------------------------------------

# An index that is not a literal key (`x[i]`, `x[mask]`), and one that selects a
# region of a tensor or array (`x[:, 0]`, `x[...]`): both may match any key.
_ANY_KEY = "[*]"
_REGION = "[:]"
_VIEW = "()"
_PURE_BUILTINS = frozenset(
    {
        "print",
        "len",
        "isinstance",
        "str",
        "repr",
        "format",
        "type",
        "id",
        "hasattr",
        "getattr",
        "bool",
        "int",
        "float",
    }
)


class HostWrite(Enum):
    """What the code after a host-to-device copy may do to the host tensor it copied."""

    NONE = "none"  # nothing can write it
    POSSIBLE = "possible"  # it escapes to code that may write it (an unknown call, a return, a container)
    CERTAIN = "certain"  # it is written in place (in-place method, `out=`, item assignment, `+=`)


def host_written_after(batch: BatchMove, ancestors: Sequence[cst.CSTNode], scope: Scope) -> HostWrite:
    """May the host tensor that `batch.move` copies be written before the copy is known complete?

    A non-blocking copy from pinned memory reads the source after the call
    returns, so a write to it in the rest of the function (this iteration, the
    iterations of loops inside the batch loop, the code after the loop) would
    race with the copy; reads are harmless. Names bound to views of the batch
    (`a = x.numpy()`) count as the batch.
    """
    watch = _Watch(set(batch.host), scope, batch.move.call)
    statement = body_statement(ancestors, batch.loop)
    if statement is not None:
        for earlier in statements_before(batch.loop, statement):
            watch.learn_aliases(earlier)
    for node, rebinds in _after(ancestors, batch.loop):
        watch.scan(node, rebinds)
        if watch.result is HostWrite.CERTAIN:
            break
    return watch.result


def _after(ancestors: Sequence[cst.CSTNode], loop: Loop) -> list[tuple[cst.CSTNode, bool]]:
    """What may run after the last ancestor, in order, within its function.

    The statement holding it first, then whatever follows at each enclosing level;
    loops nested inside the batch loop repeat, so their whole body follows too.
    The flag says whether the node runs right after the copy in straight-line
    order (the statement itself and the simple statements after it in its block),
    so that an assignment there surely rebinds what it assigns.
    """
    after: list[tuple[cst.CSTNode, bool]] = []
    inside_batch_loop = True
    straight = True
    for index in range(len(ancestors) - 2, -1, -1):
        node, child = ancestors[index], ancestors[index + 1]
        if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if not after:
            if not isinstance(child, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                continue  # still inside the statement holding the copy
            straight = isinstance(child, cst.BaseSmallStatement)
            after.append((child, straight))
        if node is loop:
            inside_batch_loop = False
        elif inside_batch_loop and isinstance(node, (cst.For, cst.While)) and child is node.body:
            straight = False
            after.append((node.body, False))
        for sibling in _children_after(node, child):
            straight = straight and isinstance(sibling, (cst.BaseSmallStatement, cst.SimpleStatementLine))
            after.append((sibling, straight))
            straight = straight and not _leaves(sibling)
        if isinstance(node, cst.IndentedBlock):
            straight = False
    return after


def _children_after(node: cst.CSTNode, child: cst.CSTNode) -> list[cst.CSTNode]:
    if isinstance(node, (cst.IndentedBlock, cst.Module, cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        body: Sequence[cst.CSTNode] = node.body
    else:
        body = node.children
    for index, item in enumerate(body):
        if item is child:
            return list(body[index + 1 :])
    return []


def _leaves(statement: cst.CSTNode) -> bool:
    """Does a simple statement leave the straight line (`continue`, `break`, `return`, `raise`)?"""
    smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
    return any(isinstance(small, (cst.Continue, cst.Break, cst.Return, cst.Raise)) for small in smalls)


def access_path(node: cst.BaseExpression) -> tuple[str, ...] | None:
    """`batch["image"]` → ("batch", "['image']"); `x[i]` → ("x", "[*]"); `b.x` → ("b", ".x")."""
    if isinstance(node, cst.Name):
        return (node.value,)
    if isinstance(node, cst.Attribute):
        base = access_path(node.value)
        return None if base is None else (*base, "." + node.attr.value)
    if isinstance(node, cst.Subscript):
        base = access_path(node.value)
        return None if base is None else (*base, _index_key(node))
    return None


def _index_key(node: cst.Subscript) -> str:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return _REGION
    value = node.slice[0].slice.value
    if isinstance(value, cst.SimpleString):
        return f"[{value.evaluated_value!r}]"
    if isinstance(value, cst.Integer):
        return f"[{value.value}]"
    if isinstance(value, (cst.Ellipsis, cst.Tuple)):
        return _REGION
    return _ANY_KEY


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Can two access paths reach the same object (one under the other)?"""
    wild = (_ANY_KEY, _REGION)
    return all(x == y or x in wild or y in wild for x, y in zip(a, b, strict=False))


def _not_an_access(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """`attr` in `a.attr`, `key` in `f(key=v)`, and a method reference `x.add_` (its receiver is judged)."""
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return True
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return True
    return isinstance(parent, cst.Call) and parent.func is node and isinstance(node, cst.Attribute)


class _Watch(cst.CSTVisitor):
    """Scans code after a copy for writes to, and escapes of, the watched host paths."""

    def __init__(self, host: set[tuple[str, ...]], scope: Scope, copy: cst.Call) -> None:
        self.live = host
        self.scope = scope
        self.copy = copy
        self.result = HostWrite.NONE
        self.path: list[cst.CSTNode] = []
        self.views: set[str] = set()  # names bound to views of a watched tensor after the copy

    def _note(self, found: HostWrite) -> None:
        if found is HostWrite.CERTAIN or self.result is HostWrite.NONE:
            self.result = found

    def memory_path(self, node: cst.BaseExpression) -> tuple[str, ...] | None:
        """The access path of the memory an expression may share: through views, not metadata."""
        if isinstance(node, cst.Name):
            return (node.value,)
        if isinstance(node, cst.Attribute):
            base = self.memory_path(node.value)
            return (
                None
                if base is None or node.attr.value in DESCRIPTIVE_ATTRIBUTES
                else (*base, "." + node.attr.value)
            )
        if isinstance(node, cst.Subscript):
            base = self.memory_path(node.value)
            return None if base is None else (*base, _index_key(node))
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            move = as_move(node, self.scope)
            if node.func.attr.value not in MEMORY_SHARING_METHODS or (
                move is not None and move.to_accelerator
            ):
                return None
            base = self.memory_path(node.func.value)
            return None if base is None else (*base, _VIEW)
        return None

    def watched(self, node: cst.BaseExpression) -> tuple[str, ...] | None:
        path = self.memory_path(node)
        if path is None or not any(_overlap(path, host) for host in self.live):
            return None
        return path

    def learn_aliases(self, statement: cst.CSTNode) -> None:
        """`a = x.numpy()` before the copy: `a` shares the batch's memory."""
        if not isinstance(statement, cst.SimpleStatementLine):
            return
        for small in statement.body:
            if isinstance(small, cst.Assign) and self.watched(small.value) is not None:
                for target in small.targets:
                    if isinstance(target.target, cst.Name):
                        self.live.add((target.target.value,))

    def scan(self, node: cst.CSTNode, rebinds: bool) -> None:
        node.visit(self)
        smalls = node.body if isinstance(node, cst.SimpleStatementLine) else [node]
        for small in smalls if rebinds else []:
            # `x = x.cuda()` rebinds `x`; `x = x.float()` may leave it the same tensor.
            if isinstance(small, cst.Assign) and self.watched(small.value) is None:
                for target in small.targets:
                    self._rebind(target.target)

    def _rebind(self, target: cst.BaseExpression) -> None:
        """After `x = x.cuda()` or `batch = {...}`, the name no longer reaches the host tensor."""
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._rebind(element.value)
            return
        path = access_path(target)
        if path is not None:
            self.live = {host for host in self.live if host[: len(path)] != path}

    def on_visit(self, node: cst.CSTNode) -> bool:
        parent = self.path[-1] if self.path else None
        self.path.append(node)
        if node is self.copy or isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return False
        if not isinstance(node, cst.BaseExpression) or _not_an_access(node, parent):
            return True
        path = self.watched(node)
        if path is None:
            return True
        self._note(self._use(node, path))
        return False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.path.pop()

    def _use(self, node: cst.BaseExpression, path: tuple[str, ...]) -> HostWrite:
        """What the context of one watched expression (the last of `self.path`) does with it."""
        index = len(self.path) - 2
        parent = self.path[index] if index >= 0 else None
        while isinstance(parent, (cst.Element, cst.DictElement, cst.List, cst.Tuple, cst.Set, cst.Dict)):
            node, index = self.path[index], index - 1  # type: ignore[assignment]
            parent = self.path[index] if index >= 0 else None
        grand = self.path[index - 1] if index >= 1 else None
        if isinstance(parent, cst.Attribute) and isinstance(grand, cst.Call) and grand.func is parent:
            method = parent.attr.value
            if method.endswith("_") and not method.startswith("__"):
                return HostWrite.CERTAIN
            return HostWrite.POSSIBLE if _VIEW in path else HostWrite.NONE
        if isinstance(parent, cst.Attribute):
            return HostWrite.NONE  # metadata: `x.shape`
        if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call):
            return self._argument(grand, parent)
        if isinstance(parent, cst.AssignTarget):
            return self._assigned(path)
        if isinstance(parent, cst.AugAssign):
            return HostWrite.CERTAIN if parent.target is node else HostWrite.NONE
        if isinstance(parent, cst.Assign):
            names = [t.target for t in parent.targets if isinstance(t.target, cst.Name)]
            if len(names) == len(parent.targets):
                self.live |= {(name.value,) for name in names}
                if _VIEW in path:
                    self.views |= {name.value for name in names}  # `flat = x.view(-1)`
                return HostWrite.NONE
            return HostWrite.POSSIBLE
        if isinstance(parent, cst.For) and parent.iter is node and isinstance(parent.target, cst.Name):
            self.live.add((parent.target.value,))
            self.views.add(parent.target.value)  # `for row in x:`: each row is a view of `x`
            return HostWrite.NONE
        if isinstance(
            parent,
            (
                cst.BinaryOperation,
                cst.UnaryOperation,
                cst.Comparison,
                cst.ComparisonTarget,
                cst.BooleanOperation,
                cst.FormattedStringExpression,
                cst.If,
                cst.While,
                cst.Expr,
                cst.Del,
                cst.Assert,
                cst.Subscript,
                cst.SubscriptElement,
                cst.Index,
            ),
        ):
            return HostWrite.NONE
        return HostWrite.POSSIBLE

    def _argument(self, call: cst.Call, arg: cst.Arg) -> HostWrite:
        name = resolve(call.func, self.scope) or ""
        last = name.rsplit(".", 1)[-1] or (dotted_name(call.func) or "").rsplit(".", 1)[-1]
        first = next((a for a in call.args if a.keyword is None), None)
        if (arg.keyword is not None and arg.keyword.value == "out") or last.endswith("_"):
            return HostWrite.CERTAIN
        if arg is first and keyword_is_true(call, "inplace"):
            return HostWrite.CERTAIN
        if name.startswith("torch.") or (name.startswith("builtins.") and last in _PURE_BUILTINS):
            return HostWrite.NONE
        return HostWrite.POSSIBLE

    def _assigned(self, target: tuple[str, ...]) -> HostWrite:
        """An assignment to `target`, which reaches a watched path."""
        host = max((h for h in self.live if _overlap(target, h)), key=len)
        if len(target) <= len(host):
            return HostWrite.NONE  # rebinding the batch or one of its entries
        if host[0] in self.views and len(host) == 1:
            return HostWrite.CERTAIN  # `flat[0] = v` with `flat = x.view(-1)`: writes the batch
        last = target[-1]
        if last == _REGION or _VIEW in target[len(host) : -1]:
            return HostWrite.CERTAIN  # `x[:, 0] = v`, `x.numpy()[0] = v`
        if last.startswith("[") and last != _ANY_KEY and not last[1:-1].isdigit():
            return HostWrite.NONE  # `batch["image"] = v`: a new entry, the old tensor is untouched
        if last.startswith(".") and last != ".data":
            return HostWrite.NONE
        return HostWrite.POSSIBLE  # `x[i] = v`: a tensor row, or a list entry
