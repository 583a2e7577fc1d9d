"""What a file saves with `torch.save`/`torch.jit.save`, and where the saved values live.

A load of what the program itself has just written, or wrote from host memory, cannot
restore a tensor onto a device this machine lacks; a module stored in a checkpoint dict
pickles its class (TDL105). So the save/load rules (TDL101..105) ask:

- `saved_dict_slots`: the values of a dict given to `torch.save` (TDL105, here and across calls).
- `saved_on_cpu`: is the saved object evidently in host memory, by its spelling?
- `SavedFiles`: what the file writes (`path_key`, `in_memory_buffer`), so that loads
  of what it has just written, or wrote from host memory, are known for what they are.

What loading restores is in `checkpoint_loads`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.checkpoint_loads import LOADERS, UseIndex
from torchdev_lint.analysis.devices import CPU
from torchdev_lint.analysis.flow import device_of
from torchdev_lint.analysis.reaching_bindings import reaching_assignment
from torchdev_lint.analysis.scopes import Scope, assigned_values, resolve
from torchdev_lint.syntax import argument, keyword, positional

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


# Functions that write a file a loader may read back, and the name of the parameter they save.
SAVED_OBJECT = {"torch.save": "obj", "torch.jit.save": "m"}

# A value slot of a checkpoint dict: `"model": value` or `dict(model=value)`.
Slot = cst.DictElement | cst.Arg


def saved_dict_slots(value: cst.BaseExpression, scope: Scope) -> list[Slot]:
    """The value slots of a dict given to `torch.save`: a literal, `dict(...)`, or a name bound
    only to one in the same function (whose values that function's uses judge)."""
    if isinstance(value, cst.Name):
        found = scope.lookup(value.value)
        if found is None or found[0] is not scope.owner or len(found[1]) != 1 or found[1][0].value is None:
            return []
        value = found[1][0].value
    if isinstance(value, cst.Dict):
        return [element for element in value.elements if isinstance(element, cst.DictElement)]
    if isinstance(value, cst.Call) and resolve(value.func, scope) == "builtins.dict":
        return [arg for arg in value.args if arg.keyword is not None]
    return []


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
        self._on_cpu: set[str] = set()
        self._buffer_users: set[int] = set()

    def note(self, call: cst.Call, saver: str, ctx: FileContext) -> None:
        obj, path = argument(call, 0, SAVED_OBJECT[saver]), argument(call, 1, "f")
        if obj is None or path is None:
            return
        key = path_key(path.value)
        self._by_function[ctx.scope.owner].add(key)
        if in_memory_buffer(path.value, ctx.scope):
            self._buffer_users.add(id(_serializer(ctx.scope)))
        if saver == "torch.save" and (
            saved_on_cpu(obj.value, ctx.scope)
            or (isinstance(obj.value, cst.Name) and device_of(obj.value, ctx) == CPU)
        ):
            self._on_cpu.add(key)

    def written_here(self, path: cst.BaseExpression, scope: Scope) -> bool:
        """Has the function of `scope` already saved to this path expression?"""
        return path_key(path) in self._by_function[scope.owner]

    def read_back(self, loader: str, path: cst.BaseExpression, scope: Scope) -> bool:
        """Is this an in-memory round trip, or a `torch.load` of a path saved from host memory?

        Complete only once the whole file has been traversed.
        """
        if id(_serializer(scope)) in self._buffer_users and in_memory_buffer(path, scope):
            return True
        return loader == "torch.load" and path_key(path) in self._on_cpu


def _serializer(scope: Scope) -> cst.CSTNode:
    """The innermost class around `scope`, else its function (or module)."""
    klass = scope.enclosing_class
    return klass.node if klass is not None else scope.owner.node


# Methods whose result lives on the host whatever their receiver was; a generator's state is a
# CPU ByteTensor (or Python numbers) whichever device the generator belongs to.
_TO_HOST = frozenset(
    {"cpu", "numpy", "tolist", "item", "get_state", "get_rng_state", "get_rng_state_all", "getstate"}
)
_HOST_BUILTINS = frozenset(f"builtins.{name}" for name in ("len", "int", "float", "str", "bool"))
_HOST_LITERALS = (
    cst.Integer,
    cst.Float,
    cst.SimpleString,
    cst.ConcatenatedString,
    cst.FormattedString,
)


def saved_on_cpu(obj: cst.BaseExpression, scope: Scope, attributes: bool = True) -> bool:
    """Is the object given to `torch.save` evidently in host memory, by its spelling?

    `x.cpu()`, `x.detach().cpu().numpy()`, `x.to("cpu")`, `generator.get_state()`,
    `torch.cuda.get_rng_state_all()`, numbers and strings,
    a literal dict/list/tuple (or dict comprehension) whose every value is one
    of these, a name every binding of which is, or (with `attributes`) a `self.cache` its
    class fills with these only.
    """
    return _on_host(obj, scope, attributes, frozenset())


def _on_host(
    obj: cst.BaseExpression, scope: Scope, attributes: bool, resolving: frozenset[tuple[Scope, str]]
) -> bool:
    """`saved_on_cpu`, knowing the names whose bindings are being followed: one met again
    (`x = x`, `a = b` with `b = a`) is not known to hold host data."""
    if isinstance(obj, _HOST_LITERALS):
        return True
    if isinstance(obj, cst.Name):
        assigned = assigned_values(obj, scope)
        if assigned is None or (assigned[1], obj.value) in resolving:
            return False
        resolving = resolving | {(assigned[1], obj.value)}
        return all(_on_host(value, assigned[1], attributes, resolving) for value in assigned[0])
    if isinstance(obj, cst.Dict):
        return bool(obj.elements) and all(
            isinstance(element, cst.DictElement) and _on_host(element.value, scope, attributes, resolving)
            for element in obj.elements
        )
    if isinstance(obj, (cst.List, cst.Tuple)):
        return bool(obj.elements) and all(
            isinstance(element, cst.Element) and _on_host(element.value, scope, attributes, resolving)
            for element in obj.elements
        )
    if isinstance(obj, cst.DictComp):
        return _on_host(obj.value, scope, attributes, resolving)
    if isinstance(obj, cst.Attribute) and attributes:
        return _filled_from_host(obj, scope)
    if isinstance(obj, cst.Call) and resolve(obj.func, scope) in _HOST_BUILTINS:
        return True
    while isinstance(obj, cst.Call) and isinstance(obj.func, cst.Attribute):
        method = obj.func.attr.value
        if method in _TO_HOST or (method == "to" and _to_cpu(obj)):
            return True
        obj = obj.func.value
    return False


# Methods of a container that read it.
_READ_METHODS = frozenset({"keys", "items", "values", "get", "copy"})


def _filled_from_host(attribute: cst.Attribute, scope: Scope) -> bool:
    """`self.cache`, when its class only ever puts host data into it (`self.cache = {}`,
    `self.cache[key] = x.cpu()`, what the class loads back into it) and otherwise only reads it
    (items, `in`, `.keys()`, `torch.save`)."""
    if not (isinstance(attribute.value, cst.Name) and attribute.value.value == "self"):
        return False
    klass = scope.enclosing_class
    if klass is None:
        return False
    index = UseIndex(klass.node)
    uses = [
        use
        for name in index.names(attribute.attr.value)
        if isinstance(use := index.parent(name), cst.Attribute)
        and use.attr is name
        and isinstance(use.value, cst.Name)
        and use.value.value == "self"
    ]
    return all(_puts_host_data(use, index, klass) for use in uses)


def _puts_host_data(use: cst.Attribute, index: UseIndex, klass: Scope) -> bool:
    """Does this use of `self.cache` only read it, or write host data into it?"""
    above = index.parent(use)
    if isinstance(above, cst.AssignTarget):
        value = _assigned(above, index)
        return (
            (isinstance(value, (cst.Dict, cst.List)) and not value.elements)
            or (  # what the class loads back, or host data
                isinstance(value, cst.Call) and resolve(value.func, klass) in LOADERS
            )
            or (value is not None and saved_on_cpu(value, klass, attributes=False))
        )
    if isinstance(above, cst.Subscript) and above.value is use:
        item_parent = index.parent(above)
        if isinstance(item_parent, cst.AssignTarget):
            value = _assigned(item_parent, index)
            if isinstance(value, cst.Name):
                reaching = reaching_assignment(value, index.parent)
                value = reaching.value if reaching is not None else value
            return value is not None and saved_on_cpu(value, klass, attributes=False)
        changed_in_place = (
            isinstance(item_parent, (cst.Attribute, cst.Subscript)) and item_parent.value is above
        ) or (isinstance(item_parent, cst.AugAssign) and item_parent.target is above)
        return not changed_in_place
    if isinstance(above, cst.ComparisonTarget):
        return isinstance(above.operator, (cst.In, cst.NotIn))
    if isinstance(above, cst.Attribute) and above.value is use:
        return above.attr.value in _READ_METHODS and isinstance(index.parent(above), cst.Call)
    if isinstance(above, cst.Arg):
        call = index.parent(above)
        return isinstance(call, cst.Call) and resolve(call.func, klass) in SAVED_OBJECT
    return False


def _assigned(target: cst.AssignTarget, index: UseIndex) -> cst.BaseExpression | None:
    assign = index.parent(target)
    return assign.value if isinstance(assign, cst.Assign) else None


def _to_cpu(call: cst.Call) -> bool:
    given = positional(call)
    target = keyword(call, "device") or (given[0] if given else None)
    return (
        target is not None
        and isinstance(target.value, cst.SimpleString)
        and target.value.evaluated_value == "cpu"
    )


def path_key(path: cst.BaseExpression) -> str:
    """The path expression as text without layout: the same expression saves and loads the same file."""
    return "".join(cst.Module(body=[]).code_for_node(path).split())


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
