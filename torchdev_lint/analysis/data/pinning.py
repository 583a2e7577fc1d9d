"""What `pin_memory=` to give a loader: pinning where it pays, no warning where it cannot.

`DataLoader(pin_memory=True)` on a machine without an accelerator warns on every run and pins
nothing, so a program that also runs without CUDA gets `pin_memory=torch.cuda.is_available()`;
only where the batches go to CUDA unconditionally (the program cannot run without it) is a
plain `True` right. A `pin_memory` argument the author wrote and commented out is a decision
about that loader, not an omission (TDL204 leaves it alone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Literal, overload

import libcst as cst

from torchdev_lint.analysis.context.availability import checks_availability
from torchdev_lint.analysis.data.dataset_items import item_parameters
from torchdev_lint.analysis.data.datasets import collate_code, dataset_class_of
from torchdev_lint.analysis.data.loaders import (
    TENSOR_DATASET_CLASSES,
    LoaderFate,
    built_from,
    dataset_argument,
    moves_to_accelerator,
)
from torchdev_lint.analysis.knowledge.devices import CPU, Move, as_move
from torchdev_lint.analysis.project.parameters import passed_arguments
from torchdev_lint.analysis.syntax.loops import names_in
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, module_reference, resolve
from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.flow_values import Kind
from torchdev_lint.syntax import keyword

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.file_facts import FileFacts
    from torchdev_lint.engine import FileContext

_COMMENTED_PIN = re.compile(r"#[^\n]*\bpin_memory\b")


class Residency(IntEnum):
    """Where a loader's data lives before it would pin it, from least to most in the way of pinning."""

    HOST = 0  # host memory, or nothing says otherwise: pinning is safe
    UNKNOWN = 1  # tensors of unknown provenance: they may be on a device, pinning would then raise
    DEVICE = 2  # on a device: the loader must not pin it


@dataclass(frozen=True)
class UnpinnedLoader:
    """A `DataLoader(...)` call without `pin_memory`, as TDL204 found it."""

    call: cst.Call
    fate: LoaderFate
    direct: Residency | None  # where the dataset lives when it is itself a tensor
    scope: Scope


def pin_commented_out(statement_code: str) -> bool:
    """Does the statement's text (its comments included) hold a commented-out `pin_memory`?"""
    return _COMMENTED_PIN.search(statement_code) is not None


def needs_cuda(move: Move, scope: Scope) -> bool:
    """A move that fails without CUDA (`.cuda()`, `.to("cuda")`) in code that does not ask
    whether CUDA is there: the program cannot run past it on a machine without CUDA."""
    if move.device.type != "cuda":
        return False
    current: Scope | None = scope
    while current is not None:
        if current.kind != "class" and checks_availability(current.node, current):
            return False
        current = current.parent
    return True


def pin_value(scope: Scope, cuda_required: bool) -> cst.BaseExpression | None:
    """`True` where the program cannot run without CUDA, else `torch.cuda.is_available()` under
    the name the file binds torch to; None when it binds none (no fix can be written)."""
    if cuda_required:
        return cst.Name("True")
    torch = module_reference(scope, "torch")
    if torch is None:
        return None
    available = cst.Attribute(
        value=cst.Attribute(value=torch, attr=cst.Name("cuda")), attr=cst.Name("is_available")
    )
    return cst.Call(func=available)


@overload
def tensor_residency(
    node: cst.BaseExpression, ctx: FileContext, tensors_only: Literal[False] = False
) -> Residency: ...
@overload
def tensor_residency(
    node: cst.BaseExpression, ctx: FileContext, tensors_only: Literal[True]
) -> Residency | None: ...
def tensor_residency(
    node: cst.BaseExpression, ctx: FileContext, tensors_only: bool = False
) -> Residency | None:
    """Where a tensor handed to a dataset lives, from the device flow and the moves that build it.

    With `tensors_only`, None for a value not known to be a tensor.
    """
    value = flow.value_of(node, ctx)
    scope = ctx.scope
    moved = any(
        isinstance(leaf, cst.Call) and (move := as_move(leaf, scope)) is not None and move.to_accelerator
        for leaf in built_from(node, scope)
    )
    if moved or (value is not None and value.device is not None and value.device.on_accelerator):
        return Residency.DEVICE
    if value is not None and value.kind is Kind.TENSOR:
        return Residency.HOST if value.device == CPU else Residency.UNKNOWN
    if tensors_only:
        return None
    return Residency.HOST if value is not None and value.kind is Kind.OTHER else Residency.UNKNOWN


def handed_out_arguments(call: cst.Call, scope: Scope, facts: FileFacts | None) -> list[cst.Arg] | None:
    """The arguments of a dataset construction whose tensors (or their items) the loader's
    batches are made of: every argument of a `TensorDataset`; those a dataset class hands out
    unchanged (`analysis/data/dataset_items.py`: a class of this file, or of another file through the
    project facts). None for any other call."""
    if resolve(call.func, scope) in TENSOR_DATASET_CLASSES:
        return list(call.args)
    klass = dataset_class_of(call, scope)
    if klass is not None:
        parameters = item_parameters(klass)
    else:
        callee = dotted_name(call.func)
        parameters = facts.hands_out_items(callee) if facts is not None and callee is not None else []
    return passed_arguments(call, parameters) if parameters else None


def loader_residency(
    call: cst.Call, scope: Scope, direct: Residency | None, tensor_datasets: dict[cst.Call, Residency]
) -> Residency:
    """Where the batches of the loader `call` may live before it would pin them: `direct` where
    its dataset is itself a tensor, `tensor_datasets` the file's `TensorDataset(...)` calls."""
    found = [direct] if direct is not None else []
    dataset = dataset_argument(call)
    for leaf in [] if dataset is None else built_from(dataset, scope):
        dataset_class = dataset_class_of(leaf, scope)
        if isinstance(leaf, cst.Call) and leaf in tensor_datasets:
            found.append(tensor_datasets[leaf])
        elif dataset_class is not None and moves_to_accelerator(dataset_class, scope, or_makes=True):
            found.append(Residency.DEVICE)
        elif dataset_class is not None and _reads_device_globals(dataset_class, scope):
            found.append(Residency.UNKNOWN)  # `return TABLE[i]` with `TABLE = ....to(DEVICE)`: no fix
    collate = keyword(call, "collate_fn")
    code = None if collate is None else collate_code(collate.value, scope)
    if code is not None and moves_to_accelerator(code, scope, or_makes=True):
        found.append(Residency.DEVICE)
    return max(found, default=Residency.HOST)


def _reads_device_globals(dataset_class: cst.CSTNode, scope: Scope) -> bool:
    """Does the class read a module-level name bound to data moved to (or made on) a device that is
    not known to be the CPU (`TABLE = torch.randn(100, 8).to(DEVICE)`)?"""
    module = scope.module
    for name in names_in(dataset_class):
        bindings = module.bindings.get(name, ()) if "." not in name else ()
        if any(
            b.value is not None and moves_to_accelerator(b.value, module, or_makes=True) for b in bindings
        ):
            return True
    return False


def handed_to_mover(fate: LoaderFate, facts: FileFacts | None) -> bool:
    """Is the loader passed to a project function that moves the batches of that parameter to a
    device (project facts)?"""
    return facts is not None and any(
        (callee := dotted_name(call.func)) is not None
        and any(arg is handed for arg in passed_arguments(call, facts.moves_batches(callee)))
        for call, handed in fate.handed
    )
