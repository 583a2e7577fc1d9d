"""What a file saves with `torch.save`/`torch.jit.save`, and where the saved values live.

A load of what the program itself has just written, or wrote from host memory, cannot
restore a tensor onto a device this machine lacks; a module stored in a checkpoint dict
pickles its class (TDL105). So the save/load rules (TDL101..105) ask:

- `saved_dict_slots`: the values of a dict given to `torch.save` (TDL105, here and across calls).
- `saved_on_cpu` (`analysis/values/host_values.py`): is the saved object evidently in host memory?
- `SavedFiles`: what the file writes (`checkpoint_loads.path_key`, `in_memory_buffer`), so that loads
  of what it has just written, wrote from host memory, or wrote for an object that reads it
  back, are known for what they are.

What loading restores is in `checkpoint_loads`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import CPU
from torchdev_lint.analysis.provenance.checkpoint_loads import UseIndex, path_key
from torchdev_lint.analysis.provenance.host_facts import FileHostFacts
from torchdev_lint.analysis.provenance.load_facts import local_tokens, may_be_same_file
from torchdev_lint.analysis.provenance.saved_files import distinctive, path_shape
from torchdev_lint.analysis.syntax.reaching_bindings import reaching_assignment
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, last_name, resolve
from torchdev_lint.analysis.syntax.walk import calls, children, first
from torchdev_lint.analysis.values.flow import device_of
from torchdev_lint.analysis.values.host_values import SAVED_OBJECT, saved_on_cpu
from torchdev_lint.syntax import argument

# Calls that test whether a file is there: `os.path.exists(p)`, `p.is_file()`, `osp.isfile(p)`.
_EXISTENCE_TESTS = frozenset({"exists", "isfile", "is_file"})

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


# A value slot of a checkpoint dict: `"model": value`, `dict(model=value)`, `ckpt["model"] = value`.
Slot = cst.DictElement | cst.Arg | cst.Assign


def saved_dict_slots(value: cst.BaseExpression, scope: Scope) -> list[Slot]:
    """The value slots of a dict given to `torch.save`: a literal, `dict(...)`, or a name bound
    only to one in the same function (whose values that function's uses judge), with the items
    the function assigns to it (`ckpt["model"] = model`)."""
    filled: list[Slot] = []
    if isinstance(value, cst.Name):
        found = scope.lookup(value.value)
        if found is None or found[0] is not scope.owner or len(found[1]) != 1 or found[1][0].value is None:
            return []
        filled = _items_assigned(value.value, scope.owner)
        value = found[1][0].value
    if isinstance(value, cst.Dict):
        return [element for element in value.elements if isinstance(element, cst.DictElement)] + filled
    if isinstance(value, cst.Call) and resolve(value.func, scope) == "builtins.dict":
        return [arg for arg in value.args if arg.keyword is not None] + filled
    return []


def _items_assigned(name: str, owner: Scope) -> list[Slot]:
    """`name[key] = value` statements of the function (one target each)."""
    index = UseIndex(owner.node)
    found: list[Slot] = []
    for use in index.names(name):
        item = index.parent(use)
        target = index.parent(item) if isinstance(item, cst.Subscript) and item.value is use else None
        statement = index.parent(target) if isinstance(target, cst.AssignTarget) else None
        if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
            found.append(statement)
    return found


class SavedFiles:
    """What a file writes with `torch.save`/`torch.jit.save`, noted as the traversal passes.

    A load of what the program itself wrote, on this machine, cannot meet a device or a
    pickle it does not know: read back in the function that has just written it, read
    from an in-memory buffer by the class (or function) that serializes into such
    buffers (a pickler, a broadcast, a launcher passing results back), or (for
    `torch.load`) read from a path the file writes from host memory. A module that
    writes and reads a file format with module-level functions is not such a round
    trip: what it reads may come from elsewhere.
    """

    def __init__(self) -> None:
        self._by_function: dict[Scope, set[str]] = defaultdict(set)
        # Paths saved from host memory: the text, with the scope where that text names one file.
        self._on_cpu: set[tuple[int, str]] = set()
        # Distinctive path shapes the file saves to (`f"{d}/norm_stats.pt"`), and whether from host memory.
        self._shapes: list[tuple[tuple[Any, ...], bool]] = []
        self._buffer_users: set[int] = set()
        self._facts: FileHostFacts | None = None  # what the project tells of host data

    def note(self, call: cst.Call, saver: str, ctx: FileContext) -> None:
        obj, path = argument(call, 0, SAVED_OBJECT[saver]), argument(call, 1, "f")
        if obj is None or path is None:
            return
        key = path_key(path.value)
        if not _written_only_when_missing(ctx.ancestors):
            self._by_function[ctx.scope.owner].add(key)  # a cache made only when missing may be another run's
        if in_memory_buffer(path.value, ctx.scope):
            self._buffer_users.add(id(_serializer(ctx.scope)))
        if self._facts is None:
            self._facts = FileHostFacts(ctx.scope.module, ctx.project)
        on_host = saver == "torch.save" and (
            saved_on_cpu(obj.value, ctx.scope, self._facts)
            or (isinstance(obj.value, cst.Name) and device_of(obj.value, ctx) == CPU)
        )
        if on_host:
            self._on_cpu.add((id(_meaning(path.value, ctx.scope).node), key))
        shape = path_shape(path.value, ctx.scope)
        if distinctive(shape):
            self._shapes.append((local_tokens(shape), on_host))

    def written_here(self, path: cst.BaseExpression, scope: Scope) -> bool:
        """Has the function of `scope` already saved to this path expression?"""
        return path_key(path) in self._by_function[scope.owner]

    def written_for_object(self, path: cst.BaseExpression, scope: Scope) -> bool:
        """Does the file write the file at `self.<attr>` (`path`) for the object of `scope`'s class?
        A method of the class saves to `self.<attr>`, or a function saves to a path and passes that
        path to the class (`torch.save(data, path)`, then `Loader(path, ...)`).

        Complete only once the whole file has been traversed.
        """
        klass = scope.enclosing_class
        if klass is None or not isinstance(klass.node, cst.ClassDef):
            return False
        key, name = path_key(path), klass.node.name.value
        for function, keys in self._by_function.items():
            if function.enclosing_class is klass and key in keys:
                return True
            if any(
                isinstance(call.func, cst.Name)
                and call.func.value == name
                and any(path_key(arg.value) in keys for arg in call.args)
                for call in calls(function.node)
            ):
                return True
        return False

    def read_back(self, loader: str, path: cst.BaseExpression, scope: Scope) -> bool:
        """Is this an in-memory round trip, or a `torch.load` of a path saved from host memory?

        Complete only once the whole file has been traversed.
        """
        if id(_serializer(scope)) in self._buffer_users and in_memory_buffer(path, scope):
            return True
        if loader != "torch.load":
            return False
        if (id(_meaning(path, scope).node), path_key(path)) in self._on_cpu:
            return True
        shape = path_shape(path, scope)
        if not distinctive(shape):
            return False
        tokens = local_tokens(shape)
        writers = [on_host for saved, on_host in self._shapes if may_be_same_file(tokens, saved)]
        return bool(writers) and all(writers)  # the same file name under another folder argument


def _meaning(path: cst.BaseExpression, scope: Scope) -> Scope:
    """Where the text of `path` names one file: the innermost scope binding a name it reads (the
    function whose `path` parameter or local it is), the module for constants and literals; the
    class for `self.<attr>` and for a method's parameter (`save(self, path)` and `load(self, path)`
    of one class write and read the class's own format). Another function's `path` is another file
    (issue 23)."""
    found = scope.module
    stack: list[cst.CSTNode] = [path]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute):
            stack.append(node.value)  # `cfg.out`: `cfg` is read, `out` is not a name of a scope
            continue
        if isinstance(node, cst.Arg):
            stack.append(node.value)
            continue
        if not isinstance(node, cst.Name):
            stack.extend(children(node))
            continue
        bound = scope.lookup(node.value)
        owner = bound[0] if bound is not None else found
        if scope.enclosing_class is not None and (
            node.value in ("self", "cls") or (bound is not None and _parameter_of_method(node.value, owner))
        ):
            owner = scope.enclosing_class
        if _depth(owner) > _depth(found):
            found = owner
    return found


def _parameter_of_method(name: str, owner: Scope) -> bool:
    """Is `name` a parameter of the method whose scope is `owner`?"""
    function = owner.node
    if not (
        isinstance(function, cst.FunctionDef) and owner.parent is not None and owner.parent.kind == "class"
    ):
        return False
    params = function.params
    return any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def _depth(scope: Scope) -> int:
    """How many scopes enclose `scope` (the module: 0)."""
    depth = 0
    while scope.parent is not None:
        depth, scope = depth + 1, scope.parent
    return depth


def _serializer(scope: Scope) -> cst.CSTNode:
    """The innermost class around `scope`, else its function (or module)."""
    klass = scope.enclosing_class
    return klass.node if klass is not None else scope.owner.node


def _written_only_when_missing(ancestors: Sequence[cst.CSTNode]) -> bool:
    """Is the save under a test of a file's existence (`if not os.path.exists(p):`): a cache
    written only when missing, so a later read may find what another run wrote."""
    return any(
        isinstance(node, cst.If) and first(node.test, _tests_existence) is not None for node in ancestors
    )


def _tests_existence(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and last_name(node.func) in _EXISTENCE_TESTS


def in_memory_buffer(path: cst.BaseExpression, scope: Scope) -> bool:
    """`io.BytesIO(...)`, or a name bound only to one, or whose binding reaching the use is one
    (`buffer = io.BytesIO(buffer)` after a loop over bytes): bytes serialized by the program itself."""
    assigned = assigned_values(path, scope)
    values = assigned[0] if assigned is not None else [path]
    if isinstance(path, cst.Name) and not all(_bytes_io(value, scope) for value in values):
        reaching = reaching_assignment(path, UseIndex(scope.owner.node).parent)
        values = [reaching.value] if reaching is not None and reaching.value is not None else values
    return all(_bytes_io(value, scope) for value in values)


def _bytes_io(value: cst.BaseExpression, scope: Scope) -> bool:
    return isinstance(value, cst.Call) and resolve(value.func, scope) == "io.BytesIO"
