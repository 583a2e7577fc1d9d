"""What loading a checkpoint restores, shared by the load rules (TDL101, TDL102).

A load restores tensors onto the device they were saved from unless given a
`map_location`; this module says which calls load (`LOADERS`) and gathers the
signs, at the load and in the loaded value's uses, that it restores none onto a
device this machine lacks:

- `UseIndex.state_dict_receivers`: does every use of a loaded value end in
  a `load_state_dict(...)` call (directly, through items, `.get`/`.pop`, names
  it is assigned to, key-renaming dict comprehensions)? Only then does loading
  it onto the CPU change nothing the program sees.
- `falls_back_after_safe_load`: a `weights_only=False` load in the `except` of a `try` that
  loaded the same path with `weights_only=True`.
- `path_key`: the text by which a load and a save name the same file.
- `package_data`, `fixed_url`, `holds_numbers_only`, `restores_host_data`, `names_host_file`,
  `runs_on_xla`, `pickling_format`, `discards_device`, `is_test_code`: other signs that a
  load restores no tensor onto a device this machine lacks.

What the file itself saves is in `checkpoint_saves`.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

import libcst as cst

from torchdev_lint.analysis.context.cuda_only_code import test_file_name
from torchdev_lint.analysis.context.guards import name_words
from torchdev_lint.analysis.knowledge.library_models import Fact, apis, pickled_checkpoint_finder
from torchdev_lint.analysis.syntax.reaching_bindings import reaching_assignment
from torchdev_lint.analysis.syntax.scopes import (
    Scope,
    assigned_values,
    block_statements,
    dotted_name,
    resolve,
    small_statements,
)
from torchdev_lint.analysis.syntax.walk import calls, children, contains
from torchdev_lint.syntax import argument, has_star, keyword, positional


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
            if parent.attr.value in ("items", "values"):
                return self._iterated_values(call, parent.attr.value, scope, names)
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
        if is_rng_setter(func, scope) or resolve(func, scope) in apis(Fact.HOST_CONSUMER):
            self._receivers.append(func)
            return True
        if not (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"):
            return False
        assign = argument(call, 2, "assign")
        if assign is not None and not (isinstance(assign.value, cst.Name) and assign.value.value == "False"):
            return False  # `assign=True` makes the loaded tensors the parameters
        if has_star(call, "*") or has_star(call, "**"):
            return False  # `*args` or `**options` may pass `assign=True`
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

    def _iterated_values(self, call: cst.Call, method: str, scope: Scope, names: set[str]) -> bool:
        """`for name, state in value.items():` (or `.values()`): each value judged by the uses of the
        loop's name for it in the loop body (the key is a string)."""
        loop = self.parent(call)
        if not (isinstance(loop, cst.For) and loop.iter is call and not call.args):
            return False
        target: cst.BaseExpression = loop.target
        if method == "items":
            if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
                return False
            target = target.elements[1].value
        if not isinstance(target, cst.Name) or target.value in names:
            return False
        inner = names | {target.value}
        for reference in self._names[target.value]:
            if reference is target or self._is_store(reference) or self._not_a_reference(reference):
                continue
            if not contains(loop.body, reference):
                return False  # read after the loop: the last item, used as anything
            if not self._judge(reference, scope, inner):
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


def path_key(path: cst.BaseExpression) -> str:
    """The path expression as text without layout: the same expression saves and loads the same file."""
    return "".join(cst.Module(body=[]).code_for_node(path).split())


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
    if name == "random.setstate":
        return True
    return name.rsplit(".", 1)[-1].startswith("set_rng_state")


def restores_host_data(receiver: cst.BaseExpression, scope: Scope) -> bool:
    """Does a `UseIndex.state_dict_receivers` receiver take host data only? A scheduler or
    scaler (plain numbers), a generator (CPU bytes), `torch.from_numpy` (arrays)."""
    return (
        holds_numbers_only(receiver)
        or is_rng_setter(receiver, scope)
        or resolve(receiver, scope) in apis(Fact.HOST_CONSUMER)
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


def pickling_format(path: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """A path a DeepSpeed helper found (`get_optim_files(dir)[0]`, `get_model_state_file(...)`),
    directly or through names bound to it: a checkpoint format that pickles arbitrary objects."""
    stack: list[cst.CSTNode] = [path]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and pickled_checkpoint_finder(resolve(node.func, scope) or ""):
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


def falls_back_after_safe_load(call: cst.Call, enclosing: list[cst.CSTNode], scope: Scope) -> bool:
    """A load in an `except` handler of a `try` whose body loads the same path expression with
    `weights_only=True`: the program tried the safe load first, and falls back only once it has
    failed (on an `UnpicklingError`, usually with a warning naming the types to allow-list)."""
    found = argument(call, 0, "f")
    if found is None:
        return False
    for depth in range(len(enclosing) - 1, 0, -1):
        handler, statement = enclosing[depth], enclosing[depth - 1]
        if isinstance(handler, (cst.FunctionDef, cst.Lambda)):
            return False  # a function defined in the handler runs later: no fallback
        if isinstance(handler, cst.ExceptHandler) and isinstance(statement, cst.Try):
            return any(_safe_load_of(load, path_key(found.value), scope) for load in calls(statement.body))
    return False


def _safe_load_of(load: cst.Call, key: str, scope: Scope) -> bool:
    given, safe = argument(load, 0, "f"), keyword(load, "weights_only")
    return (
        given is not None
        and path_key(given.value) == key
        and safe is not None
        and isinstance(safe.value, cst.Name)
        and safe.value.value == "True"
        and resolve(load.func, scope) == "torch.load"
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
