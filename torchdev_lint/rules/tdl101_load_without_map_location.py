"""TDL101 load-without-map-location."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import argument, has_star, string, with_keyword


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
        Flags `torch.load(f)` calls that pass no `map_location`, neither by keyword, nor as the
        second positional argument, nor possibly through `**kwargs`.

        ## Why it matters
        Without `map_location`, every tensor is restored onto the device it was saved from. A
        checkpoint written on `cuda:3` fails to load on a laptop (`RuntimeError: Attempting to
        deserialize object on a CUDA device but torch.cuda.is_available() is False`), and on a
        multi-GPU box every process loads onto the GPU that saved it, piling memory onto one card.

        ## Example
        ```python
        state = torch.load("checkpoint.pt")
        ```

        ## Use instead
        ```python
        state = torch.load("checkpoint.pt", map_location="cpu")
        model.load_state_dict(state)
        model.to(device)
        ```

        ## Fix safety
        Safe: adds `map_location="cpu"`. Loading to the CPU works on every machine, and
        `load_state_dict` copies values into parameters wherever they live, so the model ends
        up where it was placed.
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

            def restore(model, path):
                model.load_state_dict(load(path))  # weights
            """,
            lines=(4,),
            fixed="""
            from torch import load

            def restore(model, path):
                model.load_state_dict(load(path, map_location="cpu"))  # weights
            """,
        ),
    )
    valid = (
        Valid(
            """
            import torch
            a = torch.load(path, map_location="cpu")
            b = torch.load(path, "cpu")
            c = torch.load(path, **load_kwargs)
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
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) != "torch.load":
            return
        if argument(node, 1, "map_location") is not None or has_star(node, "**"):
            return
        fixed = with_keyword(node, "map_location", string("cpu"))
        self.report(node, fix=Fix("safe", 'Add `map_location="cpu"`', {node: fixed}))
