"""Data loaders and their batches: what is a loader, where it comes from, is a value one of its batches.

A batch that a `DataLoader` yields is already a batch: moving it is the one
transfer per step that training needs. Rules about per-item transfers must
recognise it to stay silent; rules about pinned memory need to know where a
loader comes from and where it goes. Batches moved inside their loop are in
`batches`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import libcst as cst

from torchdev_lint.analysis.context.availability import is_availability_call
from torchdev_lint.analysis.knowledge.devices import (
    VARIABLE,
    as_move,
    device_argument,
    literal_device,
    places_on_device,
)
from torchdev_lint.analysis.knowledge.library_models import Fact, apis
from torchdev_lint.analysis.project.parameters import Parameter, parameter_of
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, dotted_name, resolve
from torchdev_lint.analysis.syntax.walk import first
from torchdev_lint.analysis.values.kinds import is_tensor_factory_call
from torchdev_lint.analysis.values.module_classes import attribute_assignments, instance_name
from torchdev_lint.syntax import argument, has_star, keyword, keyword_is_true

DATALOADER_CLASSES = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
TENSOR_DATASET_CLASSES = frozenset(
    {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}
)
# Builtins whose result yields the items of their iterable arguments; the other
# builtins (`len`, `range`, `sum`...) consume them.
_PASS_THROUGH_BUILTINS = frozenset(
    {"enumerate", "iter", "zip", "reversed", "filter", "map", "list", "tuple", "sorted"}
)
_LOADER_NAME = re.compile(r"loader|(^|_)dl($|_)|(^|_)dls($|_)", re.IGNORECASE)
_BATCH_NAME = re.compile(r"batch|(^|_)(iter|iterator)($|_)", re.IGNORECASE)
_MAX_DEPTH = 6
# `collate_fn` is DataLoader's seventh parameter.
_COLLATE_FN_INDEX = 6


def is_dataloader_call(node: cst.BaseExpression, scope: Scope) -> TypeGuard[cst.Call]:
    """`DataLoader(...)` under any import spelling or alias, or a library's subclass of it."""
    return isinstance(node, cst.Call) and is_dataloader_class(resolve(node.func, scope))


def is_dataloader_class(name: str | None) -> bool:
    """Torch's `DataLoader` (resolved name), or a library's subclass of it that keeps its
    `pin_memory` (the library models' `TORCH_LOADER`)."""
    return name in DATALOADER_CLASSES or name in apis(Fact.TORCH_LOADER)


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


def _wrapped(node: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression]:
    """The iterables whose items an expression may pass through when iterated.

    `enumerate(loader)`, `zip(a, b)` (every argument of a pass-through builtin);
    `tqdm(loader)`, `MetricLogger(" ").log_every(loader, 10)` (the first argument
    of any other call); both sides of `a if c else b`; nothing for builtins that
    consume them (`len(loader)`).
    """
    if isinstance(node, cst.IfExp):
        return [node.body, node.orelse]  # `tqdm(dl) if verbose else dl`
    if not isinstance(node, cst.Call):
        return []
    positional = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
    name = resolve(node.func, scope)
    if name is not None and name.startswith("builtins."):
        return positional if name[len("builtins.") :] in _PASS_THROUGH_BUILTINS else []
    return positional[:1]


def _bound_values(node: cst.BaseExpression, scope: Scope) -> list[tuple[cst.BaseExpression, Scope]] | None:
    """The values every binding of a name (or of a `self` attribute, across its class's methods)
    assigns, or None when any binding is opaque."""
    if isinstance(node, cst.Attribute):
        return _self_attribute_values(node, scope)
    found = assigned_values(node, scope)
    return None if found is None else [(value, found[1]) for value in found[0]]


def _self_attribute_values(
    node: cst.Attribute, scope: Scope
) -> list[tuple[cst.BaseExpression, Scope]] | None:
    """`self.dl` in a method: what the class's methods assign to `self.dl` (`self.dl =
    cycle(DataLoader(...))` in `__init__`), each with its method's scope; None when unknown (not
    an attribute of `self`, assigned nowhere in the class, or also in a way not followed)."""
    owner = scope.owner
    cls = owner.parent
    if (
        not isinstance(node.value, cst.Name)
        or not isinstance(owner.node, cst.FunctionDef)
        or cls is None
        or not isinstance(cls.node, cst.ClassDef)
        or instance_name(owner.node) != node.value.value
    ):
        return None
    found = attribute_assignments(cls.node, node.attr.value)
    if not found:
        return None
    return [(value, cls.opened(method) or cls) for method, value in found]


def is_loader(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """A DataLoader, something named like a loader, a name bound to one, or a call that
    passes a loader's batches through (`enumerate(tqdm(loader))`, `logger.log_every(loader, n)`)."""
    if is_dataloader_call(node, scope) or named_like_loader(node):
        return True
    if depth >= _MAX_DEPTH:
        return False
    if any(is_loader(arg, scope, depth + 1) for arg in _wrapped(node, scope)):
        return True
    values = _bound_values(node, scope)
    return values is not None and all(is_loader(value, owner, depth + 1) for value, owner in values)


def is_batch_source(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """Does iterating `node` yield batches rather than single items?

    Loaders (see `is_loader`), anything named like batches, `next()` of a
    loader, calls passing these through, and names bound to any of these.
    """
    if is_loader(node, scope) or named_like_batches(node):
        return True
    if depth >= _MAX_DEPTH:
        return False
    if isinstance(node, cst.Call) and resolve(node.func, scope) == "builtins.next" and node.args:
        return is_batch_source(node.args[0].value, scope, depth + 1)
    if any(is_batch_source(arg, scope, depth + 1) for arg in _wrapped(node, scope)):
        return True
    values = _bound_values(node, scope)
    return values is not None and all(is_batch_source(value, owner, depth + 1) for value, owner in values)


def iterates_mapping(node: cst.BaseExpression) -> bool:
    """`d.items()`, `d.values()`, `d.keys()`: a dict's entries, not a collection of items."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in ("items", "values", "keys")
    )


def is_pinned(call: cst.Call, scope: Scope) -> bool:
    """`DataLoader(..., pin_memory=True)`, or pinned whenever CUDA is there
    (`pin_memory=torch.cuda.is_available()`, what TDL204 writes for a program that also runs
    without CUDA), or whenever the device it is compared with is CUDA
    (`pin_memory=self.device.type == "cuda"`: pinned for every copy to CUDA)."""
    if keyword_is_true(call, "pin_memory"):
        return True
    arg = keyword(call, "pin_memory")
    return arg is not None and (is_availability_call(arg.value, scope) or _says_cuda(arg.value))


def _says_cuda(test: cst.BaseExpression) -> bool:
    """`device.type == "cuda"`, `"cuda" == args.device`, `device.type != "cpu"`: true exactly when a
    device is CUDA (or is not the CPU)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    target = test.comparisons[0]
    sides = (test.left, target.comparator)
    devices = [literal_device(side) for side in sides if isinstance(side, cst.SimpleString)]
    if len(devices) != 1 or devices[0] is None:
        return False
    if isinstance(target.operator, cst.Equal):
        return devices[0].type == "cuda"
    return isinstance(target.operator, cst.NotEqual) and devices[0].type == "cpu"


def default_collated(call: cst.Call, scope: Scope) -> bool:
    """Does the loader collate with PyTorch's default (torch's own `DataLoader`, no `collate_fn`,
    no `**kwargs`) into batches (not `batch_size=None`, where each item passes through as the
    dataset gave it)? The parts of its batches are then tensors (or containers of them), never a
    class with a `.to()` of its own (a library's subclass collates into its own batch class)."""
    size = argument(call, 1, "batch_size")
    unbatched = size is not None and isinstance(size.value, cst.Name) and size.value.value == "None"
    return (
        resolve(call.func, scope) in DATALOADER_CLASSES
        and argument(call, _COLLATE_FN_INDEX, "collate_fn") is None
        and not has_star(call, "**")
        and not unbatched
    )


@dataclass(frozen=True)
class LoaderOrigin:
    """Where the batches of an iterable come from."""

    calls: tuple[cst.Call, ...] = ()  # the `DataLoader(...)` calls it is known to iterate
    untraced: bool = False  # part of it is a loader of unknown origin (an attribute, a call's result)
    placed: bool = False  # it went through a library that puts the batches on the device itself
    # The parameters of the function (named as summaries name it) it iterates: their callers know.
    parameters: tuple[Parameter, ...] = ()
    unpinned: bool = False  # one of `calls` does not pin memory (`is_pinned`)
    custom_collate: bool = False  # one of `calls` collates with a function of its own (`default_collated`)

    def __or__(self, other: LoaderOrigin) -> LoaderOrigin:
        return LoaderOrigin(
            self.calls + other.calls,
            self.untraced or other.untraced,
            self.placed or other.placed,
            self.parameters + other.parameters,
            self.unpinned or other.unpinned,
            self.custom_collate or other.custom_collate,
        )

    @property
    def unknown(self) -> bool:
        """Is part of it a loader this file does not build (a parameter, an attribute)?"""
        return self.untraced or bool(self.parameters)

    def pinned(self, pinned_parameter: Callable[[Parameter], bool] | None = None) -> bool:
        """Does every loader it iterates pin memory (and none place batches on the device)? A
        parameter counts when `pinned_parameter` says every project call passes a pinned loader."""
        return self._every(self.unpinned, pinned_parameter)

    def collated(self, collated_parameter: Callable[[Parameter], bool] | None = None) -> bool:
        """Does every loader it iterates collate by default (`default_collated`)? A parameter
        counts when `collated_parameter` says every project call passes a pinned loader that does."""
        return self._every(self.custom_collate, collated_parameter)

    def _every(self, one_fails: bool, parameter_holds: Callable[[Parameter], bool] | None) -> bool:
        if one_fails or self.untraced or self.placed or not (self.calls or self.parameters):
            return False
        return not self.parameters or (
            parameter_holds is not None and all(map(parameter_holds, self.parameters))
        )


def loader_origin(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> LoaderOrigin:
    """The loaders that iterating `node` iterates, through wrapper calls and names. A `None`
    (`self.loader = None` until a method sets the loader) yields nothing: iterating it raises."""
    if isinstance(node, cst.Name) and node.value == "None":
        return LoaderOrigin()
    if is_dataloader_call(node, scope):
        return LoaderOrigin(
            calls=(node,),
            unpinned=not is_pinned(node, scope),
            custom_collate=not default_collated(node, scope),
        )
    if depth >= _MAX_DEPTH:
        return LoaderOrigin(untraced=True)
    if places_on_device(node):  # the loaders it hands back, placed
        origin = LoaderOrigin(placed=True)
        for arg in node.args:
            if is_loader(arg.value, scope):
                origin |= loader_origin(arg.value, scope, depth + 1)
        return origin
    parameter = parameter_of(node, scope)
    if parameter is not None:
        return LoaderOrigin(parameters=(parameter,))
    origin = LoaderOrigin()
    sources = [arg for arg in _wrapped(node, scope) if is_loader(arg, scope)]
    if sources:
        values: list[tuple[cst.BaseExpression, Scope]] | None = [(source, scope) for source in sources]
    else:
        values = _bound_values(node, scope)
    if values is None:
        return LoaderOrigin(untraced=True)
    for value, owner in values:
        origin |= loader_origin(value, owner, depth + 1)
    return origin


@dataclass(frozen=True)
class LoaderFate:
    """Where a `DataLoader(...)` call's loader goes, as far as its file shows."""

    escapes: bool  # returned, passed on, stored, or bound at module level: used where this file cannot see
    delegated: bool  # handed to a library that puts its batches on the device itself
    # The calls it is passed to as an argument (project facts may know what the callee does).
    handed: tuple[tuple[cst.Call, cst.Arg], ...] = ()


def loader_fate(call: cst.Call, ancestors: Sequence[cst.CSTNode]) -> LoaderFate:
    """Follow a loader from its `DataLoader(...)` call (the last of `ancestors`).

    A loader bound to a local name is followed through the function's uses of
    that name; iterating it (directly or through wrappers), `len()` and
    attribute reads keep it in view; anything else lets it escape.
    """
    parent = ancestors[-2] if len(ancestors) >= 2 else None
    function = next((n for n in reversed(ancestors) if isinstance(n, cst.FunctionDef)), None)
    if (
        function is not None
        and isinstance(parent, cst.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0].target, cst.Name)
    ):
        uses = _NameUses(parent.targets[0].target.value)
        function.body.visit(uses)
        return LoaderFate(uses.escapes, uses.delegated, tuple(uses.handed))
    return _use_of(call, list(ancestors[:-1]))


def _use_of(node: cst.CSTNode, path: list[cst.CSTNode]) -> LoaderFate:
    """What one use of a loader expression `node` whose ancestors are `path` does with it."""
    parent = path[-1] if path else None
    if isinstance(parent, cst.Arg) and len(path) >= 2:
        call = path[-2]
        if places_on_device(call):
            return LoaderFate(False, True)
        if isinstance(call, cst.Call) and dotted_name(call.func) == "len":
            return LoaderFate(False, False)
    if _in_loop_iterable([*path, node]):
        return LoaderFate(False, False)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        return LoaderFate(False, False)
    if isinstance(parent, cst.Arg) and parent.value is node and isinstance(path[-2], cst.Call):
        return LoaderFate(True, False, ((path[-2], parent),))
    return LoaderFate(not isinstance(parent, cst.AssignTarget), False)


def _in_loop_iterable(path: Sequence[cst.CSTNode]) -> bool:
    """Is the last of `path` part of a `for` loop's iterable (`for b in tqdm(loader)`)?"""
    for parent, child in zip(reversed(path[:-1]), reversed(path[1:]), strict=True):
        if isinstance(parent, cst.For):
            return parent.iter is child
        if isinstance(parent, cst.BaseStatement):
            return False
    return False


class _NameUses(cst.CSTVisitor):
    """Classifies every use of one local name holding a loader (see `loader_fate`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path: list[cst.CSTNode] = []
        self.escapes = False
        self.delegated = False
        self.handed: list[tuple[cst.Call, cst.Arg]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name) and node.value == self.name:
            use = _use_of(node, self.path)
            self.escapes |= use.escapes
            self.delegated |= use.delegated
            self.handed += use.handed
        self.path.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.path.pop()


def dataset_argument(call: cst.Call) -> cst.BaseExpression | None:
    """The dataset a `DataLoader(...)` call iterates (first positional or `dataset=`)."""
    found = keyword(call, "dataset")
    if found is not None:
        return found.value
    first = call.args[0] if call.args else None
    return first.value if first is not None and first.keyword is None and not first.star else None


def built_from(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> list[cst.BaseExpression]:
    """The expressions a value may be built by, following names through every assignment to them
    (`ds = TensorDataset(x)`, then `DataLoader(ds)`); opaque bindings (parameters) add nothing."""
    if not isinstance(node, cst.Name):
        return [node]
    found = scope.lookup(node.value)
    if found is None or depth >= _MAX_DEPTH:
        return []
    owner, bindings = found
    return [
        leaf
        for binding in bindings
        if binding.value is not None
        for leaf in built_from(binding.value, owner, depth + 1)
    ]


def moves_to_accelerator(node: cst.CSTNode, scope: Scope, *, or_makes: bool = False) -> bool:
    """Does code (a dataset class, a collate function) move anything to a device that is not the
    CPU? With `or_makes`, or make a tensor there (`torch.randn(16, device=self.device)`): where a
    loader's data may live, not whether a function uses an accelerator."""
    return first(node, lambda child: _to_accelerator(child, scope, or_makes)) is not None


def _to_accelerator(node: cst.CSTNode, scope: Scope, or_makes: bool) -> bool:
    if not isinstance(node, cst.Call):
        return False
    move = as_move(node, scope)
    if move is not None:
        return move.to_accelerator
    given = keyword(node, "device") if or_makes and is_tensor_factory_call(node, scope) else None
    return given is not None and (device_argument(given.value, scope) or VARIABLE).type != "cpu"
