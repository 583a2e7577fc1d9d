"""Facts about loaded and saved checkpoints, shared by the save/load rules (TDL101..105).

- `LOADERS`: the functions that restore tensors onto the device they were
  saved from unless given a `map_location`, and where that parameter sits.
- `UseIndex.state_dict_receivers`: does every use of a loaded value end in
  a `load_state_dict(...)` call (directly, through items, `.get`/`.pop`, names
  it is assigned to, key-renaming dict comprehensions)? Only then does loading
  it onto the CPU change nothing the program sees.
- `saved_dict_slots`: the values of a dict given to `torch.save` (TDL105, here and across calls).
- `SavedFiles`: what the file writes (`saved_on_cpu`, `path_key`), so that loads
  of what it has just written, or wrote from host memory, are known for what they are.
- `in_memory_buffer`, `package_data`, `holds_numbers_only`, `restores_host_data`, `names_host_file`,
  `runs_on_xla`, `pickling_format`, `discards_device`, `is_test_code`: other signs that a load restores no tensor onto
  a device this machine lacks.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

import libcst as cst

from torchdev_lint.analysis.flow import device_of
from torchdev_lint.analysis.flow_values import CPU
from torchdev_lint.analysis.guards import name_words
from torchdev_lint.analysis.requirements import test_file_name
from torchdev_lint.analysis.scopes import (
    Scope,
    assigned_values,
    block_statements,
    dotted_name,
    resolve,
    small_statements,
)
from torchdev_lint.analysis.walk import children
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
    current: Scope | None = scope
    while current is not None:
        if current.kind == "class":
            return current.node
        current = current.parent
    return scope.owner.node


@dataclass(frozen=True)
class Loader:
    """A function that takes a `map_location`: its qualified name and that parameter's position."""

    qualname: str
    map_location_index: int
    # Its first argument is a URL to download from, not a file.
    downloads: bool = False


LOADERS = {
    loader.qualname: loader
    for loader in (
        Loader("torch.load", 1),
        Loader("torch.jit.load", 1),
        Loader("torch.hub.load_state_dict_from_url", 2, downloads=True),
        # The same function object as `torch.hub.load_state_dict_from_url`.
        Loader("torch.utils.model_zoo.load_url", 2, downloads=True),
    )
}

# Uses of a container that read it without depending on where its tensors live.
_HARMLESS_BUILTINS = frozenset({"builtins.isinstance", "builtins.len"})
# Calls that take NumPy arrays: what they receive was pickled from host memory.
_HOST_CONSUMERS = frozenset({"torch.from_numpy", "numpy.asarray", "numpy.array"})
# Methods returning an item of a dict checkpoint: the item is then judged by its own uses.
_ITEM_METHODS = frozenset({"get", "pop"})
# Name positions that bind or name something rather than read the variable.
_STORES = (
    (cst.AssignTarget, "target"),
    (cst.AnnAssign, "target"),
    (cst.For, "target"),
    (cst.CompFor, "target"),
    (cst.AsName, "name"),
    (cst.NamedExpr, "target"),
    (cst.Del, "target"),
)
_NOT_REFERENCES = (
    (cst.Attribute, "attr"),
    (cst.Arg, "keyword"),
    (cst.Param, "name"),
    (cst.FunctionDef, "name"),
    (cst.ClassDef, "name"),
    (cst.ImportAlias, "name"),
)


class UseIndex:
    """Parents and name references of one function (or module), nested scopes included.

    Nested scopes are included on purpose: a closure reading a name is a use
    of it, and a nested variable of the same name only makes the answer more
    cautious.
    """

    def __init__(self, unit: cst.CSTNode) -> None:
        self._parents: dict[int, cst.CSTNode] = {}
        self._names: dict[str, list[cst.Name]] = defaultdict(list)
        self._receivers: list[cst.BaseExpression] = []
        stack = [unit]
        while stack:
            node = stack.pop()
            for child in children(node):
                self._parents[id(child)] = node
                if isinstance(child, cst.Name):
                    self._names[child.value].append(child)
                stack.append(child)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parents.get(id(node))

    def names(self, name: str) -> list[cst.Name]:
        """Every `Name` node spelled `name` (attribute names included)."""
        return self._names.get(name, [])

    def state_dict_receivers(
        self, value: cst.BaseExpression, scope: Scope
    ) -> list[cst.BaseExpression] | None:
        """The `x` of every `x.load_state_dict(...)` that `value` ends in, when every use ends in one.

        Uses that only read the value harmlessly (`"model" in ckpt`, `len`,
        `.keys()`, a dropped value) add nothing. None when any use is something
        else (returned, stored on an object, passed to another call, used in
        arithmetic, called, printed): it may need the tensors on the device
        they were saved from.
        """
        self._receivers = []
        return self._receivers if self._judge(value, scope, set()) else None

    def _judge(self, value: cst.BaseExpression, scope: Scope, names: set[str]) -> bool:
        parent = self.parent(value)
        if parent is None:
            return False
        if isinstance(parent, cst.Expr):
            return True  # the value is dropped
        if isinstance(parent, cst.Arg):
            return parent.value is value and self._argument_is_safe(parent, scope)
        if isinstance(parent, cst.Subscript) and parent.value is value:
            return self._is_store(parent) or self._judge(parent, scope, names)
        if isinstance(parent, cst.Attribute) and parent.value is value:
            call = self.parent(parent)
            if not (isinstance(call, cst.Call) and call.func is parent):
                return False
            if parent.attr.value == "keys":
                return True
            return parent.attr.value in _ITEM_METHODS and self._judge(call, scope, names)
        if isinstance(parent, cst.ComparisonTarget):
            return isinstance(parent.operator, (cst.In, cst.NotIn))
        if isinstance(parent, cst.IfExp) and value is not parent.test:
            return self._judge(parent, scope, names)
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is value:
            return self._assigned_name_is_safe(parent, scope, names)
        return False

    def _argument_is_safe(self, arg: cst.Arg, scope: Scope) -> bool:
        call = self.parent(arg)
        if not isinstance(call, cst.Call) or arg.star:
            return False
        func = call.func
        if resolve(func, scope) in _HARMLESS_BUILTINS:
            return True
        if is_rng_setter(func, scope) or resolve(func, scope) in _HOST_CONSUMERS:
            self._receivers.append(func)
            return True
        if not (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"):
            return False
        assign = keyword(call, "assign")
        if assign is not None and not (isinstance(assign.value, cst.Name) and assign.value.value == "False"):
            return False  # `assign=True` makes the loaded tensors the parameters
        given = positional(call)
        if arg is keyword(call, "state_dict") or (bool(given) and given[0] is arg):
            self._receivers.append(func.value)
            return True
        return False

    def _is_store(self, node: cst.CSTNode) -> bool:
        """`ckpt["x"] = ...` or `del ckpt["x"]`: writes into the container, reads nothing from it."""
        parent = self.parent(node)
        return any(isinstance(parent, kind) and getattr(parent, field) is node for kind, field in _STORES)

    def _assigned_name_is_safe(
        self, assign: cst.Assign | cst.AnnAssign, scope: Scope, names: set[str]
    ) -> bool:
        if isinstance(assign, cst.Assign):
            if len(assign.targets) != 1:
                return False
            target = assign.targets[0].target
        else:
            target = assign.target
        if not isinstance(target, cst.Name):
            return False
        name = target.value
        if name in names:
            return True  # `sd = sd["state_dict"]`: the name's uses are being judged already
        if name in scope.globals:
            return False
        names = names | {name}
        for reference in self._names[name]:
            if self._is_store(reference) or self._not_a_reference(reference):
                continue
            if reaching_assignment(reference, self.parent) not in (None, assign):
                continue  # `x = torch.from_numpy(x[n])`: later uses read the new value
            if isinstance(self.parent(reference), (cst.Global, cst.Nonlocal, cst.NameItem)):
                return False
            if not self._judge(reference, scope, names) and not self._renamed_items(reference, scope, names):
                return False
        return True

    def _renamed_items(self, value: cst.BaseExpression, scope: Scope, names: set[str]) -> bool:
        """`{k[7:]: v for k, v in value.items()}`: a state dict with renamed keys, judged by its uses."""
        method = self.parent(value)
        call = self.parent(method) if method is not None else None
        comp_for = self.parent(call) if call is not None else None
        comp = self.parent(comp_for) if comp_for is not None else None
        if not (
            isinstance(method, cst.Attribute)
            and method.attr.value == "items"
            and isinstance(call, cst.Call)
            and not call.args
            and isinstance(comp_for, cst.CompFor)
            and comp_for.iter is call
            and comp_for.inner_for_in is None
            and isinstance(comp, cst.DictComp)
            and isinstance(comp_for.target, cst.Tuple)
            and len(comp_for.target.elements) == 2
        ):
            return False
        item = comp_for.target.elements[1].value
        return (
            isinstance(item, cst.Name)
            and isinstance(comp.value, cst.Name)
            and comp.value.value == item.value
            and self._judge(comp, scope, names)
        )

    def _not_a_reference(self, name: cst.Name) -> bool:
        parent = self.parent(name)
        return any(
            isinstance(parent, kind) and getattr(parent, field) is name for kind, field in _NOT_REFERENCES
        )


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
    if isinstance(obj, _HOST_LITERALS):
        return True
    if isinstance(obj, cst.Name):
        assigned = assigned_values(obj, scope)
        return assigned is not None and all(
            saved_on_cpu(value, assigned[1], attributes) for value in assigned[0]
        )
    if isinstance(obj, cst.Dict):
        return bool(obj.elements) and all(
            isinstance(element, cst.DictElement) and saved_on_cpu(element.value, scope, attributes)
            for element in obj.elements
        )
    if isinstance(obj, (cst.List, cst.Tuple)):
        return bool(obj.elements) and all(
            isinstance(element, cst.Element) and saved_on_cpu(element.value, scope, attributes)
            for element in obj.elements
        )
    if isinstance(obj, cst.DictComp):
        return saved_on_cpu(obj.value, scope, attributes)
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
    klass: Scope | None = scope
    while klass is not None and klass.kind != "class":
        klass = klass.parent
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


# Nodes whose names belong to another scope, or are read later (lambdas, generators).
_SCOPE_BOUNDARIES = (
    cst.FunctionDef,
    cst.ClassDef,
    cst.Lambda,
    cst.GeneratorExp,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
)


def reaching_assignment(
    name: cst.Name, parent: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> cst.Assign | cst.AnnAssign | None:
    """The plain assignment `name = value` whose value `name` reads: the last one before it in
    straight-line code of the same function (its block, then the blocks around it), when no
    other binding of the name (a loop target, a branch, a walrus) can come in between.

    None when unknown: the name is reached from the function's start, through a compound
    statement that binds it (a loop may rebind it after the use), or inside a nested scope.
    """
    node: cst.CSTNode = name
    while True:
        above = parent(node)
        if above is None or isinstance(above, _SCOPE_BOUNDARIES):
            return None
        if not isinstance(above, (cst.SimpleStatementLine, cst.IndentedBlock, cst.Module)):
            node = above
            continue
        if isinstance(above, cst.SimpleStatementLine):
            if _binds(node, name.value, walrus_only=True):
                return None  # `f(name := g(), name)`
        elif isinstance(node, cst.BaseCompoundStatement) and _binds(node, name.value):
            return None  # a loop, branch or handler around the use (or at it) binds it too
        body: list[cst.CSTNode] = list(above.body)
        for previous in reversed(body[: next(i for i, n in enumerate(body) if n is node)]):
            smalls = previous.body if isinstance(previous, cst.SimpleStatementLine) else [previous]
            for small in reversed(smalls):
                if _assigns_only(small, name.value):
                    return small
                if _binds(small, name.value):
                    return None
        node = above


def _assigns_only(statement: cst.CSTNode, name: str) -> TypeGuard[cst.Assign | cst.AnnAssign]:
    """`name = value` or `name: T = value`."""
    if isinstance(statement, cst.Assign):
        targets = [target.target for target in statement.targets]
    elif isinstance(statement, cst.AnnAssign) and statement.value is not None:
        targets = [statement.target]
    else:
        return False
    return len(targets) == 1 and isinstance(targets[0], cst.Name) and targets[0].value == name


def _binds(node: cst.CSTNode, name: str, walrus_only: bool = False) -> bool:
    """Does `node` (nested scopes included) bind `name`; only with `:=`, if `walrus_only`?"""
    stack = [node]
    while stack:
        current = stack.pop()
        if any(_target_names(target, name) for target in _binding_targets(current, walrus_only)):
            return True
        stack.extend(children(current))
    return False


def _binding_targets(node: cst.CSTNode, walrus_only: bool) -> list[cst.CSTNode]:
    if isinstance(node, cst.NamedExpr):
        return [node.target]
    if walrus_only:
        return []
    if isinstance(node, cst.Assign):
        return [target.target for target in node.targets]
    if isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.Del)):
        return [node.target]
    if isinstance(node, (cst.AsName, cst.FunctionDef, cst.ClassDef)):
        return [node.name]
    if isinstance(node, cst.ImportAlias):
        bound: cst.BaseExpression = node.asname.name if node.asname is not None else node.name
        while isinstance(bound, cst.Attribute):
            bound = bound.value  # `import os.path` binds `os`
        return [bound]
    if isinstance(node, (cst.Global, cst.Nonlocal)):
        return [item.name for item in node.names]
    return []


def _target_names(target: cst.CSTNode, name: str) -> bool:
    """Does the binding target bind `name` (`name`, `(a, name)`, `*name`)?"""
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_target_names(element.value, name) for element in target.elements)
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value, name)
    return False


def package_data(path: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """A path built from `__file__` (directly or through names bound to one): a file shipped
    next to the code, which its authors load on every machine the package supports.
    """
    stack: list[cst.CSTNode] = [path]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            if node.value == "__file__":
                return True
            assigned = assigned_values(node, scope) if depth < 3 else None
            if assigned is not None and any(package_data(v, assigned[1], depth + 1) for v in assigned[0]):
                return True
            continue
        stack.extend(children(node))
    return False


def fixed_url(url: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """A URL the code's authors chose: a literal, a constant, an entry of a table of literals
    (`FID_WEIGHTS_URL`, `model_urls["resnet18"]`, `look_up_option(arch, model_urls, None)`).
    They published those weights and load them on every machine the package supports."""
    if isinstance(url, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(url, cst.Subscript):
        return fixed_url(url.value, scope, depth)
    if isinstance(url, cst.Dict):
        return bool(url.elements) and all(
            isinstance(e, cst.DictElement) and fixed_url(e.value, scope, depth) for e in url.elements
        )
    if isinstance(url, cst.Call):
        # A lookup in a table of fixed URLs.
        return any(
            isinstance(arg.value, (cst.Name, cst.Dict)) and _fixed_table(arg.value, scope, depth)
            for arg in url.args
        )
    if isinstance(url, cst.Name) and depth < 3:
        assigned = assigned_values(url, scope)
        return assigned is not None and all(fixed_url(value, assigned[1], depth + 1) for value in assigned[0])
    return False


def _fixed_table(table: cst.BaseExpression, scope: Scope, depth: int) -> bool:
    if isinstance(table, cst.Name) and depth < 3:
        assigned = assigned_values(table, scope)
        return assigned is not None and all(_fixed_table(v, assigned[1], depth + 1) for v in assigned[0])
    return isinstance(table, cst.Dict) and fixed_url(table, scope, depth)


# State that holds Python numbers only, named by its owner: LR schedulers (and their
# `ReduceLROnPlateau`), gradient scalers.
_NUMBERS_ONLY_OWNERS = ("schedul", "plateau", "scaler")


def holds_numbers_only(owner: cst.BaseExpression | str) -> bool:
    """`lr_scheduler.load_state_dict(...)`, `self.scaler...`, `class WarmupScheduler`: no tensors restored."""
    key = owner if isinstance(owner, str) else dotted_name(owner)
    last = key.rsplit(".", 1)[-1].lower() if key is not None else ""
    return any(name in last for name in _NUMBERS_ONLY_OWNERS)


def is_rng_setter(func: cst.BaseExpression, scope: Scope) -> bool:
    """`torch.cuda.set_rng_state_all(...)`, `random.setstate(...)`, a project's
    `set_rng_state_for_device(...)`: generator state is a CPU ByteTensor (or Python numbers)
    by construction, whichever device it seeds."""
    name = resolve(func, scope)
    if name is None:
        return False
    if name in ("random.setstate", "numpy.random.set_state"):
        return True
    return name.rsplit(".", 1)[-1].startswith("set_rng_state")


def restores_host_data(receiver: cst.BaseExpression, scope: Scope) -> bool:
    """Does a `UseIndex.state_dict_receivers` receiver take host data only? A scheduler or
    scaler (plain numbers), a generator (CPU bytes), `torch.from_numpy` (arrays)."""
    return (
        holds_numbers_only(receiver)
        or is_rng_setter(receiver, scope)
        or resolve(receiver, scope) in _HOST_CONSUMERS
    )


# Words of a loaded path that name host data: generator states, bookkeeping metadata.
_HOST_FILE_WORDS = frozenset({"rng", "metadata", "meta"})


def names_host_file(path: cst.BaseExpression, scope: Scope) -> bool:
    """`rng_file`, `"rng_state.pth"`, `path / _METADATA_FILENAME`, `cache_dir / meta_file`:
    the path (or the value of a name it is) says the file holds generator states or metadata,
    which a program writes from host memory."""
    assigned = assigned_values(path, scope)
    expressions = [path, *(assigned[0] if assigned is not None else [])]
    stack: list[cst.CSTNode] = list(expressions)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            text = node.value
        elif isinstance(node, cst.SimpleString):
            text = str(node.evaluated_value)
        elif isinstance(node, cst.FormattedStringText):
            text = node.value
        else:
            stack.extend(children(node))
            continue
        if _HOST_FILE_WORDS & name_words(text):
            return True
    return False


# Libraries whose checkpoints pickle arbitrary objects (client state, optimizer classes):
# reading them needs `weights_only=False`.
_PICKLING_FORMATS = ("deepspeed.",)


def pickling_format(path: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """A path a DeepSpeed helper found (`get_optim_files(dir)[0]`, `get_model_state_file(...)`),
    directly or through names bound to it: a checkpoint format that pickles arbitrary objects."""
    stack: list[cst.CSTNode] = [path]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and (resolve(node.func, scope) or "").startswith(_PICKLING_FORMATS):
            return True
        if isinstance(node, cst.Name) and depth < 2:
            assigned = assigned_values(node, scope)
            if assigned is not None and any(pickling_format(v, assigned[1], depth + 1) for v in assigned[0]):
                return True
        stack.extend(children(node))
    return False


def runs_on_xla(function: cst.CSTNode) -> bool:
    """A function that imports `torch_xla`: it runs on TPUs, whose checkpoints XLA writes
    from host memory (`xm.save` moves every tensor to the CPU); no CUDA device is restored."""
    if not isinstance(function, cst.FunctionDef):
        return False
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.ImportFrom) and node.module is not None:
            if (dotted_name(node.module) or "").split(".")[0] == "torch_xla":
                return True
        elif isinstance(node, cst.Import):
            if any((dotted_name(alias.name) or "").split(".")[0] == "torch_xla" for alias in node.names):
                return True
        stack.extend(children(node))
    return False


_DEVICE_PARAMETERS = frozenset({"device", "map_location"})


def discards_device(function: cst.CSTNode) -> bool:
    """`def load(self, path, device=None): del device`: the author says the data has no device."""
    if not isinstance(function, cst.FunctionDef):
        return False
    params = {param.name.value for param in (*function.params.params, *function.params.kwonly_params)}
    return any(
        isinstance(small, cst.Del)
        and isinstance(small.target, cst.Name)
        and small.target.value in _DEVICE_PARAMETERS & params
        for small in small_statements(block_statements(function.body))
    )


def is_test_code(path: str, enclosing: list[cst.CSTNode], scope: Scope) -> bool:
    """A test module (`test_*.py`, `*_test.py`, `conftest.py`), or a `test_*` function of a
    module that imports pytest or unittest.

    Tests load the files they have just written, on the machine that wrote them. A
    script's `def test(model, loader)` evaluation function is not a test.
    """
    stem = os.path.splitext(path.replace("\\", "/").rsplit("/", 1)[-1])[0]
    if test_file_name(stem) or stem == "conftest":
        return True
    imports_test_framework = any(
        binding.import_target is not None and binding.import_target.split(".")[0] in ("pytest", "unittest")
        for bindings in scope.module.bindings.values()
        for binding in bindings
    )
    return imports_test_framework and any(
        isinstance(node, cst.FunctionDef) and node.name.value.startswith("test_") for node in enclosing
    )
