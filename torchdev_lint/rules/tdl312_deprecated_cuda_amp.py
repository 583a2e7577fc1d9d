"""TDL312 deprecated-cuda-amp."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.scopes import module_reference
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import has_star, string

# Deprecated spelling → the class of `torch.amp` that replaces it.
_DEPRECATED = {
    "torch.cuda.amp.autocast": "autocast",
    "torch.cuda.amp.autocast_mode.autocast": "autocast",
    "torch.cuda.amp.GradScaler": "GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler": "GradScaler",
}
# `torch.cuda.amp.autocast(enabled, dtype, cache_enabled)` takes its arguments in
# another order than `torch.amp.autocast(device_type, dtype, enabled, cache_enabled)`,
# so positional ones become keywords. GradScaler's order is the same after `device`.
_AUTOCAST_PARAMS = ("enabled", "dtype", "cache_enabled")
_NO_SPACE = cst.SimpleWhitespace("")


class DeprecatedCudaAmp(Rule):
    code = "TDL312"
    name = "deprecated-cuda-amp"
    message = (
        "`torch.cuda.amp.{name}(...)` is deprecated and CUDA-only; "
        'use `torch.amp.{name}("cuda", ...)` (or your device type)'
    )
    fix_availability = "sometimes"
    triggers = ("amp",)
    docs = """
        ## What it does
        Flags calls of `torch.cuda.amp.autocast(...)` and `torch.cuda.amp.GradScaler(...)`,
        including when used as a decorator (`@torch.cuda.amp.autocast()`) and when imported under
        another name (`from torch.cuda.amp import autocast`). The import itself is not reported.

        ## Why it matters
        Both spellings are deprecated since PyTorch 2.4 and emit a `FutureWarning` on every use.
        They also bake CUDA into the code: the device-generic `torch.amp.autocast(device_type)`
        and `torch.amp.GradScaler(device)` accept a device type taken from your `torch.device`,
        so the same code runs mixed precision on CUDA, XPU, MPS or the CPU.

        ## Example
        ```python
        scaler = torch.cuda.amp.GradScaler()
        with torch.cuda.amp.autocast(dtype=torch.float16):
            loss = model(x)
        ```

        ## Use instead
        ```python
        scaler = torch.amp.GradScaler("cuda")
        with torch.amp.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        # device-generic: torch.amp.autocast(device.type, enabled=device.type == "cuda")
        ```

        ## Fix safety
        Safe: the deprecated classes are thin subclasses that call the `torch.amp` ones with
        `"cuda"`, so the rewrite runs the same code. Positional arguments of `autocast` become
        keywords (`autocast(True)` → `torch.amp.autocast("cuda", enabled=True)`) because the
        two signatures order them differently. The only difference: an omitted `dtype` means
        `torch.float16` in the old spelling and `torch.get_autocast_dtype("cuda")` (also
        `torch.float16` unless changed with `torch.set_autocast_dtype`) in the new one.
        The fix writes `torch.amp....`, so it is offered only where the name `torch` (or the
        alias the call already uses) is bound to the torch module; otherwise the finding
        comes without a fix. An import of the old name that becomes unused stays in place.
        """
    invalid = (
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            big = torch.cuda.amp.GradScaler(2.0**10, enabled=use_amp)
            with torch.cuda.amp.autocast(dtype=torch.bfloat16):
                loss = model(x)
            """,
            lines=(2, 3, 4),
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            big = torch.amp.GradScaler("cuda", 2.0**10, enabled=use_amp)
            with torch.amp.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            """,
        ),
        Invalid(
            """
            import torch
            from torch.cuda.amp import autocast, GradScaler

            class Net(torch.nn.Module):
                @autocast()
                def forward(self, x):
                    return x

            with autocast(False, torch.float16):
                pass
            scaler = GradScaler(
                enabled=True,
            )
            """,
            lines=(5, 9, 11),
            fixed="""
            import torch
            from torch.cuda.amp import autocast, GradScaler

            class Net(torch.nn.Module):
                @torch.amp.autocast("cuda")
                def forward(self, x):
                    return x

            with torch.amp.autocast("cuda", enabled=False, dtype=torch.float16):
                pass
            scaler = torch.amp.GradScaler(
                "cuda",
                enabled=True,
            )
            """,
        ),
        Invalid(
            """
            import torch as T
            with T.cuda.amp.autocast(enabled=True):
                pass
            """,
            lines=(2,),
            fixed="""
            import torch as T
            with T.amp.autocast("cuda", enabled=True):
                pass
            """,
        ),
        Invalid(
            # `torch` is not bound: a rewrite to `torch.amp...` would not run.
            """
            from torch.cuda.amp import autocast
            with autocast():
                pass
            """,
            lines=(2,),
        ),
        Invalid(
            # `*args` cannot be mapped onto the new parameter order.
            """
            import torch
            ctx = torch.cuda.amp.autocast(*options)
            """,
            lines=(2,),
        ),
    )
    valid = (
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.amp.autocast("cuda", dtype=torch.float16):
                pass
            with torch.autocast(device_type="cuda"):
                pass
            """
        ),
        Valid(
            # The import alone is not a finding.
            """
            from torch.cuda.amp import autocast
            """
        ),
        Valid(
            """
            from contextlib import nullcontext as autocast
            with autocast():
                pass
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        new_name = _DEPRECATED.get(self.ctx.qualname(node.func) or "")
        if new_name is None:
            return
        message = self.message.format(name=new_name)
        torch_ref = module_reference(self.ctx.scope, "torch")
        args = None if torch_ref is None else _new_arguments(node, new_name)
        if torch_ref is None or args is None:
            self.report(node, message=message)
            return
        func = cst.Attribute(
            value=cst.Attribute(value=torch_ref, attr=cst.Name("amp")), attr=cst.Name(new_name)
        )
        fixed = node.with_changes(func=func, args=args)
        self.report(
            node, message=message, fix=Fix("safe", f'Use `torch.amp.{new_name}("cuda", ...)`', {node: fixed})
        )


def _new_arguments(call: cst.Call, new_name: str) -> list[cst.Arg] | None:
    """`"cuda"` first, then the original arguments (autocast's positional ones as keywords)."""
    if has_star(call, "*"):
        return None
    rest = list(call.args)
    if new_name == "autocast":
        index = 0
        for i, arg in enumerate(rest):
            if arg.keyword is None and not arg.star:
                if index >= len(_AUTOCAST_PARAMS):
                    return None
                rest[i] = arg.with_changes(
                    keyword=cst.Name(_AUTOCAST_PARAMS[index]),
                    equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
                )
                index += 1
    device = cst.Arg(value=string("cuda"))
    if rest:
        separator = call.whitespace_before_args
        if not isinstance(separator, cst.ParenthesizedWhitespace):
            separator = cst.SimpleWhitespace(" ")
        device = device.with_changes(comma=cst.Comma(whitespace_after=separator))
    return [device, *rest]
