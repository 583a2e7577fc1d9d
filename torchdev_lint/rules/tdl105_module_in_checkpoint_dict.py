"""TDL105 module-in-checkpoint-dict."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.project.parameters import passed_arguments
from torchdev_lint.analysis.provenance.checkpoint_saves import Slot, saved_dict_slots
from torchdev_lint.analysis.provenance.loaded_modules import (
    loaded_checkpoint,
    loads_used_as_modules,
    module_use_receiver,
    unmoved,
)
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name
from torchdev_lint.analysis.values.kinds import built_by_project_class, probably_module
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import argument, method_call

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# What may change where the fix is applied (the docs' "Fix safety").
_RISK = (
    "the checkpoint now holds a state dict there: code that loads it must build the module and call "
    "`load_state_dict`, while checkpoints saved before still hold the whole module"
)
_HANDED_MESSAGE = (
    "A whole module is passed to `{callee}`, which stores it in a checkpoint dict given to "
    "`torch.save`: it is pickled with its class path and devices; save its `state_dict()` "
    "instead and restore it with `load_state_dict`"
)


class ModuleInCheckpointDict(Rule):
    code = "TDL105"
    name = "module-in-checkpoint-dict"
    message = (
        "A whole module stored in a checkpoint dict is pickled with its class path and devices; "
        "store `model.state_dict()` and restore it with `load_state_dict`"
    )
    fix_availability = "sometimes"
    triggers = ("save", "load")
    fact_triggers = ("checkpointing",)  # a module handed to a project function that saves it
    docs = """
        ## What it does
        Flags `torch.save` of a dict (a literal, a `dict(...)` call, or a name bound to one) that
        holds a module object as a value (`{"model": model, "epoch": 3}`, `{"ema": deepcopy(model).half()}`,
        an instance of a module class another file of the project defines, or `ckpt["model"] = model`
        in the function that builds `ckpt`), reported at the `torch.save(` call; and a `torch.load(...)` whose item is used as a module
        (`torch.load(p)["model"].eval()`, `ckpt = torch.load(p)` then `ckpt["model"](x)` or
        `net = ckpt["model"]; net.cuda()`, `ckpt["model"].to(device).eval()`; a name rebound from the
        path it loads, `ckpt = torch.load(ckpt)`, counts), reported at the `torch.load(` call. The
        item may be taken with `.get("ema")`, as either of two (`ckpt.get("ema") or ckpt["model"]`)
        and moved or cast on the way; a name also bound to something else (`net = Net()` before,
        `ckpt = ckpt["model"]` from the checkpoint to its item) counts at the uses that straight-line
        code reaches from the item. In a notebook, the code cells are one program: the load in one
        cell and the item's use in another are the same finding. An item only handed to
        `load_state_dict`, read (`ckpt["model"].yaml`), or moved without another module use (a
        tensor: `ckpt["scale"].to(d)`) is left alone.
        Across functions and files (project analysis): a module passed to a
        project function that stores that parameter as a value of a dict it gives to
        `torch.save` (`save_checkpoint(model, optimizer, path)` with `utils.save_checkpoint`
        saving `{"model": model, ...}`), reported at the call; a parameter the helper's own
        check already reports (named or annotated like a module) is reported there only.

        ## Why it matters
        A checkpoint dict looks like the portable format, but a module inside it is pickled whole:
        the file loads only where the model's class is importable under the same path, only with
        `weights_only=False` (which runs arbitrary code from the file), and with its tensors on the
        device they were saved from. The reader that takes `ckpt["model"]` out and uses it as a
        module depends on all three even when the file was written by another program (a
        released checkpoint): that load is where the format is chosen for it, so it is reported too.

        ## Example
        ```python
        torch.save({"model": model, "optimizer": optimizer.state_dict(), "epoch": epoch}, path)

        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        model = ckpt["model"]  # the pickled module, taken out of the dict
        model.cuda()
        ```

        ## Use instead
        ```python
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)

        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(ckpt["model"])
        ```

        ## Fix safety
        Never safe: the save side is rewritten to store `model.state_dict()` in the dict, which
        changes what the file holds; every reader of the checkpoint must then build the model and
        call `load_state_dict`, while checkpoints saved before still hold the whole module, so
        the fix is always unsafe (its message says so). The load side has no fix (the model's
        class and constructor arguments are not known there), and neither has a call that hands
        a module to a checkpointing helper (what else the helper does with it is not known there).
        """
    invalid = (
        Invalid(
            # A copy of the model, cast for a smaller file: still the whole module.
            """
            from copy import deepcopy
            import torch

            def snapshot(model, epoch, path):
                torch.save({"epoch": epoch, "model": deepcopy(model).half()}, path)
            """,
            lines=(5,),
            fixed="""
            from copy import deepcopy
            import torch

            def snapshot(model, epoch, path):
                torch.save({"epoch": epoch, "model": deepcopy(model).half().state_dict()}, path)
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            model = nn.Linear(4, 2)
            torch.save({"model": model, "epoch": 3, "w": torch.zeros(2)}, "ckpt.pt")
            torch.save(dict(model=model, step=1), "ckpt.pt")
            """,
            lines=(5, 6),
            fixed="""
            import torch
            import torch.nn as nn

            model = nn.Linear(4, 2)
            torch.save({"model": model.state_dict(), "epoch": 3, "w": torch.zeros(2)}, "ckpt.pt")
            torch.save(dict(model=model.state_dict(), step=1), "ckpt.pt")
            """,
        ),
        Invalid(
            """
            import torch as T

            def checkpoint(model, ema_model, optimizer, epoch, path):
                state = {
                    "model": model,  # the network
                    "ema": ema_model,
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                }
                T.save(state, path)
            """,
            lines=(10,),
            fixed="""
            import torch as T

            def checkpoint(model, ema_model, optimizer, epoch, path):
                state = {
                    "model": model.state_dict(),  # the network
                    "ema": ema_model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                }
                T.save(state, path)
            """,
        ),
        Invalid(
            """
            import torch

            def predict(path, x):
                ckpt = torch.load(path, weights_only=False)
                ckpt["model"].eval()
                return ckpt["model"](x)

            def predict_again(path, x):
                net = torch.load(path, weights_only=False)["net"]
                net.eval()
                return torch.load(path)["net"](x)
            """,
            lines=(4, 9, 11),
        ),
        # A checkpoint dict filled item by item before it is saved.
        Invalid(
            """
            import torch

            def save_checkpoint(model, optimizer, path):
                ckpt = {}
                ckpt["model"] = model
                ckpt["optimizer"] = optimizer.state_dict()
                torch.save(ckpt, path)
            """,
            lines=(7,),
            fixed="""
            import torch

            def save_checkpoint(model, optimizer, path):
                ckpt = {}
                ckpt["model"] = model.state_dict()
                ckpt["optimizer"] = optimizer.state_dict()
                torch.save(ckpt, path)
            """,
        ),
        # Items taken with `.get`, one of two, or into a name that held something else.
        Invalid(
            """
            import torch
            from torch import nn

            def serve(bundle_path, feats):
                bundle = torch.load(bundle_path, map_location="cpu", weights_only=False)
                head = nn.Linear(3, 3)
                head = bundle["head"]
                head.cuda()
                return head(feats)

            def ensemble(bundle_path, feats):
                bundle = torch.load(bundle_path, map_location="cpu", weights_only=False)
                bundle = (bundle.get("swa") or bundle["ranker"]).to("cpu").float()
                bundle.eval()
                return torch.load(bundle_path, weights_only=False)["scorer"].forward(feats)
            """,
            lines=(5, 12, 15),
        ),
        # A name rebound from the path to the loaded checkpoint is the checkpoint.
        Invalid(
            """
            import torch

            def build(ckpt, device):
                ckpt = torch.load(ckpt, map_location="cpu", weights_only=False)
                decoder = ckpt["decoder"].to(device).eval()
                return decoder
            """,
            lines=(4,),
        ),
    )
    valid = (
        Valid(
            """
            import torch

            def checkpoint(model, optimizer, loss, path):
                torch.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "loss": loss,
                        "weights": torch.ones(3),
                        "epoch": 3,
                    },
                    path,
                )
            """
        ),
        Valid(
            """
            import torch

            def restore(model, path):
                ckpt = torch.load(path, map_location="cpu")
                model.load_state_dict(ckpt["model"])
                model.eval()
                state = torch.load(path)["state_dict"]
                model.load_state_dict(state)
            """
        ),
        # Items that are state dicts, read, or moved like tensors: not used as modules.
        Valid(
            """
            import torch

            def warm(head, bundle_path):
                head.load_state_dict(torch.load(bundle_path, map_location="cpu")["head"])
                bundle = torch.load(bundle_path, map_location="cpu")
                head.load_state_dict(bundle.get("swa") or bundle["head"])
                scale = bundle["scale"].to("cpu")
                labels = bundle["head"].classes
                head.eval()
                return scale, labels
            """
        ),
        # The parameter is a module unless the path branch replaced it: not the loaded object.
        Valid(
            """
            import torch

            def build(decoder, path, device):
                if isinstance(decoder, str):
                    decoder = torch.load(path)["decoder"]
                decoder.to(device).eval()
                return decoder
            """
        ),
        Valid(
            """
            import torch

            def save(args, model_state, path):
                torch.save({"model": args.model, "state": model_state, "name": "resnet"}, path)
                model = {"w": torch.zeros(2)}
                torch.save({"model": model}, path)
            """
        ),
        Valid(
            """
            import torch

            def save_checkpoint(model, ema, path):
                ckpt = {"epoch": 3}
                ckpt["model"] = model.state_dict()
                ckpt["ema"] = ema.module.state_dict() if ema else None
                torch.save(ckpt, path)
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # Judged when their scope has been traversed: module evidence includes later uses.
        self.saves: list[tuple[cst.Call, list[Slot], Scope]] = []
        # Calls of a project function that stores these arguments in a saved dict (project facts).
        self.handed: list[tuple[cst.Call, str, list[cst.Arg], Scope]] = []
        self.load_scopes: set[Scope] = set()
        self.item_uses: dict[Scope, list[cst.BaseExpression]] = defaultdict(list)

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualname(node.func)
        scope = self.ctx.scope
        if name == "torch.save":
            arg = argument(node, 0, "obj")
            slots = saved_dict_slots(arg.value, scope) if arg is not None else []
            if slots:
                self.saves.append((node, slots, scope))
            return
        if name == "torch.load":
            self.load_scopes.add(scope.owner)
            return
        facts = self.ctx.project
        callee = dotted_name(node.func) if facts is not None else None
        if facts is not None and callee is not None:
            stored = passed_arguments(node, facts.checkpointed(callee))
            if stored:
                self.handed.append((node, callee, stored, scope))
        receiver = module_use_receiver(node, isinstance(self.ctx.parent(), cst.Expr))
        loaded = loaded_checkpoint(receiver, scope)
        if loaded is not None:
            if loaded[1]:
                self.report(loaded[0])
        else:
            receiver = unmoved(receiver)  # `ckpt["model"].to(device).eval()` uses the item
            if isinstance(receiver, cst.Subscript) and dotted_name(receiver.value) is not None:
                self.item_uses[scope.owner].append(receiver.value)

    def leave_scope(self, scope: Scope) -> None:
        self._decide()

    def _decide(self) -> None:
        """Judge the saves and loads of the scope being left, now that all its uses are known."""
        current = self.ctx.scope
        waiting = []
        for call, slots, scope in self.saves:
            if scope.owner is not current:
                waiting.append((call, slots, scope))
                continue
            project = self.ctx.project
            modules = [
                slot
                for slot in slots
                if probably_module(slot.value, scope) or built_by_project_class(slot.value, scope, project)
            ]
            if modules:
                replacements: dict[cst.CSTNode, cst.CSTNode] = {
                    slot: slot.with_changes(value=method_call(slot.value, "state_dict")) for slot in modules
                }
                self.report(call, fix=Fix("unsafe", "Store `state_dict()` instead", replacements, _RISK))
        self.saves = waiting
        handed = []
        for call, callee, args, scope in self.handed:
            if scope.owner is not current:
                handed.append((call, callee, args, scope))
            elif any(probably_module(arg.value, scope) for arg in args):
                self.report(call, message=_HANDED_MESSAGE.format(callee=callee))
        self.handed = handed
        if current in self.load_scopes:
            self.load_scopes.discard(current)
            for call, item in loads_used_as_modules(current, self.item_uses.pop(current, [])):
                if item:
                    self.report(call)
