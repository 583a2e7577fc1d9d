"""The summary's parameter boundaries: what a function does with what its callers pass.

Gathered call by call during the summary's one traversal (`summaries._Collector`)
and written into the file's summary as plain JSON:

- `checkpoints`: `{"save_checkpoint": [[0, "encoder"], ...]}`, the parameters a
  function stores as values of a dict it gives to `torch.save` (the dict TDL105 reads,
  `checkpoint_saves.saved_dict_slots`), unless the function's own check already reports
  them (a parameter named or annotated like a module): a caller passing a module
  there is TDL105 at the call.
- `batches`: `{"train_one_epoch": [[1, "loader"]]}`, the parameters a function
  iterates as a loader (directly or through `enumerate`/`tqdm`/...) and whose batches
  it moves to a device that is not the CPU (`batch_sources.batch_source`, also behind a dtype
  cast, `x.float().to(d)`): a caller passing
  an unpinned `DataLoader` there is TDL204 at the `DataLoader(...)`.
- `loader_args`: `[["engine.train_one_epoch", [1], [1], [1]], ...]`, one entry per call
  that passes a loader this file builds: the callee as written, the slots (position,
  or keyword) of the pinned ones, of all of them, and of the pinned ones that collate
  by default (`loaders.default_collated`). With how often each callee is
  called (the summary's `counts`), this says whether every call of a function passes
  a pinned loader for a parameter (TDL205 in the callee).
- `forwards`: `{"fit": [["engine.train_one_epoch", 1, 2, "loader"], ...]}`, one entry per
  call in which a function passes one of its own loader parameters on, unchanged, to a
  project function: the callee as written, the slot (position or keyword), the parameter's
  position and name. A loader reaching `train_one_epoch` through `fit` is then as good as
  passed to it (`parameter_facts.moving_parameters`, `pinned_parameters`).
- `moved_arguments`: `{"to_inputs": [[0, "batch", 1, "device", "accelerator"]]}`, the parameters
  a module-level function moves (or a part of each: `batch.x.to(device)`) with the position and
  name of its parameter naming the device (-1 and "" for none) and where the move goes without
  it (`helper_moves.parameter_move`): a caller's loop handing a batch there moves the batch.
- `batch_calls`: `["utils.to_inputs"]`, the project callees (as written) a loop hands a
  loader's batch to, with a device: their modules are wanted, for `moved_arguments`.
- `passed_on`: `{"train_one_epoch": ["here", "train_one_epoch"]}`, project functions handed
  to a call as a value (`pool.map(train_one_epoch, ...)`, `partial(train_one_epoch, ...)`):
  their calls are not all seen, so what every call passes is unknown.

Positions count every positional parameter (`self` included); `parameters.call_position`
maps them to a call's positions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import libcst as cst

from torchdev_lint.analysis.data.batch_sources import batch_source
from torchdev_lint.analysis.data.helper_moves import CPU_PLACE, parameter_move
from torchdev_lint.analysis.data.loaders import is_loader, loader_origin
from torchdev_lint.analysis.knowledge.devices import VARIABLE, Move, as_move, device_argument
from torchdev_lint.analysis.project.parameters import Parameter, parameter_of
from torchdev_lint.analysis.provenance.checkpoint_saves import saved_dict_slots
from torchdev_lint.analysis.syntax.loops import innermost_loop
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, resolve
from torchdev_lint.analysis.values.kinds import probably_module
from torchdev_lint.syntax import argument


class ParameterUses:
    """The parameter facts of one file, noted call by call."""

    def __init__(self, reference_of: Callable[[str, Scope], list[Any] | None]) -> None:
        self.reference_of = reference_of  # `summaries.reference_of`: what a name refers to
        self.checkpoints: dict[str, list[list[Any]]] = {}
        self.batches: dict[str, list[list[Any]]] = {}
        self.moved_arguments: dict[str, list[list[Any]]] = {}
        self.batch_calls: list[str] = []
        self.loader_args: list[list[Any]] = []
        self.forwards: dict[str, list[list[Any]]] = {}
        self.passed_on: dict[str, list[Any] | None] = {}

    def call(
        self, node: cst.Call, scope: Scope, ancestors: Sequence[cst.CSTNode], callee: str | None
    ) -> None:
        """A call (the last of `ancestors`); `callee` is its text when it names a project function."""
        if callee is not None:
            self._loaders_passed(node, scope, callee)
        for arg in node.args:
            text = dotted_name(arg.value) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            reference = self.reference_of(text, scope) if text is not None else None
            if text is not None and reference is not None:
                self.passed_on[text] = reference
        if callee is not None and node.args and innermost_loop(ancestors) is not None:
            self._batch_passed(node, scope, ancestors, callee)
        move = as_move(node, scope)
        if move is not None or (isinstance(node.func, cst.Attribute) and node.func.attr.value == "to"):
            self._argument_moved(node, scope, ancestors)
        if move is not None and move.to_accelerator:
            source = batch_source(move, ancestors, scope)
            origin = None if source is None else loader_origin(source, scope)
            if origin is not None:  # also a loader a library placed: it copied the batch as the move would
                for moved in origin.parameters:
                    _note(self.batches, moved)
        elif resolve(node.func, scope) == "torch.save":
            saved = argument(node, 0, "obj")
            for slot in saved_dict_slots(saved.value, scope) if saved is not None else ():
                stored = parameter_of(slot.value, scope)
                if stored is not None and not probably_module(slot.value, scope):
                    _note(self.checkpoints, stored)

    def _batch_passed(
        self, node: cst.Call, scope: Scope, ancestors: Sequence[cst.CSTNode], callee: str
    ) -> None:
        """A loop's batch handed to the project callee `callee` together with a device
        (`to_inputs(batch, device)`): reading the callee's module for what it moves costs a summary
        of it, and a callee given no device (`plot_images(images, targets)`) seldom moves."""
        if not any(device_argument(arg.value, scope) is not None for arg in node.args if not arg.star):
            return
        for arg in node.args:
            if (
                not arg.star
                and batch_source(Move(node, arg.value, VARIABLE, None), ancestors, scope) is not None
            ):
                self.batch_calls.append(callee)
                return

    def _argument_moved(self, node: cst.Call, scope: Scope, ancestors: Sequence[cst.CSTNode]) -> None:
        """A module-level function's move of (part of) one of its parameters to a device not known
        to be the CPU, or to where another of its parameters says."""
        found = parameter_move(node, scope, ancestors)
        if found is None or "." in found.moved.function:
            return
        if found.device is None and found.place == CPU_PLACE:
            return
        moved, device = found.moved, found.device
        entry = [
            -1 if moved.position is None else moved.position,
            moved.name,
            -1 if device is None or device.position is None else device.position,
            "" if device is None else device.name,
            found.place,
        ]
        entries = self.moved_arguments.setdefault(moved.function, [])
        if all(known[1] != moved.name for known in entries):  # the first move of each parameter
            entries.append(entry)

    def _loaders_passed(self, node: cst.Call, scope: Scope, callee: str) -> None:
        pinned: list[int | str] = []
        loaders: list[int | str] = []
        collated: list[int | str] = []
        for slot, arg in _slots(node):
            if not is_loader(arg.value, scope):
                continue
            forwarded = parameter_of(arg.value, scope)
            if forwarded is not None:
                entry = [callee, slot, forwarded.position, forwarded.name]
                self.forwards.setdefault(forwarded.function, []).append(entry)
                continue
            origin = loader_origin(arg.value, scope)
            if origin.calls:
                loaders.append(slot)
                if origin.pinned():
                    pinned.append(slot)
                    if origin.collated():
                        collated.append(slot)
        if loaders:
            self.loader_args.append([callee, pinned, loaders, collated])

    def fields(self) -> dict[str, Any]:
        return {
            "checkpoints": self.checkpoints,
            "batches": self.batches,
            "loader_args": self.loader_args,
            "forwards": self.forwards,
            "passed_on": self.passed_on,
            "moved_arguments": self.moved_arguments,
            "batch_calls": sorted(set(self.batch_calls)),
        }


def _slots(node: cst.Call) -> Iterator[tuple[int | str, cst.Arg]]:
    """Each argument with its slot: its keyword, or its position while no `*args` came before."""
    position: int | None = 0
    for arg in node.args:
        if arg.star:
            position = None if arg.star == "*" else position
            continue
        slot = arg.keyword.value if arg.keyword is not None else position
        if arg.keyword is None and position is not None:
            position += 1
        if slot is not None:
            yield slot, arg


def _note(table: dict[str, list[list[Any]]], parameter: Parameter) -> None:
    entry = [parameter.position, parameter.name]
    found = table.setdefault(parameter.function, [])
    if entry not in found:
        found.append(entry)
