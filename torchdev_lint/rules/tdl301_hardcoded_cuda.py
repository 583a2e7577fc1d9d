"""TDL301 hardcoded-cuda."""

from __future__ import annotations

import re
from collections.abc import Callable

import libcst as cst

from torchdev_lint.analysis.devices import CUDA, literal_device
from torchdev_lint.analysis.guards import availability_guarded, flag_condition
from torchdev_lint.analysis.scopes import dotted_name, module_reference
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import keyword, positional

# Names that hold a device: `device`, `DEVICE`, `dev`, `train_device`, `device0` (not `device_type`).
_DEVICE_NAME = re.compile(r"^(\w*_)?(device|dev)\d*$", re.IGNORECASE)


class HardcodedCuda(Rule):
    code = "TDL301"
    name = "hardcoded-cuda"
    message = (
        'hard-coded CUDA device: fails on machines without a GPU; use one `device = torch.device("cuda" if '
        'torch.cuda.is_available() else "cpu")` (or take a device argument)'
    )
    fix_availability = "sometimes"
    triggers = ("cuda",)
    docs = """
        ## What it does
        Flags a CUDA device written into the code: `"cuda"`/`"cuda:N"` used as a device
        (`.to("cuda")`, `device="cuda"`, `torch.device("cuda")`, or assigned to a name that says
        device, `DEVICE = "cuda"`) and `.cuda()`, in a function that neither checks
        `torch.cuda.is_available()`/`torch.cuda.device_count()` nor takes a device parameter.
        For top-level code, the module as a whole must check availability somewhere. Uses
        under an `if`/conditional expression that tests CUDA (`if use_cuda:`,
        `if x.is_cuda:`, `if args.device == "cuda":`), and code in functions or classes that
        are CUDA-specific by name or decorator (`class CUDATestBase`, `def benchmark_gpu`,
        `@skip_if_lt_x_gpu(2)`, `@unittest.skipIf(not TEST_CUDA, ...)`) are not flagged either.

        Not device uses, hence not flagged: `autocast("cuda")` and `device_type="cuda"`,
        tuples and lists of backend names, comparisons such as `x.device.type == "cuda"`,
        and `torch.device("cuda" if torch.cuda.is_available() else "cpu")`.

        ## Why it matters
        Code that names CUDA unconditionally crashes on a laptop, a CPU-only CI runner or an
        Apple-silicon machine (`AssertionError: Torch not compiled with CUDA enabled`), and
        cannot be pointed at another GPU or accelerator without editing it. Choosing the
        device once and passing it around keeps every other line device-agnostic.

        ## Example
        ```python
        def predict(model, batch):
            model = model.cuda()
            return model(batch.to("cuda"))
        ```

        ## Use instead
        ```python
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

        def predict(model, batch, device):
            model = model.to(device)
            return model(batch.to(device))
        ```

        ## Fix safety
        Unsafe: the literal `"cuda"` becomes `"cuda" if torch.cuda.is_available() else "cpu"`,
        and `.cuda()` becomes `.to(torch.device("cuda" if torch.cuda.is_available() else "cpu"))`.
        On a machine without CUDA the code then runs on the CPU instead of failing, which may
        hide a misconfigured GPU job; and `.to()` exists on tensors and modules but perhaps not
        on every object with a `.cuda()` method. The fix is offered only where the name
        `torch` (or an alias of it) is bound, and not for `.cuda(...)` with a non-literal
        device argument.
        """
    invalid = (
        Invalid(
            """
            import torch

            def predict(model, batch):
                model = model.cuda()
                mask = torch.ones(3, device="cuda:1")
                return model(batch.to("cuda")), torch.device("cuda")
            """,
            lines=(4, 5, 6, 6),
            fixed="""
            import torch

            def predict(model, batch):
                model = model.to(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
                mask = torch.ones(3, device="cuda:1" if torch.cuda.is_available() else "cpu")
                return model(batch.to("cuda" if torch.cuda.is_available() else "cpu")), torch.device("cuda" if torch.cuda.is_available() else "cpu")
            """,
        ),
        Invalid(
            """
            import torch as T
            DEVICE = "cuda"
            net = Net().cuda(0)
            x = T.zeros(2).cuda(non_blocking=True)
            """,
            lines=(2, 3, 4),
            fixed="""
            import torch as T
            DEVICE = "cuda" if T.cuda.is_available() else "cpu"
            net = Net().to(T.device("cuda:0" if T.cuda.is_available() else "cpu"))
            x = T.zeros(2).to(T.device("cuda" if T.cuda.is_available() else "cpu"), non_blocking=True)
            """,
        ),
        Invalid(
            # No fix: `torch` is not bound here; `.cuda(index)` with a variable index.
            """
            from torch import nn

            class Trainer:
                def setup(self):
                    self.model = nn.Linear(2, 2).cuda()
                    self.device = "cuda"
                    self.head = nn.Linear(2, 2).cuda(self.index)
            """,
            lines=(5, 6, 7),
        ),
    )
    valid = (
        Valid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().cuda()
            x = torch.zeros(3, device="cuda")
            """
        ),
        Valid(
            # Checks availability, or takes the device from its caller.
            """
            import torch

            def setup(model):
                if not torch.cuda.is_available():
                    raise SystemExit("needs a GPU")
                return model.cuda()

            def place(x, device="cuda"):
                return x.to(device), torch.zeros(2, device="cuda")

            def spread(models):
                for i in range(torch.cuda.device_count()):
                    models[i].to(f"cuda:{i}")
                    models[i].cuda(i)
            """
        ),
        Valid(
            # Not devices: autocast's device type, backend-name collections, comparisons.
            """
            import torch
            from torch.amp import autocast

            def step(model, x):
                with autocast("cuda"), torch.autocast(device_type="cuda"):
                    y = model(x)
                backends = ("cuda", "cpu")
                names = ["cuda", "mps", "xpu"]
                if x.device.type == "cuda" or y.device.type != "cuda":
                    pass
                if x.device == torch.device("cuda") or x.device != torch.device("cuda:0"):
                    pass
                device_type = "cuda"
                return y
            """
        ),
        Valid(
            # Chosen under a test about CUDA: that is TDL311's business, not a hard-coded device.
            """
            import torch

            def step(model, x, use_cuda):
                if use_cuda:
                    model = model.cuda()
                y = x.cuda() if args.cuda else x
                if x.is_cuda:
                    y = y.to("cuda")
                return model(y)
            """
        ),
        Valid(
            # Code that only runs where CUDA is: decorated tests, tests of CUDA-named flags.
            """
            import unittest
            import torch

            class TestKernels(unittest.TestCase):
                @skip_if_lt_x_gpu(2)
                def test_copy(self):
                    x = torch.ones(3, device="cuda")
                    self.assertEqual(x.cuda(1).sum(), 3)

                @unittest.skipIf(not TEST_CUDA, "needs CUDA")
                def test_move(self):
                    return torch.zeros(2).to("cuda:0")

            class CUDATestBase:
                def setUp(self):
                    self.x = torch.ones(1).cuda()

            def benchmark_gpu(fn):
                cache = torch.empty(1024, device="cuda")

            class Fuzzer:
                def make(self, t, has_cuda_inputs):
                    if self._cuda:
                        t = t.cuda()
                    if has_cuda_inputs and self.backend == "nccl":
                        t = t.to("cuda")
                    return t
            """
        ),
        Valid(
            """
            def load(path):
                model = Model()
                model.to(device)
                numba_stream = cuda.stream()
                return model.to(torch_device), "cuda"
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            if not isinstance(func.value, cst.Name) or self.ctx.qualname(func.value) != "torch":
                self._check(node, self._cuda_method_fix)
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            args = positional(node)
            if args and _is_cuda_literal(args[0].value):
                self._check(args[0].value, self._literal_fix)
        elif self.ctx.qualname(func) == "torch.device":
            args = positional(node)
            if args and _is_cuda_literal(args[0].value):
                self._check(args[0].value, self._literal_fix)
        given = keyword(node, "device")
        if given is not None and _is_cuda_literal(given.value):
            self._check(given.value, self._literal_fix)

    def visit_Assign(self, node: cst.Assign) -> None:
        if not _is_cuda_literal(node.value):
            return
        for target in node.targets:
            name = dotted_name(target.target)
            if name is not None and _DEVICE_NAME.match(name.rsplit(".", 1)[-1]):
                self._check(node.value, self._literal_fix)
                return

    def _check(self, node: cst.BaseExpression, make_fix: Callable[[cst.BaseExpression], Fix | None]) -> None:
        scope = self.ctx.scope
        if (
            _in_comparison(node, self.ctx.ancestors)
            or availability_guarded(scope)
            or flag_condition(node, self.ctx.ancestors, scope, strict=False)
        ):
            return
        self.report(node, fix=make_fix(node))

    def _available(self) -> tuple[cst.Name, cst.IfExp] | None:
        torch = module_reference(self.ctx.scope, "torch")
        if torch is None:
            return None
        test = cst.Call(
            func=cst.Attribute(
                value=cst.Attribute(value=torch, attr=cst.Name("cuda")), attr=cst.Name("is_available")
            )
        )
        return torch, cst.IfExp(test=test, body=cst.SimpleString('"cuda"'), orelse=cst.SimpleString('"cpu"'))

    def _choice(self, literal: cst.SimpleString) -> cst.IfExp | None:
        found = self._available()
        return None if found is None else found[1].with_changes(body=literal)

    def _literal_fix(self, node: cst.BaseExpression) -> Fix | None:
        assert isinstance(node, cst.SimpleString)
        choice = self._choice(node)
        if choice is None:
            return None
        return Fix("unsafe", 'Use `"cuda" if torch.cuda.is_available() else "cpu"`', {node: choice})

    def _cuda_method_fix(self, node: cst.BaseExpression) -> Fix | None:
        assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        found = self._available()
        if found is None:
            return None
        torch, choice = found
        rest = list(node.args)
        args = positional(node)
        if args:
            index = args[0].value
            if not isinstance(index, cst.Integer) or rest[0] is not args[0]:
                return None
            choice = choice.with_changes(body=cst.SimpleString(f'"cuda:{index.value}"'))
            rest = rest[1:]
        if any(arg.keyword is None or arg.keyword.value != "non_blocking" for arg in rest):
            return None
        device = cst.Call(func=cst.Attribute(value=torch, attr=cst.Name("device")), args=[cst.Arg(choice)])
        first = cst.Arg(
            device,
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            if rest
            else cst.MaybeSentinel.DEFAULT,
        )
        fixed = node.with_changes(func=node.func.with_changes(attr=cst.Name("to")), args=[first, *rest])
        return Fix("unsafe", "Use `.to(torch.device(...))`", {node: fixed})


def _in_comparison(node: cst.CSTNode, ancestors: list[cst.CSTNode]) -> bool:
    """`d == torch.device("cuda")`: a test of a device, not a choice of one."""
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, cst.Comparison):
            return True
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.Arg, cst.FunctionDef)) and ancestor is not node:
            return False
    return False


def _is_cuda_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.SimpleString) and literal_device(node) == CUDA
