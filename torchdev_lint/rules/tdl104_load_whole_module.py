"""TDL104 load-whole-module."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.provenance.loaded_modules import (
    ALLOW_LIST_CALLS,
    ALLOW_LIST_CONTEXTS,
    loaded_checkpoint,
    loads_used_as_modules,
    module_use_receiver,
    unmoved,
    unpickles_anything,
)
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name
from torchdev_lint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


ALLOW_LISTED_MESSAGE = (
    "`torch.load` result used as a module: even with its class allow-listed (`safe_globals`, "
    "`add_safe_globals`) the module is pickled whole and loads only where its class lives at the same "
    "import path; build the model and `load_state_dict` a saved state_dict instead"
)


class LoadWholeModule(Rule):
    code = "TDL104"
    name = "load-whole-module"
    message = (
        "`torch.load` result used as a module: a pickled module needs `weights_only=False` and the "
        "original code; build the model and `load_state_dict` a saved state_dict instead"
    )
    triggers = ("load",)
    docs = """
        ## What it does
        Flags a `torch.load(...)` call whose result is used as a module: called (`torch.load(p)(x)`),
        or given `.eval()`, `.train()`, `.parameters()`, `.forward()` and other methods only modules
        have, or moved by a bare `model.to(device)` statement, or declared a module
        (`net: nn.Module = torch.load(p)`); directly or through a name that is
        bound only to `torch.load` results in the function (a name rebound from the path it
        loads, `ckpt = torch.load(ckpt)`, counts), or through a name that is also bound to
        something else (the module it was built as, saved just before) at a use that
        straight-line code reaches from the load (`model = torch.load(p)`, then `model.eval()`).
        A use reached through a branch that may bind the name otherwise (`if model is None:
        model = torch.load(p)`) is not known to read the load, and a load only moved
        (`x = torch.load(p).to(d)`) may be a tensor: both are left alone. Allow-listing the class
        for `weights_only=True` loads (under `with torch.serialization.safe_globals([...]):`, or
        with `torch.serialization.add_safe_globals([...])` anywhere in the file) changes only the
        message: the module is still pickled whole. Reported at the `torch.load(` call.

        ## Why it matters
        A whole pickled module loads only with `weights_only=False`, which executes arbitrary code
        from the file (and is no longer the default since PyTorch 2.6), only where its class is
        importable under the same path, and with every tensor on the device it was saved from.
        Allow-listing the class (`add_safe_globals([Net])`) lets a `weights_only=True` load
        through, but only the first problem goes: the file still needs the class at the same
        import path and keeps the saved devices. Loading a `state_dict` into a freshly built
        model avoids all three.

        ## Example
        ```python
        model = torch.load("model.pt", weights_only=False)
        model.eval()

        torch.serialization.add_safe_globals([Net])
        net = Net()
        net = torch.load("net.pt", weights_only=True)  # replaces the built module
        net.to(device)
        ```

        ## Use instead
        ```python
        model = Net()
        model.load_state_dict(torch.load("model.pt", map_location="cpu", weights_only=True))
        model.to(device).eval()
        ```

        ## Fix safety
        No fix: the model's class and constructor arguments are not known here, and the file
        must be re-saved as a `state_dict` (see TDL103).
        """
    invalid = (
        Invalid(
            """
            import torch
            model = torch.load("model.pt", weights_only=False)
            model.eval()
            y = torch.load(path)(x)
            torch.load(path, weights_only=False).to(device).eval()
            """,
            lines=(2, 4, 5),
        ),
        # Declared a module where it is bound, then only its state taken.
        Invalid(
            """
            import torch

            def restore(policy, path, device):
                loaded: torch.nn.Module = torch.load(path, map_location=device)
                policy.load_state_dict(loaded.state_dict())
            """,
            lines=(4,),
        ),
        Invalid(
            """
            import torch as T

            def predict(path, x, device):
                net = T.load(path, map_location="cpu")
                net = net.to(device)
                return net(x)

            def describe(path, device):
                m = T.load(path)
                m.to(device)
                return sum(p.numel() for p in m.parameters())

            class Runner:
                def setup(self, path):
                    self.model = T.load(path)
                    self.model.forward(None)
            """,
            lines=(4, 9, 15),
        ),
        # Allow-listing the class makes the load work with `weights_only=True`; the module is
        # still pickled whole.
        Invalid(
            """
            import torch
            from torch.serialization import safe_globals

            def predict(path, x):
                with torch.serialization.safe_globals([Net]):
                    model = torch.load(path, weights_only=True)
                model.eval()
                with safe_globals([Net]):
                    return torch.load(path)(x)
            """,
            lines=(6, 9),
        ),
        # Built, saved whole, then reopened into the same name (TDL103 reports the save), or
        # allow-listed for the whole process: the uses after the load read the pickled module.
        Invalid(
            """
            import torch
            from torch import nn
            from torch.serialization import add_safe_globals

            class Scorer(nn.Module):
                def forward(self, x):
                    return x.sum()

            def roundtrip(dest, batch):
                scorer = Scorer()
                torch.save(scorer, dest)
                scorer = torch.load(dest, weights_only=False)
                scorer.eval()
                return scorer(batch)

            def reopen(dest):
                add_safe_globals([Scorer])
                ranker = nn.Identity()
                ranker = torch.load(dest, weights_only=True)
                ranker = ranker.to("cpu")
                return list(ranker.parameters())
            """,
            lines=(12, 19),
        ),
        # A name rebound from the path to the loaded object is the loaded object.
        Invalid(
            """
            import torch

            def predict(ckpt, x):
                ckpt = torch.load(ckpt, weights_only=False)
                ckpt.eval()
                return ckpt(x)

            def evaluate(path, x):
                model = "model.pt"
                model = torch.load(model, weights_only=False)
                model.to("cuda").eval()
            """,
            lines=(4, 10),
        ),
    )
    valid = (
        Valid(
            """
            import torch

            def restore(model, path):
                ckpt = torch.load(path, map_location="cpu")
                model.load_state_dict(ckpt["state_dict"])
                model.load_state_dict(torch.load(path))
                model.eval()
            """
        ),
        Valid(
            """
            import torch

            def tensors(path, device):
                t = torch.load(path).to(device)
                u = torch.load(path)
                u = u.to(device)
                return t + u
            """
        ),
        Valid(
            """
            import torch

            def either(path, fallback):
                model = torch.load(path)
                if isinstance(model, dict):
                    model = fallback
                model.eval()
            """
        ),
        Valid(
            """
            import torch

            def load(path):
                return object()

            load("m.pt").eval()
            """
        ),
        # The module use reads what the name held before the load, or a value a branch may
        # have replaced: not known to be the loaded object.
        Valid(
            """
            import torch
            from torch import nn

            def refit(dest):
                probe = nn.Linear(4, 4)
                probe.eval()
                probe = torch.load(dest, map_location="cpu")
                return probe["weight"]

            def maybe_reload(dest, fresh):
                head = fresh
                if dest:
                    head = torch.load(dest, map_location="cpu")
                head.train()
            """
        ),
        # `model` may be a module passed in: only the load into it is the loaded object.
        Valid(
            """
            import torch

            def evaluate(model, path, x):
                if model is None:
                    model = torch.load(path)
                model.eval()
                return model(x)
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.load_scopes: set[Scope] = set()
        self.allow_listed: set[cst.Call] = set()
        # Whether the file allow-lists classes for the whole process: then every load may be.
        self.allow_lists = False
        # Loads used as modules, reported when the file has been traversed (the message says
        # whether the file allow-lists classes, possibly below the load).
        self.found: list[cst.Call] = []
        self.moved_uses: dict[Scope, list[cst.BaseExpression]] = defaultdict(list)

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualname(node.func)
        if name == "torch.load":
            self.load_scopes.add(self.ctx.scope.owner)
            if self._in_safe_globals():
                self.allow_listed.add(node)
            return
        if name in ALLOW_LIST_CALLS:
            self.allow_lists = True
        receiver = module_use_receiver(node, isinstance(self.ctx.parent(), cst.Expr))
        loaded = loaded_checkpoint(receiver, self.ctx.scope)
        if loaded is not None:
            if not loaded[1]:
                self.found.append(loaded[0])
            return
        base = unmoved(receiver)
        if base is not receiver and dotted_name(base) is not None:
            self.moved_uses[self.ctx.scope.owner].append(base)  # `model.to(d).eval()`

    def _in_safe_globals(self) -> bool:
        """Inside `with torch.serialization.safe_globals([...]):`."""
        return any(
            isinstance(node, cst.With)
            and any(
                isinstance(item.item, cst.Call) and self.ctx.qualname(item.item.func) in ALLOW_LIST_CONTEXTS
                for item in node.items
            )
            for node in self.ctx.ancestors
        )

    def leave_scope(self, scope: Scope) -> None:
        self._decide()
        if scope.kind == "module":
            for call in self.found:
                allowed = call in self.allow_listed or (self.allow_lists and not unpickles_anything(call))
                self.report(call, message=ALLOW_LISTED_MESSAGE if allowed else None)
            self.found = []

    def _decide(self) -> None:
        """Names bound to loads, judged by their uses once the scope has been traversed."""
        scope = self.ctx.scope
        if scope not in self.load_scopes:
            return
        self.load_scopes.discard(scope)
        for call, item in loads_used_as_modules(scope, module_uses=self.moved_uses.pop(scope, [])):
            if not item:
                self.found.append(call)
