"""TDL101 load-without-map-location."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.checkpoints import LOADERS, Loader, UseIndex, path_key, saved_on_cpu
from torchdev_lint.analysis.flow import device_of
from torchdev_lint.analysis.flow_values import CPU
from torchdev_lint.analysis.scopes import Scope
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import argument, has_star, with_keyword

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


class LoadWithoutMapLocation(Rule):
    code = "TDL101"
    name = "load-without-map-location"
    message = (
        "`torch.load` without `map_location` restores tensors to the device they were saved on; "
        'pass `map_location="cpu"` (or your device)'
    )
    fix_availability = "sometimes"
    docs = """
        ## What it does
        Flags `torch.load(f)`, `torch.jit.load(f)` and `torch.hub.load_state_dict_from_url(url)`
        (also spelled `torch.utils.model_zoo.load_url`) calls that pass no `map_location`, neither
        by keyword nor positionally (second argument of `torch.load`/`torch.jit.load`, third of
        `load_state_dict_from_url`). Calls that unpack `*args` or `**kwargs` may carry one and are
        left alone, and so is a `torch.load` of a path that the same file writes with
        `torch.save` from host memory (`torch.save(feats.cpu(), path)`, the same path expression).

        ## Why it matters
        Without `map_location`, every tensor is restored onto the device it was saved from. A
        checkpoint written on `cuda:3` fails to load on a laptop (`RuntimeError: Attempting to
        deserialize object on a CUDA device but torch.cuda.is_available() is False`), and on a
        multi-GPU box every process loads onto the GPU that saved it, piling memory onto one card.

        ## Example
        ```python
        state = torch.load("checkpoint.pt")
        model.load_state_dict(state)
        ```

        ## Use instead
        ```python
        state = torch.load("checkpoint.pt", map_location="cpu")
        model.load_state_dict(state)
        model.to(device)
        ```

        ## Fix safety
        The fix adds `map_location="cpu"`. It is safe only where every use of the loaded value
        ends in a `x.load_state_dict(value)` call (without `assign=True`), directly or through
        items (`ckpt["model"]`, `ckpt.get(...)`, `ckpt.pop(...)`), names it is assigned to in the
        same function (`sd = sd["state_dict"]`), or a dict comprehension renaming its keys; uses
        that only test it (`"model" in ckpt`, `isinstance`, `len`, `.keys()`) and a dropped
        value do not count. `load_state_dict` copies the values into tensors that already live
        where the model was placed, so nothing the program sees changes. When the file itself
        defines a `load_state_dict` (which may keep the tensors as given) the fix is unsafe.

        Everywhere else the fix is unsafe: a pickled module, optimizer or tensor that is used,
        returned or handed to another call stays on the CPU where the code may expect it on the
        device it was saved from (`model = torch.load(p, weights_only=False); model(x_gpu)` then
        fails). `torch.jit.load`'s fix is always unsafe: the scripted module stays on the CPU.
        Inside an f-string where no quote character is legal, no fix is offered.
        """
    invalid = (
        Invalid(
            """
            import torch
            state = torch.load("ckpt.pt")
            """,
            lines=(2,),
            fixed="""
            import torch
            state = torch.load("ckpt.pt", map_location="cpu")
            """,
        ),
        Invalid(
            """
            import torch as T
            from torch import load as L
            a = T.load(path)
            b = L(
                path,
                weights_only=True,
            )
            """,
            lines=(3, 4),
            fixed="""
            import torch as T
            from torch import load as L
            a = T.load(path, map_location="cpu")
            b = L(
                path,
                weights_only=True,
                map_location="cpu",
            )
            """,
        ),
        Invalid(
            """
            from torch import load

            def restore(model, optimizer, path):
                model.load_state_dict(load(path))  # weights
                sd = load(path)
                if "state_dict" in sd:
                    sd = sd["state_dict"]
                model.load_state_dict({k.replace("module.", ""): v for k, v in sd.items()}, strict=False)
                optimizer.load_state_dict(load(path).get("optimizer"))
            """,
            lines=(4, 5, 9),
            fixed="""
            from torch import load

            def restore(model, optimizer, path):
                model.load_state_dict(load(path, map_location="cpu"))  # weights
                sd = load(path, map_location="cpu")
                if "state_dict" in sd:
                    sd = sd["state_dict"]
                model.load_state_dict({k.replace("module.", ""): v for k, v in sd.items()}, strict=False)
                optimizer.load_state_dict(load(path, map_location="cpu").get("optimizer"))
            """,
        ),
        # Unsafe fixes: a pickled model or optimizer would stay on the CPU.
        Invalid(
            """
            import torch

            def predict(path, x_gpu):
                model = torch.load(path, weights_only=False)
                model.eval()
                return model(x_gpu)

            def resume(model, path):
                ckpt = torch.load(path, weights_only=False)
                model.load_state_dict(ckpt["model"])
                optimizer = ckpt["optimizer"]
                return optimizer

            def read(path):
                return torch.load(path)
            """,
            lines=(4, 9, 15),
            fixed="""
            import torch

            def predict(path, x_gpu):
                model = torch.load(path, weights_only=False, map_location="cpu")
                model.eval()
                return model(x_gpu)

            def resume(model, path):
                ckpt = torch.load(path, weights_only=False, map_location="cpu")
                model.load_state_dict(ckpt["model"])
                optimizer = ckpt["optimizer"]
                return optimizer

            def read(path):
                return torch.load(path, map_location="cpu")
            """,
        ),
        Invalid(
            """
            import torch
            URL = "https://example.com/w.pth"
            scripted = torch.jit.load("model.ts")
            sd = torch.hub.load_state_dict_from_url(URL, "/tmp/hub")
            net.load_state_dict(sd)
            """,
            lines=(3, 4),
            fixed="""
            import torch
            URL = "https://example.com/w.pth"
            scripted = torch.jit.load("model.ts", map_location="cpu")
            sd = torch.hub.load_state_dict_from_url(URL, "/tmp/hub", map_location="cpu")
            net.load_state_dict(sd)
            """,
        ),
        # In an f-string the literal takes the quote that is legal there on Python 3.10;
        # where neither is, the finding has no fix.
        Invalid(
            """
            import torch
            path = "x.pt"
            print(f"{torch.load(path)}")
            """,
            lines=(3,),
            fixed="""
            import torch
            path = "x.pt"
            print(f"{torch.load(path, map_location='cpu')}")
            """,
        ),
        Invalid(
            """
            import torch
            print(f"{f'{torch.load(path)}'}")
            """,
            lines=(2,),
        ),
    )
    valid = (
        Valid(
            """
            import torch
            a = torch.load(path, map_location="cpu")
            b = torch.load(path, "cpu")
            c = torch.load(path, **load_kwargs)
            d = torch.load(*args)
            e = torch.load(path, *rest)
            f = torch.jit.load(path, "cpu")
            g = torch.hub.load_state_dict_from_url(url, None, "cpu")
            h = torch.hub.load_state_dict_from_url(url, map_location=device)
            """
        ),
        Valid(
            """
            import torch

            def load(path):
                return open(path).read()

            data = load("notes.txt")
            """
        ),
        Valid(
            """
            import pickle
            from json import load
            data = load(open("a.json"))
            obj = pickle.load(f)
            """
        ),
        Valid(
            """
            import torch

            def restore(path):
                torch = FakeTorch()
                return torch.load(path)
            """
        ),
        # The file writes this checkpoint itself, from host memory.
        Valid(
            """
            import os
            import torch

            def features(model, loader, cache_file):
                if os.path.exists(cache_file):
                    return torch.load(cache_file)
                feats = torch.cat([model(x) for x in loader])
                torch.save({"feats": feats.cpu(), "n": len(feats)}, cache_file)
                return feats

            def embed(self, batch):
                out = self.encoder(batch).detach().cpu()
                torch.save(out, self.out_path)
                return torch.load(self.out_path)
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # Judged once the whole file is known: a load may come before the save of its file,
        # and the fix's safety depends on every later use of the loaded value.
        self.loads: list[tuple[cst.Call, Loader, Scope]] = []
        self.paths_saved_on_cpu: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualname(node.func)
        if name == "torch.save":
            self._note_save(node)
            return
        loader = LOADERS.get(name or "")
        if loader is None or has_star(node, "*") or has_star(node, "**"):
            return  # unpacked arguments may carry a map_location
        if argument(node, loader.map_location_index, "map_location") is None:
            self.loads.append((node, loader, self.ctx.scope.owner))

    def _note_save(self, node: cst.Call) -> None:
        obj, path = argument(node, 0, "obj"), argument(node, 1, "f")
        if obj is None or path is None:
            return
        on_cpu = saved_on_cpu(obj.value, self.ctx.scope) or (
            isinstance(obj.value, cst.Name) and device_of(obj.value, self.ctx) == CPU
        )
        if on_cpu:
            self.paths_saved_on_cpu.add(path_key(path.value))

    def leave_scope(self, scope: Scope) -> None:
        if scope.kind != "module":
            return
        indexes: dict[int, UseIndex] = {}
        for call, loader, owner in self.loads:
            path = argument(call, 0, "f")
            if (
                loader.qualname == "torch.load"
                and path is not None
                and path_key(path.value) in self.paths_saved_on_cpu
            ):
                continue  # the file itself writes this checkpoint from host memory
            index = indexes.get(id(owner.node))
            if index is None:
                index = indexes[id(owner.node)] = UseIndex(owner.node)
            self.report(call, message=self._message(loader), fix=self._fix(call, loader, owner, index))

    def _message(self, loader: Loader) -> str:
        return self.message.replace("torch.load", loader.qualname, 1)

    def _fix(self, call: cst.Call, loader: Loader, owner: Scope, index: UseIndex) -> Fix | None:
        cpu = self.ctx.string("cpu", at=call)
        if cpu is None:
            return None  # inside an f-string that leaves no quote character legal
        safe = loader.qualname != "torch.jit.load" and index.ends_in_load_state_dict(call, owner)
        fixed = with_keyword(call, "map_location", cpu)
        return Fix("safe" if safe else "unsafe", 'Add `map_location="cpu"`', {call: fixed})
