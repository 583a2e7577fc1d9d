"""TDL307 legacy-tensor-type."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.knowledge.tensor_types import (
    LegacyType,
    legacy_choice,
    legacy_type,
    legacy_type_name,
)
from torchdev_lint.analysis.syntax.scopes import module_reference
from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.factory_values import created_on_device, filled
from torchdev_lint.analysis.values.kinds import probably_module
from torchdev_lint.analysis.values.module_classes import attribute_assignments, instance_name
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import comments, positional, prepended, with_keyword

_DATA = (cst.List, cst.Tuple, cst.ListComp)
# `torch.set_default_device` first shipped in torch 2.0.
SET_DEFAULT_DEVICE_SINCE = (2, 0)
# What may change where a fix is unsafe (the docs' "Fix safety"), by the reason it is unsafe there.
_CUDA_CAST_RISK = (
    '`.type()` kept a CUDA tensor on the GPU it was on; `.to("cuda")` moves it to the current GPU'
)
_MODULE_CAST_RISK = (
    "the receiver may be a module, whose `.type()` also cast its integer buffers and `.to()` does not"
)
_DEFAULT_RISK = (
    "the default device is per thread (the tensor type was process-wide), costs a little on every torch "
    "call, and neither clears nor is cleared by a tensor type an earlier `set_default_tensor_type` set"
)


class LegacyTensorType(Rule):
    code = "TDL307"
    name = "legacy-tensor-type"
    message = (
        "Legacy typed tensor class fixes dtype and device together; use `torch.empty`/`torch.tensor` "
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
        (`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`, the other side possibly
        `torch.Tensor`) or kept by the object (`self.FT = ...`): every `Tensor(...)`
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
        mask = torch.FloatTensor(4, 16).zero_().to(device)
        ids = torch.cuda.LongTensor([1, 2, 3])
        x = x.type(torch.cuda.HalfTensor)
        torch.set_default_tensor_type(torch.cuda.FloatTensor)
        ```

        ## Use instead
        ```python
        buf = torch.empty(4, 16, dtype=torch.float32, device=device)
        mask = torch.zeros(4, 16, dtype=torch.float32, device=device)
        ids = torch.tensor([1, 2, 3], dtype=torch.int64, device=device)
        x = x.to(device, torch.float16)
        torch.set_default_dtype(torch.float32)
        torch.set_default_device(device)
        ```

        ## Fix safety
        Safe, where shape or data is explicit: `T(2, 3)` or `T(n, m)` (sizes) becomes
        `torch.empty(...)`, `T([1, 2])` (a literal list or tuple of data) becomes
        `torch.tensor(...)`, with the class's `dtype=` and `device=` (`"cuda"` for `torch.cuda.*`
        classes, the current GPU either way; `"cpu"` for the others, which build on the CPU
        even where a default device sends factories elsewhere). Same values, dtype and device.
        No fix where the argument could be either a size or data (`T(x)`), where an alias is
        chosen at run time (its device or dtype is not known), or where `torch` is not bound.

        What the chain does to the new tensor right after is folded in where one factory call
        gives the same tensor, so that the fix writes no tensor created on the CPU only to be
        filled or moved (TDL203's create-then-move): `T(n, m).zero_()` and `.fill_(0)` become
        `torch.zeros(n, m, ...)`; `.fill_(<number literal>)` becomes `torch.full((n, m),
        <number>, ...)` (`full` is `empty` then `fill_`: the number is cast to the dtype as
        before, and `-0.0` keeps its sign); a following `.to(device)`/`.cuda()` becomes the
        `device=`, as TDL203's fix writes it (`non_blocking` dropped; with a cast,
        `.to(device, dtype)`, `zeros` and `empty` are created in the new dtype, `full` and
        `tensor` on the device in their own dtype and then cast). Both orders are folded
        (`T(n, m).cuda().zero_()`). Not folded: random fills (`.normal_()`: other numbers on a
        device), a fill value that is not a number literal (a tensor may live elsewhere), a move
        to the CPU, and a chain with a comment inside it.

        `x.type(T)` becomes `x.to(device, dtype)`: safe for a CPU class on what the analysis
        knows is a tensor. Unsafe for a `torch.cuda.*` class (`.type` leaves a tensor on the GPU
        it is on, `.to("cuda")` moves it to the current GPU) and where the receiver may be a
        module (`Module.type` also casts integer buffers, `Module.to` does not); the unsafe fix's
        message says which of the two applies (or both). No fix on what looks like a module.

        `torch.set_default_tensor_type(T)` becomes two statements,
        `torch.set_default_dtype(<T's dtype>)` and `torch.set_default_device(<T's device>)`
        (both kept: the old call set the dtype too), offered only for a call that is a whole
        statement of its own and a target torch of 2.0 or later (`set_default_device` appeared
        in 2.0). Always unsafe: the two are not the same switch. The default device is per
        thread (the old tensor type is process-wide), is applied through a mode that costs a
        little on every torch call, and neither clears nor is cleared by a tensor type an
        earlier `set_default_tensor_type` set elsewhere in the program (after
        `set_default_tensor_type(torch.cuda.FloatTensor)`, `set_default_dtype` keeps CUDA).
        """
    invalid = (
        Invalid(
            # A device index written in hex is the same GPU; `.to(x_gpu)` takes a tensor's device
            # and dtype (not folded into `device=`, which takes no tensor).
            """
            import torch

            def init_state(batch, hidden, feats_gpu):
                h = torch.FloatTensor(batch, hidden).zero_().cuda(0x1)
                return h, torch.FloatTensor(batch, 1).fill_(1.0).to(feats_gpu)
            """,
            lines=(4, 5),
            fixed="""
            import torch

            def init_state(batch, hidden, feats_gpu):
                h = torch.zeros(batch, hidden, dtype=torch.float32, device="cuda:1")
                return h, torch.full((batch, 1), 1.0, dtype=torch.float32, device="cpu").to(feats_gpu)
            """,
        ),
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
            # back to float32 on the CPU
            torch.set_default_tensor_type("torch.FloatTensor")  # keeps the dtype
            """,
            lines=(2, 3, 4, 5, 6, 7, 8, 10),
            fixed="""
            import torch
            buf = torch.empty(4, 16, dtype=torch.float32, device="cuda")
            ids = torch.tensor([1, 2, 3], dtype=torch.int64, device="cuda")
            empty = torch.empty(0, dtype=torch.float64, device="cpu")
            grid = torch.empty(rows, cols, dtype=torch.uint8, device="cpu")
            x = x.to("cuda", torch.float16)
            y = y.to("cpu", torch.float32, non_blocking=True)
            torch.set_default_dtype(torch.float32)
            torch.set_default_device("cuda")
            # back to float32 on the CPU
            torch.set_default_dtype(torch.float32)  # keeps the dtype
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
            # An alias the object keeps: each use through `self` is reported, no fix.
            """
            import torch

            class Sampler:
                def __init__(self, cuda):
                    self.FT = torch.cuda.FloatTensor if cuda else torch.FloatTensor

                def draw(self, n, labels):
                    return self.FT(n, 100).normal_(), labels.type(self.FT)
            """,
            lines=(8, 8),
        ),
        Invalid(
            # An alias a function may rebind (`global`): which class it holds is chosen at run time.
            """
            import torch
            Tensor = torch.FloatTensor

            def configure(double):
                global Tensor
                if double:
                    Tensor = torch.DoubleTensor

            def real_labels(n):
                return Tensor(n, 1).fill_(1.0)
            """,
            lines=(10,),
        ),
        Invalid(
            # The other side of the choice may be `torch.Tensor`, the default type.
            """
            import torch
            use_gpu = torch.cuda.is_available()
            Floats = torch.cuda.FloatTensor if use_gpu else torch.Tensor

            def noise(n):
                return Floats(n, 64).normal_()
            """,
            lines=(6,),
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
        Invalid(
            # A CPU class on a known tensor: safe; inside an f-string the literal takes the other quote.
            """
            import torch

            def to_host(n):
                mask = torch.zeros(n) > 0
                return mask.type(torch.FloatTensor), f"{torch.LongTensor([n])}"
            """,
            lines=(5, 5),
            fixed="""
            import torch

            def to_host(n):
                mask = torch.zeros(n) > 0
                return mask.to("cpu", torch.float32), f"{torch.tensor([n], dtype=torch.int64, device='cpu')}"
            """,
        ),
        Invalid(
            # No fix: target torch without `set_default_device`; a call that is not a statement of its own.
            """
            import torch
            torch.set_default_tensor_type(torch.DoubleTensor)
            setup = lambda: torch.set_default_tensor_type(torch.FloatTensor)
            """,
            lines=(2, 3),
            settings={"target_torch_version": "1.13"},
        ),
        Invalid(
            # The initialisation and the move that follow are folded into one factory call
            # (a `.fill_()` with a number: `torch.full`, cast as before; `-0.0` keeps its sign).
            """
            import torch as th

            def init_state(batch, hidden, device):
                h = th.cuda.FloatTensor(batch, hidden).fill_(0)
                c = th.FloatTensor(batch, hidden).zero_().to(device)
                mask = th.ByteTensor(batch, 1).fill_(1).to(device=device, non_blocking=True)
                bias = th.DoubleTensor(1, hidden).fill_(0.1).to(device, th.float16)
                pad = th.LongTensor(batch, 2).cuda().fill_(-1)
                ids = th.LongTensor([0, 1, 2]).to(device)
                buf = th.HalfTensor(4, hidden).to(device)
                neg = th.FloatTensor(2, 2).fill_(-0.0)
                return h, c, mask, bias, pad, ids, buf, neg
            """,
            lines=(4, 5, 6, 7, 8, 9, 10, 11),
            fixed="""
            import torch as th

            def init_state(batch, hidden, device):
                h = th.zeros(batch, hidden, dtype=th.float32, device="cuda")
                c = th.zeros(batch, hidden, dtype=th.float32, device=device)
                mask = th.full((batch, 1), 1, dtype=th.uint8, device=device)
                bias = th.full((1, hidden), 0.1, dtype=th.float64, device=device).to(th.float16)
                pad = th.full((batch, 2), -1, dtype=th.int64, device="cuda")
                ids = th.tensor([0, 1, 2], dtype=th.int64, device=device)
                buf = th.empty(4, hidden, dtype=th.float16, device=device)
                neg = th.full((2, 2), -0.0, dtype=th.float32, device="cpu")
                return h, c, mask, bias, pad, ids, buf, neg
            """,
        ),
        Invalid(
            # Not folded: a random fill (other numbers on a device), a fill value that is no
            # number literal, a move to the CPU, a comment inside the chain.
            """
            import torch

            def noise(n, scale, device):
                z = torch.FloatTensor(n, 8).normal_().to(device)
                s = torch.FloatTensor(n, 8).fill_(scale).to(device)
                c = torch.cuda.FloatTensor(n, 8).zero_().cpu()
                w = (torch.FloatTensor(n, 8)  # weights
                     .zero_()
                     .to(device))
                return z, s, c, w
            """,
            lines=(4, 5, 6, 7),
            fixed="""
            import torch

            def noise(n, scale, device):
                z = torch.empty(n, 8, dtype=torch.float32, device="cpu").normal_().to(device)
                s = torch.empty(n, 8, dtype=torch.float32, device="cpu").fill_(scale).to(device)
                c = torch.zeros(n, 8, dtype=torch.float32, device="cuda").cpu()
                w = (torch.empty(n, 8, dtype=torch.float32, device="cpu")  # weights
                     .zero_()
                     .to(device))
                return z, s, c, w
            """,
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
        Valid(
            # Type names compared or looked up, not constructed.
            """
            import torch
            on_gpu = type(x) is torch.cuda.FloatTensor or x.type() == torch.cuda.HalfTensor.__name__
            KINDS = {torch.FloatTensor: "float", torch.cuda.FloatTensor: "float"}
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = self.ctx.qualname(func)
        if name == "torch.set_default_tensor_type":
            self.report(node, fix=self._default_fix(node))
            return
        kind = self._legacy(func)
        if kind is not None:
            self.report(node, fix=self._construct_fix(node, kind))
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "type":
            args = positional(node)
            if len(args) == 1 and args[0] is node.args[0]:
                kind = self._legacy(args[0].value)
                if kind is not None:
                    self.report(node, fix=self._cast_fix(node, kind))

    def _legacy(self, node: cst.BaseExpression) -> LegacyType | None:
        """The legacy class `node` names, also as an attribute the object's class assigns only
        such classes (`self.FT = torch.cuda.FloatTensor if cuda else torch.FloatTensor`)."""
        scope = self.ctx.scope
        kind = legacy_type(node, scope)
        klass, method = scope.enclosing_class, scope.owner.node
        if (
            kind is not None
            or klass is None
            or not isinstance(klass.node, cst.ClassDef)
            or not isinstance(method, cst.FunctionDef)
            or not isinstance(node, cst.Attribute)
            or not isinstance(node.value, cst.Name)
            or node.value.value != instance_name(method)
        ):
            return kind
        assigned = attribute_assignments(klass.node, node.attr.value)
        return legacy_choice([value for _, value in assigned], klass) if assigned else None

    def _torch(self) -> cst.Name | None:
        return module_reference(self.ctx.scope, "torch")

    def _device(self, kind: LegacyType, at: cst.CSTNode) -> cst.SimpleString | None:
        return self.ctx.string("cuda" if kind.cuda else "cpu", at=at)

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
        # `device="cpu"` too: a legacy CPU class builds on the CPU even where a default
        # device (`torch.set_default_device`, `with torch.device(...)`) sends factories elsewhere.
        device = self._device(kind, node)
        if device is None:
            return None
        call = cst.Call(
            func=cst.Attribute(value=torch, attr=cst.Name(factory)),
            args=node.args,
            whitespace_before_args=node.whitespace_before_args,  # the layout of the arguments stays
        )
        if not args:
            call = call.with_changes(args=[cst.Arg(cst.Integer("0"))])
        call = with_keyword(call, "dtype", _dtype(torch, kind.dtype))
        outer, fixed, moved = self._folded(node, call)
        if not moved:
            fixed = with_keyword(fixed, "device", device)
        fixed = fixed.with_changes(lpar=outer.lpar, rpar=outer.rpar)
        if outer is not node and comments(fixed) != comments(outer):  # a comment inside the chain
            outer = node  # fix the construction only
            fixed = with_keyword(call, "device", device).with_changes(lpar=node.lpar, rpar=node.rpar)
        factory = _factory(fixed) or factory  # `torch.full(...).to(dtype)`: created on the device, then cast
        return Fix("safe", f"Use `torch.{factory}(..., dtype=..., device=...)`", {outer: fixed})

    def _folded(self, node: cst.Call, call: cst.Call) -> tuple[cst.Call, cst.Call, bool]:
        """The construction `node`, rewritten as `call` (a factory without `device=`), together
        with what the chain does to it right after, folded in where one factory call gives the
        same tensor: `.zero_()`/`.fill_(0)` make `torch.zeros`, `.fill_(<number>)` makes
        `torch.full` (`factory_values.filled`), and a move `.to(d)`/`.cuda()` becomes `device=`
        (TDL203's rewrite, `created_on_device`), in either order. So the fix writes no tensor
        created on the CPU and then moved or filled, which TDL203 asks to avoid. Returns the
        outermost call folded in, its replacement, and whether a move was folded (then the
        replacement has its device)."""
        outer, fixed = node, call
        moved = False
        for depth in (1, 3):  # the chain's next two calls: `T(n).zero_().to(d)`
            attribute, step = self.ctx.parent(depth), self.ctx.parent(depth + 1)
            if not (
                isinstance(attribute, cst.Attribute)
                and attribute.value is outer
                and isinstance(step, cst.Call)
                and step.func is attribute
            ):
                break
            factory = _factory(fixed)
            init = filled(fixed, step) if factory == "empty" else None
            move = None if moved or factory is None else as_move(step, self.ctx.scope)
            if init is not None:
                fixed = init
            elif move is not None and move.to_accelerator:
                on_device = created_on_device(step, fixed, factory or "", self.ctx.scope, self.ctx.string)
                if not isinstance(on_device, cst.Call):  # None: the move does more than place it
                    break
                fixed, moved = on_device, True
            else:
                break
            outer = step
        return outer, fixed, moved

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
        device = self._device(kind, node)
        if device is None:
            return None
        # The type argument becomes the dtype where it stands, its comma and line breaks kept.
        dtype = node.args[0].with_changes(value=_dtype(torch, kind.dtype))
        fixed = prepended(
            node.with_changes(func=node.func.with_changes(attr=cst.Name("to")), args=[dtype, *rest]),
            cst.Arg(device),
        )
        # `.type(torch.cuda.T)` keeps a tensor on the GPU it is on, `.to("cuda")` moves it to the
        # current one; `Module.type` also casts integer buffers, `Module.to` does not.
        risks = [_CUDA_CAST_RISK] if kind.cuda else []
        if not flow.is_tensor(node.func.value, self.ctx):
            risks.append(_MODULE_CAST_RISK)
        return Fix.judged("Use `.to(device, dtype)`", {node: fixed}, "; ".join(risks) or None)

    def _default_fix(self, node: cst.Call) -> Fix | None:
        """`torch.set_default_dtype(...)` and `torch.set_default_device(...)` in place of the call's statement."""
        torch = self._torch()
        if torch is None or self.ctx.settings.target_torch_version < SET_DEFAULT_DEVICE_SINCE:
            return None
        if len(node.args) != 1 or node.args[0].keyword is not None or node.args[0].star:
            return None
        line = self.ctx.parent(2)
        expression = self.ctx.parent(1)
        if not (
            isinstance(expression, cst.Expr)
            and isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1
            and expression.value is node
        ):
            return None
        value = node.args[0].value
        if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
            kind = legacy_type_name(value.evaluated_value)
        else:
            kind = legacy_type(value, self.ctx.scope)
        device = None if kind is None else self._device(kind, node)
        if kind is None or kind.dtype is None or kind.cuda is None or device is None:
            return None
        set_dtype = cst.Call(
            func=cst.Attribute(value=torch, attr=cst.Name("set_default_dtype")),
            args=[cst.Arg(_dtype(torch, kind.dtype))],
        )
        set_device = cst.Call(
            func=cst.Attribute(value=torch, attr=cst.Name("set_default_device")), args=[cst.Arg(device)]
        )
        first = line.with_changes(body=[cst.Expr(set_dtype)])
        second = cst.SimpleStatementLine(body=[cst.Expr(set_device)])
        # Not the same switch: the default device is per thread and set through a mode that
        # `set_default_tensor_type` neither sets nor clears, and `set_default_dtype` keeps the
        # tensor type's device where an earlier `set_default_tensor_type` put it.
        return Fix(
            "unsafe",
            "Use `torch.set_default_dtype(...)` and `torch.set_default_device(...)`",
            {line: cst.FlattenSentinel([first, second])},
            _DEFAULT_RISK,
        )


def _dtype(torch: cst.Name, dtype: str) -> cst.Attribute:
    return cst.Attribute(value=torch, attr=cst.Name(dtype))


def _factory(call: cst.Call) -> str | None:
    """`zeros` for `torch.zeros(...)`; None for a factory call cast after it (`torch.full(...).to(dtype)`)."""
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) else None
