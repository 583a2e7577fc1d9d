"""TDL307 legacy-tensor-type."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.kinds import probably_module
from torchdev_lint.analysis.scopes import module_reference
from torchdev_lint.analysis.tensor_types import LegacyType, legacy_type, legacy_type_name
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import positional, string, with_keyword

_DATA = (cst.List, cst.Tuple, cst.ListComp)


class LegacyTensorType(Rule):
    code = "TDL307"
    name = "legacy-tensor-type"
    message = (
        "legacy typed tensor class fixes dtype and device together; use `torch.empty`/`torch.tensor` "
        "with `dtype=` and `device=`, or `.to(device, dtype)`"
    )
    fix_availability = "sometimes"
    triggers = ("Tensor", "set_default_tensor_type")
    docs = """
        ## What it does
        Flags the legacy typed tensor classes (`torch.FloatTensor`, `torch.cuda.LongTensor`
        and kin) used as constructors (`torch.cuda.FloatTensor(2, 3)`) or as cast targets
        (`x.type(torch.cuda.FloatTensor)`), and `torch.set_default_tensor_type(...)`. Uses
        through an alias are followed, also one chosen at module level by a CUDA flag
        (`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`): every `Tensor(...)`
        and `.type(Tensor)` is reported (the alias line itself is TDL311's). `isinstance`
        checks and type names in strings or docs are not flagged.

        ## Why it matters
        These classes predate `torch.device` and `dtype=`: each fixes a dtype *and* a device,
        so code written with them can only run on the CPU or on CUDA (never MPS/XPU), needs a
        second set of names for every device, and `torch.FloatTensor(n)` silently returns
        uninitialised memory while `torch.FloatTensor([n])` holds data. PyTorch documents
        them as legacy; `torch.set_default_tensor_type` is deprecated since 2.1.

        ## Example
        ```python
        buf = torch.cuda.FloatTensor(4, 16)
        ids = torch.cuda.LongTensor([1, 2, 3])
        x = x.type(torch.cuda.HalfTensor)
        torch.set_default_tensor_type(torch.cuda.FloatTensor)
        ```

        ## Use instead
        ```python
        buf = torch.empty(4, 16, dtype=torch.float32, device=device)
        ids = torch.tensor([1, 2, 3], dtype=torch.int64, device=device)
        x = x.to(device, torch.float16)
        torch.set_default_device(device)
        ```

        ## Fix safety
        Safe, where shape or data is explicit: `T(2, 3)` or `T(n, m)` (sizes) becomes
        `torch.empty(...)`, `T([1, 2])` (a literal list or tuple of data) becomes
        `torch.tensor(...)`, with the class's `dtype=` and, for `torch.cuda.*` classes,
        `device="cuda"`; `x.type(T)` becomes `x.to(device, dtype)`; and
        `torch.set_default_tensor_type` of a float32 class becomes `torch.set_default_device`.
        These keep values, dtype and device. One caveat: `x.type(torch.cuda.T)` leaves a
        tensor on the GPU it is on, while `.to("cuda", ...)` moves it to the current GPU; the
        two differ only for a tensor on a GPU other than the current one.
        No fix is offered where the argument could be either a size or data (`T(x)`), where
        an alias is chosen at run time (its device or dtype is not known), for `.type(T)` on
        what looks like a module (`Module.type` also casts integer buffers), and where the
        name `torch` is not bound.
        """
    invalid = (
        Invalid(
            """
            import torch
            buf = torch.cuda.FloatTensor(4, 16)
            ids = torch.cuda.LongTensor([1, 2, 3])
            empty = torch.DoubleTensor()
            grid = torch.ByteTensor(rows, cols)
            x = x.type(torch.cuda.HalfTensor)
            y = y.type(torch.FloatTensor, non_blocking=True)
            torch.set_default_tensor_type(torch.cuda.FloatTensor)
            torch.set_default_tensor_type("torch.FloatTensor")
            """,
            lines=(2, 3, 4, 5, 6, 7, 8, 9),
            fixed="""
            import torch
            buf = torch.empty(4, 16, dtype=torch.float32, device="cuda")
            ids = torch.tensor([1, 2, 3], dtype=torch.int64, device="cuda")
            empty = torch.empty(0, dtype=torch.float64)
            grid = torch.empty(rows, cols, dtype=torch.uint8)
            x = x.to("cuda", torch.float16)
            y = y.to("cpu", torch.float32, non_blocking=True)
            torch.set_default_device("cuda")
            torch.set_default_device("cpu")
            """,
        ),
        Invalid(
            # Through a module-level alias chosen by a flag: reported at each use, no fix.
            """
            import torch
            cuda = torch.cuda.is_available()
            Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor

            def sample(n, labels):
                z = Tensor(n, 100).normal_()
                valid = Tensor(n, 1).fill_(1.0)
                return z, labels.type(Tensor)
            """,
            lines=(6, 7, 8),
        ),
        Invalid(
            """
            import torch
            from torch.cuda import LongTensor as LT
            Ints = torch.IntTensor

            def f(x, values):
                return LT(values), Ints(x), torch.set_default_tensor_type(kind)
            """,
            lines=(6, 6, 6),
        ),
        Invalid(
            """
            import torch
            if use_gpu:
                dtype = torch.cuda.FloatTensor
            else:
                dtype = torch.FloatTensor
            model = model.type(dtype)
            x = x.type(dtype)
            """,
            lines=(6, 7),
        ),
    )
    valid = (
        Valid(
            """
            import torch
            if isinstance(x, torch.cuda.FloatTensor) or isinstance(y, (torch.FloatTensor, torch.LongTensor)):
                pass
            kind = x.type()
            if x.type() == "torch.cuda.FloatTensor":
                x = x.type("torch.FloatTensor")
            z = x.type(torch.float16)
            w = torch.empty(3, dtype=torch.float32, device=device)
            """
        ),
        Valid(
            '''
            def doc():
                """Returns a torch.cuda.FloatTensor of shape (n, 3)."""
                return "torch.FloatTensor"
            '''
        ),
        Valid(
            """
            from mylib import FloatTensor
            t = FloatTensor(3)
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        func = node.func
        name = self.ctx.qualname(func)
        if name == "torch.set_default_tensor_type":
            self.report(node, fix=self._default_fix(node))
            return
        kind = legacy_type(func, scope)
        if kind is not None:
            self.report(node, fix=self._construct_fix(node, kind))
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "type":
            args = positional(node)
            if len(args) == 1 and args[0] is node.args[0]:
                kind = legacy_type(args[0].value, scope)
                if kind is not None:
                    self.report(node, fix=self._cast_fix(node, kind))

    def _torch(self) -> cst.Name | None:
        return module_reference(self.ctx.scope, "torch")

    def _construct_fix(self, node: cst.Call, kind: LegacyType) -> Fix | None:
        torch = self._torch()
        if torch is None or kind.dtype is None or kind.cuda is None:
            return None
        if any(arg.keyword is not None or arg.star for arg in node.args):
            return None
        args = [arg.value for arg in node.args]
        if len(args) == 1 and isinstance(args[0], _DATA):
            factory = "tensor"
        elif len(args) >= 2 or all(isinstance(a, cst.Integer) for a in args):
            factory = "empty"
        else:
            return None
        call = cst.Call(func=cst.Attribute(value=torch, attr=cst.Name(factory)), args=node.args)
        if not args:
            call = call.with_changes(args=[cst.Arg(cst.Integer("0"))])
        call = with_keyword(call, "dtype", _dtype(torch, kind.dtype))
        if kind.cuda:
            call = with_keyword(call, "device", string("cuda"))
        return Fix("safe", f"Use `torch.{factory}(..., dtype=...)`", {node: call})

    def _cast_fix(self, node: cst.Call, kind: LegacyType) -> Fix | None:
        torch = self._torch()
        assert isinstance(node.func, cst.Attribute)
        if torch is None or kind.dtype is None or kind.cuda is None:
            return None
        if probably_module(node.func.value, self.ctx.scope):
            return None
        rest = list(node.args[1:])
        if any(arg.keyword is None or arg.keyword.value != "non_blocking" for arg in rest):
            return None
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        device = cst.Arg(string("cuda" if kind.cuda else "cpu"), comma=comma)
        dtype = cst.Arg(_dtype(torch, kind.dtype), comma=comma if rest else cst.MaybeSentinel.DEFAULT)
        fixed = node.with_changes(
            func=node.func.with_changes(attr=cst.Name("to")), args=[device, dtype, *rest]
        )
        return Fix("safe", "Use `.to(device, dtype)`", {node: fixed})

    def _default_fix(self, node: cst.Call) -> Fix | None:
        torch = self._torch()
        if torch is None or len(node.args) != 1 or node.args[0].keyword is not None or node.args[0].star:
            return None
        value = node.args[0].value
        if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
            kind = legacy_type_name(value.evaluated_value)
        else:
            kind = legacy_type(value, self.ctx.scope)
        # Only float32 classes: others also change the default dtype, which needs a second call.
        if kind is None or kind.dtype != "float32" or kind.cuda is None:
            return None
        fixed = cst.Call(
            func=cst.Attribute(value=torch, attr=cst.Name("set_default_device")),
            args=[cst.Arg(string("cuda" if kind.cuda else "cpu"))],
        )
        return Fix("safe", "Use `torch.set_default_device(...)`", {node: fixed})


def _dtype(torch: cst.Name, dtype: str) -> cst.Attribute:
    return cst.Attribute(value=torch, attr=cst.Name(dtype))
