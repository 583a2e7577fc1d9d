"""Is a value host data by construction: in host memory on whatever machine runs the code?

A file written from host memory restores no tensor onto a device the loading machine may
lack (TDL101). What the spelling proves: `x.cpu()`, `.numpy()`, `.tolist()`, `.item()`,
`.to("cpu")`, generator states, numbers, strings and `None`, NumPy calls, `torch.from_numpy`,
torch factories given no `device=`, k2 FSAs built from text (`k2.Fsa.from_str`, always on the
CPU), what a method other than a move makes of host data (`fsa.invert()`, `t.float()`),
containers of those, a name whose every binding (or the binding reaching the use) is one, a
dict or list its function fills item by item with those only, and a `self` cache its class
fills with those only.

Some facts are the project's, known only once its summaries are read (`HostFacts`): a call
of a project function is host data when the function returns host data
(`analysis/provenance/returned_values.py`); `k2.Fsa.from_str` is a k2 constructor when the `k2` that
`from . import k2` binds is the third-party module its package imports; `torch.load(path)`
is host data when the project saves that path only from host memory (`load_facts`). So the
answer is a `Condition`: the keys of the facts that must hold too (empty: host data by
itself), or None: not known to be host data. Unknown never silences anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import Protocol

import libcst as cst

from torchdev_lint.analysis.knowledge.library_models import Fact, apis, host_module
from torchdev_lint.analysis.knowledge.torch_api import MOVE_METHODS
from torchdev_lint.analysis.provenance.checkpoint_loads import LOADERS, UseIndex
from torchdev_lint.analysis.syntax.reaching_bindings import reaching_assignment
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, dotted_name, parameters, resolve
from torchdev_lint.analysis.values.kinds import is_module_class, local_module_classes
from torchdev_lint.syntax import argument, keyword, positional

Condition = frozenset[str]
HOST: Condition = frozenset()


class HostFacts(Protocol):
    """What the spelling alone cannot tell: pass 1 answers with conditions on the rest of the
    project (`returned_values.PassOneFacts`), a file's check with what its `FileFacts` say
    (`returned_values.FileHostFacts`). Each answer is a condition, or None (not known)."""

    def returns(self, call: cst.Call, scope: Scope) -> Condition | None:
        """A call of a function the tables below do not know: when is its result host data?"""

    def libraries(self, head: str, scope: Scope) -> Iterable[tuple[str, Condition]]:
        """The third-party modules among `library_models.value_libraries()` that the name `head` may stand for though it
        is imported from a project package (`from . import k2`), each with its condition."""

    def loaded(self, path: cst.BaseExpression, scope: Scope) -> Condition | None:
        """`torch.load(path)`: when does it read a file the project saves only from host memory?"""


# Functions that write a file a loader may read back, and the name of the parameter they save.
SAVED_OBJECT = {"torch.save": "obj", "torch.jit.save": "m"}

# Methods whose result lives on the host whatever their receiver was; a generator's state is a
# CPU ByteTensor (or Python numbers) whichever device the generator belongs to.
_TO_HOST = frozenset(
    {"cpu", "numpy", "tolist", "item", "get_state", "get_rng_state", "get_rng_state_all", "getstate"}
)
# Methods that may put their result on another device than their receiver's.
_MOVES = MOVE_METHODS | {"type", "xpu", "mps", "npu", "hpu", "ipu"}
_HOST_BUILTINS = frozenset(f"builtins.{name}" for name in ("len", "int", "float", "str", "bool"))
_HOST_LITERALS = (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
_HOST_CONSTANTS = frozenset({"None", "True", "False"})
# torch factories: on the CPU unless given `device=`; `tensor` copies its data's device.
_HOST_FACTORIES = frozenset(
    "zeros ones empty full rand randn randint randperm arange linspace logspace eye".split()
)
# Empty containers a function then fills item by item.
_EMPTY = frozenset({"builtins.dict", "builtins.list"})
# Uses of a container that only read it.
_READ_METHODS = frozenset({"keys", "items", "values", "get", "copy"})
_FILL_METHODS = frozenset({"append", "add"})
_READERS = frozenset({*SAVED_OBJECT, "builtins.len", "builtins.print", "builtins.sorted"})


class _Unlisted(Enum):
    """A function the tables do not list."""

    UNLISTED = 0


def saved_on_cpu(obj: cst.BaseExpression, scope: Scope, facts: HostFacts | None = None) -> bool:
    """Is the object given to `torch.save` evidently in host memory, by its spelling (and by
    what `facts` know of the project)?"""
    return host_condition(obj, scope, facts) == HOST


def host_condition(
    obj: cst.BaseExpression, scope: Scope, facts: HostFacts | None = None, attributes: bool = True
) -> Condition | None:
    """The condition under which `obj` is host data (see the module doc); `self` caches only
    with `attributes` (judging one reads its whole class)."""
    return _Judge(facts).value(obj, scope, attributes)


def all_of(conditions: Iterable[Condition | None]) -> Condition | None:
    """Host data when each part is: the union of the parts' conditions."""
    found: set[str] = set()
    for condition in conditions:
        if condition is None:
            return None
        found |= condition
    return frozenset(found)


class _Judge:
    """One question, with the names whose bindings are being followed (one met again, `x = x`,
    is not known to hold host data) and the functions indexed for reaching bindings."""

    def __init__(self, facts: HostFacts | None) -> None:
        self.facts = facts
        self._following: set[tuple[Scope, str]] = set()
        self._indexes: dict[int, UseIndex] = {}

    def value(self, obj: cst.BaseExpression, scope: Scope, attributes: bool) -> Condition | None:
        if isinstance(obj, _HOST_LITERALS) or (isinstance(obj, cst.Name) and obj.value in _HOST_CONSTANTS):
            return HOST
        if isinstance(obj, cst.Name):
            return self._name(obj, scope, attributes)
        if isinstance(obj, cst.Dict):
            elements = obj.elements
            values = [e.value if isinstance(e, cst.DictElement) else None for e in elements]
            return self._parts(values, scope, attributes) if elements else None
        if isinstance(obj, (cst.List, cst.Tuple)):
            items = [e.value if isinstance(e, cst.Element) else None for e in obj.elements]
            return self._parts(items, scope, attributes) if items else None
        if isinstance(obj, cst.DictComp):
            return self.value(obj.value, scope, attributes)
        if isinstance(obj, cst.Attribute):
            return (
                HOST
                if attributes and (self._filled_attribute(obj, scope) or _counter(obj, scope, self._index))
                else None
            )
        if isinstance(obj, cst.Call):
            return self._call(obj, scope, attributes)
        return None

    def _parts(
        self, parts: list[cst.BaseExpression | None], scope: Scope, attributes: bool
    ) -> Condition | None:
        return all_of(self.value(p, scope, attributes) if p is not None else None for p in parts)

    def _name(self, name: cst.Name, scope: Scope, attributes: bool) -> Condition | None:
        assigned = assigned_values(name, scope)
        if assigned is None or (assigned[1], name.value) in self._following:
            return None
        values, owner = assigned
        key = (owner, name.value)
        self._following.add(key)
        try:
            if all(_empty(value, owner) for value in values) and owner.kind == "function":
                return self._filled(name.value, owner)
            found = all_of(self.value(value, owner, attributes) for value in values)
            if found != HOST and len(values) > 1 and scope.owner.kind == "function":
                index = self._index(scope.owner.node)
                reaching = reaching_assignment(name, index.parent)
                if reaching is not None and reaching.value is not None:
                    return self.value(reaching.value, scope, attributes)
            return found
        finally:
            self._following.discard(key)

    def _call(self, call: cst.Call, scope: Scope, attributes: bool) -> Condition | None:
        name = resolve(call.func, scope) or ""
        listed = self._listed(name, call, scope, attributes)
        if listed is _Unlisted.UNLISTED and self.facts is not None:
            listed = self._library_call(call, scope, attributes)
        if listed is not _Unlisted.UNLISTED:
            return listed
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        if method in _TO_HOST or (method == "to" and _to_cpu(call)):
            return HOST
        if (
            method == "state_dict"
            and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
        ):
            return HOST if self._unmoved_module(call.func.value, scope) else None
        found = self.facts.returns(call, scope) if self.facts is not None else None
        if found is not None or method is None or method in _MOVES or keyword(call, "device") is not None:
            return found
        if name:
            return None  # a function of a module, not a method of a value
        assert isinstance(call.func, cst.Attribute)
        return self.value(call.func.value, scope, attributes)  # `fsa.invert()`, `t.float()`

    def _listed(
        self, name: str, call: cst.Call, scope: Scope, attributes: bool
    ) -> Condition | None | _Unlisted:
        """What the tables say of a call of `name`."""
        if name in _HOST_BUILTINS or name in apis(Fact.HOST_RESULT) or host_module(name):
            return HOST
        if keyword(call, "device") is not None:
            return _Unlisted.UNLISTED
        if name.startswith("torch.") and name[6:] in _HOST_FACTORIES:
            return HOST
        if name in apis(Fact.SAME_DEVICE):
            given = positional(call)
            return self.value(given[0].value, scope, attributes) if given else None
        if name == "torch.load":
            path = argument(call, 0, "f")
            mapped = argument(call, 1, "map_location") is not None
            return self.facts.loaded(path.value, scope) if self.facts and path and not mapped else None
        return _Unlisted.UNLISTED

    def _library_call(self, call: cst.Call, scope: Scope, attributes: bool) -> Condition | None | _Unlisted:
        """`k2.arc_sort(...)` where `k2` is imported from a project package that re-exports the
        third-party module: what the tables say, on the condition that it does."""
        assert self.facts is not None
        head, _, rest = (dotted_name(call.func) or "").partition(".")
        if not rest:
            return _Unlisted.UNLISTED
        for library, condition in self.facts.libraries(head, scope):
            listed = self._listed(f"{library}.{rest}", call, scope, attributes)
            if listed is not _Unlisted.UNLISTED:
                return all_of((condition, listed))
        return _Unlisted.UNLISTED

    def _unmoved_module(self, name: cst.Name, scope: Scope) -> bool:
        """A module the function builds on the host (`nn.Linear(3, 4)`, a class of the file that
        names no device) and only calls, reads or asks for its state: never moved, never handed
        to code that might move it."""
        assigned = assigned_values(name, scope)
        if assigned is None or assigned[1].kind != "function":
            return False
        values, owner = assigned
        if not all(_built_on_host(value, owner) for value in values):
            return False
        index = self._index(owner.node)
        for use in index.names(name.value):
            above = index.parent(use)
            if isinstance(above, cst.AssignTarget) or (isinstance(above, cst.Call) and above.func is use):
                continue  # its binding, or calling it
            if not (isinstance(above, cst.Attribute) and above.value is use) or above.attr.value in _MOVES | {
                "apply",
                "to_empty",
            }:
                return False
        return True

    def _filled(self, name: str, owner: Scope) -> Condition | None:
        """A dict or list bound only empty in its function, then filled item by item."""
        index = self._index(owner.node)
        uses = [
            use
            for use in index.names(name)
            if not (isinstance(above := index.parent(use), cst.Attribute) and above.attr is use)
            and not (isinstance(above, cst.Arg) and above.keyword is use)
            and not (isinstance(above, (cst.FunctionDef, cst.ClassDef)) and above.name is use)
        ]
        return all_of(self._use(use, index, owner, owned=False) for use in uses)

    def _filled_attribute(self, attribute: cst.Attribute, scope: Scope) -> bool:
        """`self.cache`, when its class only ever puts host data into it (`self.cache = {}`,
        `self.cache[key] = x.cpu()`, what the class loads back into it) and otherwise only
        reads it (items, `in`, `.keys()`, `torch.save`)."""
        if not (isinstance(attribute.value, cst.Name) and attribute.value.value == "self"):
            return False
        klass = scope.enclosing_class
        if klass is None:
            return False
        index = self._index(klass.node)
        uses = [
            use
            for name in index.names(attribute.attr.value)
            if isinstance(use := index.parent(name), cst.Attribute)
            and use.attr is name
            and isinstance(use.value, cst.Name)
            and use.value.value == "self"
        ]
        return all_of(self._use(use, index, klass, owned=True) for use in uses) == HOST

    def _use(self, use: cst.BaseExpression, index: UseIndex, scope: Scope, owned: bool) -> Condition | None:
        """Does this use of a container only read it, or put host data into it? `owned`: a
        `self` cache, which may also hold what its class loads back."""
        above = index.parent(use)
        if isinstance(above, cst.AssignTarget):
            value = _assigned(above, index)
            if value is None:
                return None
            if _empty(value, scope) or (
                owned and isinstance(value, cst.Call) and resolve(value.func, scope) in LOADERS
            ):
                return HOST
            return self.value(value, scope, attributes=False)
        if isinstance(above, cst.Subscript) and above.value is use:
            item_parent = index.parent(above)
            if isinstance(item_parent, cst.AssignTarget):
                value = _assigned(item_parent, index)
                if isinstance(value, cst.Name):
                    reaching = reaching_assignment(value, index.parent)
                    value = reaching.value if reaching is not None else value
                if isinstance(value, cst.Attribute) and _counter(value, scope, self._index):
                    return HOST
                return self.value(value, scope, attributes=False) if value is not None else None
            changed_in_place = (
                isinstance(item_parent, (cst.Attribute, cst.Subscript)) and item_parent.value is above
            ) or (isinstance(item_parent, cst.AugAssign) and item_parent.target is above)
            return None if changed_in_place else HOST
        if isinstance(above, cst.ComparisonTarget):
            return HOST if isinstance(above.operator, (cst.In, cst.NotIn)) else None
        if isinstance(above, (cst.For, cst.CompFor)) and above.iter is use or isinstance(above, cst.Return):
            return HOST  # read, or handed back to the caller once filled
        if isinstance(above, cst.Attribute) and above.value is use:
            call = index.parent(above)
            if not isinstance(call, cst.Call):
                return None
            if above.attr.value in _READ_METHODS:
                return HOST
            filled = [arg.value for arg in call.args]
            if above.attr.value in _FILL_METHODS and len(filled) == 1 and not call.args[0].star:
                return self.value(filled[0], scope, attributes=False)
            return None
        if isinstance(above, cst.Arg) and not above.star:
            call = index.parent(above)
            return HOST if isinstance(call, cst.Call) and resolve(call.func, scope) in _READERS else None
        return None

    def _index(self, unit: cst.CSTNode) -> UseIndex:
        if id(unit) not in self._indexes:
            self._indexes[id(unit)] = UseIndex(unit)
        return self._indexes[id(unit)]


def _counter(
    attribute: cst.Attribute,
    scope: Scope,
    index_of: Callable[[cst.CSTNode], UseIndex],
    seen: frozenset[str] = frozenset(),
) -> bool:
    """`self.num_updates`, when its class only ever assigns it numbers (`= 0`, `+= 1`,
    `= x.shape[0]`, `= len(x)`, arithmetic of those, of other such attributes and of parameters
    whose default is a number) or what it loads back (`= torch.load(p)`, `= d["num_updates"]` with
    `d = torch.load(...)`): whatever the class saves of it is a Python number."""
    klass = scope.enclosing_class
    if klass is None or not (isinstance(attribute.value, cst.Name) and attribute.value.value == "self"):
        return False
    index = index_of(klass.node)
    assigned = []
    for name in index.names(attribute.attr.value):
        use = index.parent(name)
        if not (
            isinstance(use, cst.Attribute) and use.attr is name and use.value.deep_equals(attribute.value)
        ):
            continue
        above = index.parent(use)
        if isinstance(above, cst.AssignTarget):
            assigned.append((_assigned(above, index), use))
        elif isinstance(above, (cst.AugAssign, cst.AnnAssign)) and above.target is use:
            assigned.append((above.value, use))
        elif _unpacked_into(use, index):
            return False
    numbers = _Numbers(index, klass, index_of, seen | {attribute.attr.value})
    return bool(assigned) and all(numbers.number(value, key) for value, key in assigned)


def _unpacked_into(node: cst.CSTNode, index: UseIndex) -> bool:
    """Is `node` a target other than `x = ...` (`a, x = ...`, `for x in`, `with ... as x`, `del x`)?"""
    child, above = node, index.parent(node)
    while isinstance(above, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        child, above = above, index.parent(above)
    if isinstance(above, cst.AsName):
        return above.name is child
    return isinstance(above, (cst.AssignTarget, cst.For, cst.CompFor, cst.Del)) and above.target is child


class _Numbers:
    """Which values assigned to a `self` attribute of `klass` are Python numbers."""

    def __init__(
        self, index: UseIndex, klass: Scope, index_of: Callable[[cst.CSTNode], UseIndex], seen: frozenset[str]
    ) -> None:
        self.index = index
        self.klass = klass
        self.index_of = index_of
        self.seen = seen  # the attributes being judged (one met again adds nothing)

    def number(self, value: cst.BaseExpression | None, key: cst.Attribute) -> bool:
        if isinstance(value, (cst.Integer, cst.Float)):
            return True
        if isinstance(value, cst.UnaryOperation):
            return self.number(value.expression, key)
        if isinstance(value, cst.BinaryOperation):
            return self.number(value.left, key) and self.number(value.right, key)
        if isinstance(value, cst.Call):
            callee = resolve(value.func, self.klass)
            return callee in _HOST_BUILTINS or callee in LOADERS
        if isinstance(value, cst.Attribute):
            return (
                isinstance(value.value, cst.Name) and value.value.value == "self" and self._attribute(value)
            )
        if isinstance(value, cst.Name):
            return self._name(value, key)
        if isinstance(value, cst.Subscript):
            return self._item(value, key)
        return False

    def _attribute(self, attribute: cst.Attribute) -> bool:
        return attribute.attr.value in self.seen or _counter(attribute, self.klass, self.index_of, self.seen)

    def _name(self, name: cst.Name, key: cst.Attribute) -> bool:
        """A local bound to a number before the use, or a parameter whose default is one."""
        reaching = reaching_assignment(name, self.index.parent)
        if reaching is not None:
            return self.number(reaching.value, key)
        function = _enclosing_function(name, self.index)
        return function is not None and any(
            p.name.value == name.value and isinstance(p.default, (cst.Integer, cst.Float))
            for p in parameters(function)
        )

    def _item(self, value: cst.Subscript, key: cst.Attribute) -> bool:
        if isinstance(value.value, cst.Attribute) and value.value.attr.value == "shape":
            return True  # `x.shape[0]`: a Python int
        element = value.slice[0].slice if len(value.slice) == 1 else None
        loaded = (
            reaching_assignment(value.value, self.index.parent) if isinstance(value.value, cst.Name) else None
        )
        return (
            isinstance(element, cst.Index)
            and isinstance(element.value, cst.SimpleString)
            and element.value.evaluated_value == key.attr.value
            and loaded is not None
            and isinstance(loaded.value, cst.Call)
            and resolve(loaded.value.func, self.klass) in LOADERS
        )


def _enclosing_function(node: cst.CSTNode, index: UseIndex) -> cst.FunctionDef | None:
    above = index.parent(node)
    while above is not None and not isinstance(above, cst.FunctionDef):
        above = index.parent(above)
    return above


def _empty(value: cst.BaseExpression, scope: Scope) -> bool:
    """`{}`, `[]`, `dict()` or `list()`."""
    if isinstance(value, (cst.Dict, cst.List)):
        return not value.elements
    return isinstance(value, cst.Call) and not value.args and resolve(value.func, scope) in _EMPTY


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


def _built_on_host(value: cst.BaseExpression, scope: Scope) -> bool:
    """`nn.Linear(3, 4)`, `Net()`: a module built without a device, by torch or by a class of the
    file whose code names none (no `device`, `cuda` or `.to(`)."""
    if not isinstance(value, cst.Call) or keyword(value, "device") is not None:
        return False
    module = scope.module
    if isinstance(value.func, cst.Name) and value.func.value in local_module_classes(module):
        return _names_no_device(value.func.value, module, set())
    return is_module_class(resolve(value.func, scope), scope)


def _names_no_device(name: str, module: Scope, seen: set[str]) -> bool:
    """The class of the file `name`, and its bases of the file, name no device in their code."""
    if name in seen:
        return True
    seen.add(name)
    code = module.node.code_for_node  # type: ignore[attr-defined]
    classes = [b.node for b in module.bindings.get(name, ()) if isinstance(b.node, cst.ClassDef)]
    return len(classes) == 1 and all(
        not any(word in code(node) for word in ("cuda", "device", ".to("))
        and all(
            _names_no_device(base.value.value, module, seen)
            for base in node.bases
            if isinstance(base.value, cst.Name) and base.value.value in module.bindings
        )
        for node in classes
    )
