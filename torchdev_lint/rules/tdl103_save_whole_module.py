"""TDL103 save-whole-module."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.syntax.reaching_bindings import parents_along
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.analysis.values.kinds import built_by_project_class, saved_module
from torchdev_lint.rule import Fix, Invalid, ProjectExample, Rule, Valid
from torchdev_lint.syntax import argument, method_call

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# What may change where the fix is applied (the docs' "Fix safety").
_RISK = (
    "the file now holds a state dict: code that loads it must build the module and call "
    "`load_state_dict`, while files saved before still load as whole modules"
)


class SaveWholeModule(Rule):
    code = "TDL103"
    name = "save-whole-module"
    message = (
        "`torch.save` of a whole module pickles its class by import path and its tensors' devices; "
        "save `model.state_dict()` instead"
    )
    fix_availability = "sometimes"
    triggers = ("save",)
    docs = """
        ## What it does
        Flags `torch.save(obj, f)` where `obj` is an `nn.Module` instance: built from an `nn.Module`
        subclass (`torch.nn.*`, a class of the file deriving from `nn.Module` or, with the project's
        facts, one imported from another file of the project, a `torchvision.models` factory; also
        moved, cast or copied: `model.cpu()`, `deepcopy(model)`), used as a module in the same function (`.eval()`,
        `.parameters()`, a bare `model.to(device)` statement...), or named like one (`model`,
        `net`, `self.model`, `teacher_model`) and bound to nothing that is a dict, a tensor or a
        `state_dict()`. A parameter named like a model that the function
        reads as a dict or tensor (a string key, `model["infos"]`; a dict or tensor method,
        `model.items()`), or passes to a function of the same file that does, is data, not a
        module: its save is left alone. A module built in the function is flagged all the same.

        A `torch.load` result saved again (`model = torch.load(p)`, then `torch.save(model, out)`:
        often a dict being converted) is left alone, but only that: a name bound to a module built
        in the program (`nn.Sequential(...)`, a class of the file) is flagged where that module
        reaches the save, even when the name is also bound to a `torch.load` result, later (the
        file reopened after the save) or in another branch (`model = torch.load(p) if resume else
        Net()` written as an `if`). Where straight-line code shows which binding reaches the save,
        that binding decides.

        ## Why it matters
        Saving a module pickles the object: its class is stored by import path, so the file only
        loads where the same code lives at the same place, and every parameter keeps the device
        it was on, so a model saved from `cuda:0` needs that GPU to load (or a `map_location`).
        Loading a pickled module also needs `weights_only=False`, which runs arbitrary code from
        the file. A `state_dict` is plain tensors keyed by name: portable, device-independent
        through `map_location`, and loadable with `weights_only=True`.

        ## Example
        ```python
        model = Net().to(device)
        train(model)
        torch.save(model, "model.pt")
        model = torch.load("model.pt", weights_only=False)  # does not hide the save above
        ```

        ## Use instead
        ```python
        torch.save(model.state_dict(), "model.pt")

        model = Net()
        model.load_state_dict(torch.load("model.pt", map_location="cpu", weights_only=True))
        model.to(device)
        ```

        ## Fix safety
        Never safe: the fix saves `obj.state_dict()` instead of the module, which changes what the
        file holds; every reader of the file (often in another program) must then build the model
        and call `load_state_dict`, while files saved before still load as whole modules, so the
        fix is always unsafe (its message says so). It writes no string and no name
        other than the saved expression's own, so it is valid wherever it lands (f-strings
        included).
        """
    invalid = (
        Invalid(
            # What the saved expression is of the same kind as: a move, a DDP unwrap.
            """
            import torch

            def export(net, path):
                torch.save(net.cpu(), path)

            def checkpoint(model, path):
                torch.save(model.module if hasattr(model, "module") else model, path)
            """,
            lines=(4, 7),
            fixed="""
            import torch

            def export(net, path):
                torch.save(net.cpu().state_dict(), path)

            def checkpoint(model, path):
                torch.save((model.module if hasattr(model, "module") else model).state_dict(), path)
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def forward(self, x):
                    return x

            net = Net()
            torch.save(net, "net.pt")
            torch.save(nn.Linear(2, 2), path)
            """,
            lines=(9, 10),
            fixed="""
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def forward(self, x):
                    return x

            net = Net()
            torch.save(net.state_dict(), "net.pt")
            torch.save(nn.Linear(2, 2).state_dict(), path)
            """,
        ),
        Invalid(
            """
            from torch import save as S
            from torchvision.models import resnet18

            def export(path):
                backbone = resnet18()
                S(obj=backbone, f=path)
            """,
            lines=(6,),
            fixed="""
            from torch import save as S
            from torchvision.models import resnet18

            def export(path):
                backbone = resnet18()
                S(obj=backbone.state_dict(), f=path)
            """,
        ),
        Invalid(
            """
            import torch as T

            def finish(clf, device, path):
                clf.eval()
                T.save(clf, path)

            def finish_moved(enc, device, path):
                enc.to(device)
                T.save(enc, path)
            """,
            lines=(5, 9),
            fixed="""
            import torch as T

            def finish(clf, device, path):
                clf.eval()
                T.save(clf.state_dict(), path)

            def finish_moved(enc, device, path):
                enc.to(device)
                T.save(enc.state_dict(), path)
            """,
        ),
        Invalid(
            """
            import torch

            def save(model, path):
                torch.save(model, path)

            class Trainer:
                def checkpoint(self, path):
                    torch.save(self.model, path)
                    torch.save(self.model.module, path + ".inner")
            """,
            lines=(4, 8, 9),
            fixed="""
            import torch

            def save(model, path):
                torch.save(model.state_dict(), path)

            class Trainer:
                def checkpoint(self, path):
                    torch.save(self.model.state_dict(), path)
                    torch.save(self.model.module.state_dict(), path + ".inner")
            """,
        ),
        # Read with an integer index, or built as a module: the string key does not make it a dict.
        Invalid(
            """
            import torch
            from torch import nn

            def upload(model, path):
                torch.save(model, path)
                describe(model)

            def describe(model):
                print(model.num_layers, model[0])

            def export(path):
                model = nn.ModuleDict({"encoder": nn.Linear(2, 2)})
                model["encoder"].eval()
                torch.save(model, path)
            """,
            lines=(5, 14),
            fixed="""
            import torch
            from torch import nn

            def upload(model, path):
                torch.save(model.state_dict(), path)
                describe(model)

            def describe(model):
                print(model.num_layers, model[0])

            def export(path):
                model = nn.ModuleDict({"encoder": nn.Linear(2, 2)})
                model["encoder"].eval()
                torch.save(model.state_dict(), path)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            def export(device, path):
                clf = nn.Linear(2, 2)
                clf = clf.to(device)
                torch.save(clf, path)
            """,
            lines=(7,),
            fixed="""
            import torch
            from torch import nn

            def export(device, path):
                clf = nn.Linear(2, 2)
                clf = clf.to(device)
                torch.save(clf.state_dict(), path)
            """,
        ),
        # A module built here, then reopened from the file (or loaded in another branch): the
        # load does not say what the built module is.
        Invalid(
            """
            import torch
            from torch import nn

            class Pooler(nn.Module):
                def forward(self, x):
                    return x.mean(1)

            def snapshot_then_reopen(dest):
                stack = nn.Sequential(nn.Conv1d(1, 4, 3), nn.GELU())
                torch.save(stack, dest)
                stack = torch.load(dest, weights_only=False)
                return stack

            def warm_start(resume, dest):
                if resume:
                    pool = torch.load(dest, map_location="cpu", weights_only=False)
                else:
                    pool = Pooler()
                torch.save(pool, dest)
            """,
            lines=(10, 19),
            fixed="""
            import torch
            from torch import nn

            class Pooler(nn.Module):
                def forward(self, x):
                    return x.mean(1)

            def snapshot_then_reopen(dest):
                stack = nn.Sequential(nn.Conv1d(1, 4, 3), nn.GELU())
                torch.save(stack.state_dict(), dest)
                stack = torch.load(dest, weights_only=False)
                return stack

            def warm_start(resume, dest):
                if resume:
                    pool = torch.load(dest, map_location="cpu", weights_only=False)
                else:
                    pool = Pooler()
                torch.save(pool.state_dict(), dest)
            """,
        ),
    )
    valid = (
        # Named like a model, but a dict: an `OrderedDict` filled with renamed keys, an item of a
        # loaded checkpoint (its name alone says nothing of what the file held).
        Valid(
            """
            from collections import OrderedDict
            import torch

            def drop_prefix(weights, dest):
                net = OrderedDict()
                for key, value in weights.items():
                    net[key.removeprefix("backbone.")] = value
                torch.save(net, dest)

            def keep_weights(src, dest):
                model = torch.load(src, map_location="cpu")["weights"]
                torch.save(model, dest)
                ckpt = torch.load(src, map_location="cpu")
                teacher_model = ckpt.get("teacher")
                torch.save(teacher_model, dest)
            """
        ),
        # What reaches the save is the load itself: a file re-saved, whatever the name held before.
        Valid(
            """
            import torch
            from torch import nn

            def repack(sources, dest):
                head = nn.Linear(8, 1)
                head.eval()
                for src in sources:
                    head = torch.load(src, map_location="cpu")
                    torch.save(head, dest)

            def shrink(src, dest):
                blob = nn.Identity()
                blob = torch.load(src, map_location="cpu")
                torch.save(blob, dest)
            """
        ),
        Valid(
            """
            import torch

            def save(model, path):
                torch.save(model.state_dict(), path)
                torch.save({"model": model.state_dict(), "epoch": 3}, path)
            """
        ),
        Valid(
            """
            import torch

            def save(optimizer, scheduler, path):
                optimizer.zero_grad()
                torch.save(optimizer, path)
                scheduler.step()
                torch.save(scheduler.state_dict(), path)
            """
        ),
        Valid(
            """
            import torch

            weights = torch.zeros(3)
            weights.to("cuda")  # a tensor: TDL306's business, not a module
            torch.save(weights, "w.pt")
            model = {"layer": torch.ones(2)}
            torch.save(model, "m.pt")
            """
        ),
        Valid(
            """
            import torch

            def export(model, path):
                model = model.state_dict()
                torch.save(model, path)

            def convert(path, out):
                model = torch.load(path)
                torch.save(model, out)

            def tensor(model, out):
                print(model.size())
                torch.save(model, out)
            """
        ),
        Valid(
            """
            import torch

            def save(args, cfg, model_path, model_state, model_dir, path):
                torch.save(args.model, path)
                torch.save(cfg.net, path)
                torch.save(model_state, model_path)
                torch.save(model_dir, path)
            """
        ),
        Valid(
            """
            import torch

            def save(model: dict, net: torch.Tensor, path):
                torch.save(model, path)
                torch.save(net, path)

            class Saver:
                def __init__(self):
                    self.model = {"w": torch.zeros(2)}

                def save(self, path):
                    torch.save(self.model, path)
            """
        ),
        # A "model" read with string keys, here or by the function it is passed to: a dict.
        Valid(
            """
            import torch

            def upload(model, token, model_path=None):
                if model_path is None:
                    model_path = "tmp.pth"
                    torch.save(model, model_path)
                metadata = make_metadata(model)
                return send(token, metadata, model_path)

            def make_metadata(model):
                infos = model["infos"]
                return {"title": infos["name"], "task": model["task"]}

            def publish(model, path):
                model["infos"]["uploader"] = "me"
                torch.save(model, path)
            """
        ),
        Valid(
            """
            from torch import save

            def save(obj, path):  # shadows torch's
                print(obj, path)

            save(model, "model.txt")
            """
        ),
    )

    projects = (
        # A module class another file of the project defines is known as the file's own are; a
        # class of the project that is no module is not.
        ProjectExample(
            {
                "pyproject.toml": "",
                "nets.py": """
                    from torch import nn

                    class Encoder(nn.Module):
                        def forward(self, x):
                            return x

                    class Vocabulary:
                        pass
                """,
                "export.py": """
                    import torch
                    from nets import Encoder, Vocabulary

                    def export(out):
                        encoder = Encoder()
                        torch.save(encoder, out + "/encoder.pt")
                        torch.save(Vocabulary(), out + "/vocab.pt")
                """,
            },
            findings=("export.py:6",),
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # Saves waiting for their scope to be traversed: module evidence includes later uses.
        # Each with the parents of the saved object up to the file (which binding reaches it).
        self.pending: list[tuple[cst.Call, cst.Arg, Scope, Callable[[cst.CSTNode], cst.CSTNode | None]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) != "torch.save":
            return
        arg = argument(node, 0, "obj")
        if arg is not None:
            parent = parents_along([*self.ctx.ancestors, arg, arg.value])
            self.pending.append((node, arg, self.ctx.scope, parent))

    def leave_scope(self, scope: Scope) -> None:
        self._decide()

    def _decide(self) -> None:
        """Judge the saves of the scope being left, now that all its uses are known."""
        current = self.ctx.scope
        waiting = []
        for call, arg, scope, parent in self.pending:
            if scope.owner is not current:
                waiting.append((call, arg, scope, parent))
            elif saved_module(arg.value, scope, parent) or built_by_project_class(
                arg.value, scope, self.ctx.project
            ):
                fixed = arg.with_changes(value=method_call(arg.value, "state_dict"))
                self.report(call, fix=Fix("unsafe", "Save `state_dict()` instead", {arg: fixed}, _RISK))
        self.pending = waiting
