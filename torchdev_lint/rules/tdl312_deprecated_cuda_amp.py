"""TDL312 deprecated-cuda-amp."""

from __future__ import annotations

import functools
import re

import libcst as cst

from torchdev_lint.analysis.project.context_facts import AMP_TYPE_TEST
from torchdev_lint.analysis.syntax.scopes import dotted_name, module_reference
from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import has_star, keyword, prepended, with_keyword

# Deprecated spelling → the class of `torch.amp` that replaces it.
_DEPRECATED = {
    "torch.cuda.amp.autocast": "autocast",
    "torch.cuda.amp.autocast_mode.autocast": "autocast",
    "torch.cuda.amp.GradScaler": "GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler": "GradScaler",
}
# The torch release each replacement first shipped in. `torch.amp.autocast`: the
# `torch.amp` package (torch/amp/autocast_mode.py) appeared in 1.12; 1.10 and 1.11
# had the class only as `torch.autocast` (torch/autocast_mode.py).
# `torch.amp.GradScaler`: torch/amp/grad_scaler.py appeared in 2.3; until then the
# class lived only in torch/cuda/amp/grad_scaler.py (torch 2.4 deprecated that one).
# Below these versions the old spelling is the only one there is: not flagged.
REPLACEMENT_SINCE = {"autocast": (1, 12), "GradScaler": (2, 3)}
# A condition that picks by torch version or feature (`TORCH_2_4`, `_TORCH_GREATER_EQUAL_2_4`,
# `version.parse(torch.__version__) < ...`, `hasattr(torch, "amp")`), not by device nor by an option
# (`if lossless:`, `if hasattr(args, "bf16"):`).
_VERSION_TEST = re.compile(
    r"(?i)version|torch_\d|(?<![a-z])greater|(?<![a-z])less(?![a-z])|hasattr\(\s*(?:torch|amp)\b"
)
# Names under which code spells each replacement (its `try` or `if` branch for new torch).
_NEW_SPELLINGS = {
    "autocast": frozenset({"torch.amp.autocast", "torch.amp.autocast_mode.autocast", "torch.autocast"}),
    "GradScaler": frozenset({"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.GradScaler"}),
}
# `torch.cuda.amp.autocast(enabled, dtype, cache_enabled)` takes its arguments in
# another order than `torch.amp.autocast(device_type, dtype, enabled, cache_enabled)`,
# so positional ones become keywords. GradScaler's order is the same after `device`.
_AUTOCAST_PARAMS = ("enabled", "dtype", "cache_enabled")
# A type test of the old class (`isinstance(scaler, torch.cuda.amp.GradScaler)`): an object of the
# new spelling's class is no instance of its deprecated subclass.
_TYPE_TEST_RISK = (
    "the project tests an object against an AMP class (`isinstance(x, torch.cuda.amp.GradScaler)`): "
    "an object of the new class is no instance of the deprecated one"
)
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
        Only where the configured `target-torch-version` has the replacement:
        `torch.amp.autocast` since torch 1.12, `torch.amp.GradScaler` since torch 2.3 (below
        those, the old spelling is the only one). Not flagged either: the old spelling kept as
        the fallback for old torch, in the `except` branch of a `try` whose body uses the new
        spelling, or in one branch of an `if`/`else` (or `... if ... else ...`) on the torch
        version whose other branch uses it (`torch.amp.GradScaler("cuda") if TORCH_2_4 else torch.cuda.amp.GradScaler()`).

        ## Why it matters
        Both spellings are deprecated since PyTorch 2.4 and emit a `FutureWarning` on every use.
        They also bake CUDA into the code: the device-generic `torch.amp.autocast(device_type)`
        and `torch.amp.GradScaler(device)` accept a device type taken from your `torch.device`,
        so the same code runs mixed precision on CUDA, XPU, MPS or the CPU.

        ## Example
        ```python
        scaler = torch.cuda.amp.GradScaler()
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            loss = model(x)
        ```

        ## Use instead
        ```python
        scaler = torch.amp.GradScaler("cuda")
        with torch.amp.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        # device-generic: torch.amp.autocast(device.type, enabled=device.type == "cuda")
        ```

        ## Fix safety
        Safe: the deprecated classes are thin subclasses that call the `torch.amp` ones with
        `"cuda"`, so the rewrite runs the same code, in every torch version the fix is offered
        for (it is only offered where the target torch has the replacement, see above). Unsafe
        where a file of the project (this file alone, without the project's facts) tests an
        object against the old class (`isinstance(self.scaler, torch.cuda.amp.GradScaler)`, also in a
        tuple, `type(s) is ...`, a `case` class pattern): an
        object of the new class is no instance of its deprecated subclass.
        Positional arguments of `autocast` become keywords (`autocast(True)` →
        `torch.amp.autocast("cuda", enabled=True, ...)`) because the two signatures order them
        differently. `torch.cuda.amp.autocast` fixes `dtype=torch.float16` and
        `cache_enabled=True` where they are omitted, while `torch.amp.autocast` then inherits
        them from an enclosing autocast region (a `forward` decorated with the old spelling,
        called under `torch.autocast("cuda", dtype=torch.bfloat16)`, would switch from float16
        to bfloat16), so the fix writes the omitted ones out: `torch.cuda.amp.autocast()` becomes
        `torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True)`; delete them if
        inheriting is what you want. `autocast(**kwargs)` gets no fix (they may hold `dtype`),
        nor does `*args`. The fix writes `torch.amp....`, so it is offered only where the name
        `torch` (or the alias the file imports it as) is bound to the torch module, and where a
        string literal can be written (inside an f-string it takes the other quote); otherwise
        the finding comes without a fix. An import of the old name that the fix leaves unused
        is removed with it (the fixer does so for every rule, see the README's fix section);
        one still used elsewhere stays.
        """
    invalid = (
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            big = torch.cuda.amp.GradScaler(2.0**10, enabled=use_amp)
            with torch.cuda.amp.autocast(dtype=torch.bfloat16, cache_enabled=False):
                loss = model(x)
            """,
            lines=(2, 3, 4),
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            big = torch.amp.GradScaler("cuda", 2.0**10, enabled=use_amp)
            with torch.amp.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                loss = model(x)
            """,
        ),
        Invalid(
            # `torch` is imported for type checkers only: no fix can name it.
            """
            from typing import TYPE_CHECKING
            from torch.cuda.amp import GradScaler

            if TYPE_CHECKING:
                import torch

            def make_scaler(enabled: bool) -> "torch.amp.GradScaler":
                return GradScaler(enabled=enabled)
            """,
            lines=(8,),
        ),
        Invalid(
            # A branch on an option, not on the torch version: no fallback for old torch.
            """
            import torch

            def make_autocast(args, lossless):
                if hasattr(args, "bf16") and args.bf16:
                    return torch.amp.autocast("cuda", dtype=torch.bfloat16)
                else:
                    return torch.cuda.amp.autocast()

            def make_scaler(lossless):
                return torch.amp.GradScaler("cuda") if lossless else torch.cuda.amp.GradScaler(init_scale=1.0)
            """,
            lines=(7, 10),
            fixed="""
            import torch

            def make_autocast(args, lossless):
                if hasattr(args, "bf16") and args.bf16:
                    return torch.amp.autocast("cuda", dtype=torch.bfloat16)
                else:
                    return torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True)

            def make_scaler(lossless):
                return torch.amp.GradScaler("cuda") if lossless else torch.amp.GradScaler("cuda", init_scale=1.0)
            """,
        ),
        Invalid(
            # The omitted dtype and cache_enabled are written out: the new class would inherit them.
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

            class Net(torch.nn.Module):
                @torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True)
                def forward(self, x):
                    return x

            with torch.amp.autocast("cuda", enabled=False, dtype=torch.float16, cache_enabled=True):
                pass
            scaler = torch.amp.GradScaler(
                "cuda",
                enabled=True,
            )
            """,
        ),
        Invalid(
            # Through an alias of torch, and of torch.cuda.amp; inside an f-string.
            """
            import torch as T
            from torch.cuda import amp
            with T.cuda.amp.autocast(enabled=True, dtype=T.float16, cache_enabled=True):
                pass
            scaler = amp.GradScaler(enabled=cuda)
            print(f"{amp.GradScaler()}")
            """,
            lines=(3, 5, 6),
            fixed="""
            import torch as T
            with T.amp.autocast("cuda", enabled=True, dtype=T.float16, cache_enabled=True):
                pass
            scaler = T.amp.GradScaler("cuda", enabled=cuda)
            print(f"{T.amp.GradScaler('cuda')}")
            """,
        ),
        Invalid(
            # Target torch 2.1 has torch.amp.autocast but not torch.amp.GradScaler (2.3).
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            with torch.cuda.amp.autocast(dtype=torch.float16, cache_enabled=True):
                pass
            """,
            lines=(3,),
            fixed="""
            import torch
            scaler = torch.cuda.amp.GradScaler()
            with torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True):
                pass
            """,
            settings={"target_torch_version": "2.1"},
        ),
        Invalid(
            # An imported name the fix leaves unused leaves its import; one still used stays.
            """
            import torch
            from torch.cuda.amp import autocast, GradScaler  # mixed precision
            scaler = GradScaler()
            with autocast(dtype=torch.bfloat16, cache_enabled=True):
                pass
            """,
            lines=(4,),
            fixed="""
            import torch
            from torch.cuda.amp import GradScaler  # mixed precision
            scaler = GradScaler()
            with torch.amp.autocast("cuda", dtype=torch.bfloat16, cache_enabled=True):
                pass
            """,
            settings={"target_torch_version": "2.1"},
        ),
        Invalid(
            # Not a fallback for old torch: a switch on the device, a `try` without the new spelling.
            """
            import torch
            if is_npu_available():
                scaler = torch.npu.amp.GradScaler()
            elif device_type == "cuda":
                scaler = torch.cuda.amp.GradScaler()
            else:
                scaler = torch.amp.GradScaler(device_type)
            try:
                scaler = torch.cuda.amp.GradScaler()
            except AttributeError:
                scaler = None
            """,
            lines=(5, 9),
            fixed="""
            import torch
            if is_npu_available():
                scaler = torch.npu.amp.GradScaler()
            elif device_type == "cuda":
                scaler = torch.amp.GradScaler("cuda")
            else:
                scaler = torch.amp.GradScaler(device_type)
            try:
                scaler = torch.amp.GradScaler("cuda")
            except AttributeError:
                scaler = None
            """,
        ),
        Invalid(
            # No fix: `torch` is not bound; `*args`; `**kwargs` may hold `dtype`.
            """
            from torch.cuda.amp import autocast
            with autocast():
                pass

            def run(torch, options, kwargs):
                import torch.cuda.amp as amp
                a = amp.autocast(*options)
                b = amp.autocast(**kwargs)
            """,
            lines=(2, 7, 8),
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
        Valid(
            # Below the version each replacement appeared in, the old spelling is the only one.
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            """,
            settings={"target_torch_version": "2.2"},
        ),
        Valid(
            """
            import torch
            with torch.cuda.amp.autocast():
                pass
            """,
            settings={"target_torch_version": "1.11"},
        ),
        Valid(
            # Fallbacks kept for old torch next to the new spelling.
            """
            import torch
            from packaging import version

            class Scaler:
                def __init__(self, device="cuda"):
                    try:
                        self._scaler = torch.amp.GradScaler(device=device)
                    except (AttributeError, TypeError):
                        self._scaler = torch.cuda.amp.GradScaler()

            def make_scaler(device, enabled):
                if version.parse(torch.__version__) < version.parse("2.4.0"):
                    return torch.cuda.amp.GradScaler(enabled=enabled)
                else:
                    return torch.amp.GradScaler(device, enabled=enabled)

            def make(device):
                return torch.amp.GradScaler(device=device) if TORCH_2_4 else torch.cuda.amp.GradScaler()

            def autocast(device, enabled):
                if TORCH_1_13:
                    return torch.autocast(device, enabled=enabled)
                else:
                    return torch.cuda.amp.autocast(enabled)
            """
        ),
        Valid(
            """
            try:
                from torch.amp import GradScaler
            except ImportError:
                from torch.cuda.amp import GradScaler
            scaler = GradScaler()
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        new_name = _DEPRECATED.get(self.ctx.qualname(node.func) or "")
        if new_name is None or self.ctx.settings.target_torch_version < REPLACEMENT_SINCE[new_name]:
            return
        if self._fallback_for_old_torch(new_name):
            return
        self.report(node, message=self.message.format(name=new_name), fix=self._fix(node, new_name))

    def _fix(self, node: cst.Call, new_name: str) -> Fix | None:
        torch_ref = module_reference(self.ctx.scope, "torch")
        device = self.ctx.string("cuda", at=node)
        if torch_ref is None or device is None:
            return None
        fixed = _new_arguments(node, new_name, device)
        if fixed is None:
            return None
        func = cst.Attribute(
            value=cst.Attribute(value=torch_ref, attr=cst.Name("amp")), attr=cst.Name(new_name)
        )
        fixed = fixed.with_changes(func=func)
        if new_name == "autocast":
            # The old class fixes these; the new one inherits them from an enclosing autocast.
            if keyword(fixed, "dtype") is None:
                fixed = with_keyword(fixed, "dtype", cst.Attribute(value=torch_ref, attr=cst.Name("float16")))
            if keyword(fixed, "cache_enabled") is None:
                fixed = with_keyword(fixed, "cache_enabled", cst.Name("True"))
        message = f'Use `torch.amp.{new_name}("cuda", ...)`'
        if self._type_tested:
            return Fix("unsafe", message, {node: fixed}, _TYPE_TEST_RISK)
        return Fix("safe", message, {node: fixed})

    @functools.cached_property
    def _type_tested(self) -> bool:
        """Does the project (or, without its facts, this file) test an object against an AMP class?
        Asked once per file: without facts it reads the file's whole text."""
        if self.ctx.project is not None:
            return self.ctx.project.tests_amp_class()
        return AMP_TYPE_TEST.search(self.ctx.module.code.encode()) is not None

    def _fallback_for_old_torch(self, new_name: str) -> bool:
        """Whether the call sits in one branch of a `try`/`except` or an `if`/`else` (statement or
        expression) whose other branch spells the replacement: code kept on purpose for old torch."""
        ancestors = self.ctx.ancestors
        for index in range(len(ancestors) - 1, 0, -1):
            child, parent = ancestors[index], ancestors[index - 1]
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            other: cst.CSTNode | None = None
            if isinstance(parent, cst.ExceptHandler) and index >= 2:
                grandparent = ancestors[index - 2]
                other = grandparent.body if isinstance(grandparent, cst.Try) else None
            elif isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test:
                if _VERSION_TEST.search(self.ctx.code_for(parent.test)):
                    other = parent.orelse if child is parent.body else parent.body
            if other is not None and self._spells(other, new_name):
                return True
        return False

    def _spells(self, node: cst.CSTNode, new_name: str) -> bool:
        """Whether `node` names the `torch.amp` replacement (a use, or an import of it)."""
        spellings = _NEW_SPELLINGS[new_name]
        found = False

        def enter(child: cst.CSTNode) -> None:
            nonlocal found
            if isinstance(child, (cst.Name, cst.Attribute)):
                found = found or self.ctx.qualname(child) in spellings
            elif isinstance(child, cst.ImportFrom) and child.module is not None:
                module = dotted_name(child.module)
                names = child.names if isinstance(child.names, (list, tuple)) else ()
                found = found or any(f"{module}.{dotted_name(alias.name)}" in spellings for alias in names)

        walk(node, enter, lambda child: None)
        return found


def _new_arguments(call: cst.Call, new_name: str, device: cst.SimpleString) -> cst.Call | None:
    """The call with `"cuda"` first, then the original arguments (autocast's positional ones as keywords)."""
    if has_star(call, "*") or (new_name == "autocast" and has_star(call, "**")):
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
    return prepended(call.with_changes(args=rest), cst.Arg(value=device))
