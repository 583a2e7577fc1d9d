"""TDL302 device-mismatch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import ACCELERATORS, OWN_TYPE
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.analysis.values import flow, kinds
from torchdev_lint.analysis.values.factory_values import unplaced_factory
from torchdev_lint.analysis.values.flow_classes import initialiser, input_device
from torchdev_lint.rule import Fix, Invalid, ProjectExample, Rule, Valid
from torchdev_lint.syntax import keyword, method_call, with_keyword

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

_SHOWN = 40


def _short(ctx: FileContext, node: cst.CSTNode) -> str:
    text = " ".join(ctx.code_for(node).split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


class DeviceMismatch(Rule):
    code = "TDL302"
    name = "device-mismatch"
    message = "Operands on different devices: this raises at run time; move one to the other's device"
    fix_availability = "sometimes"
    # A conflict needs a value known to be on an accelerator (a move, `device=`, a device variable)
    # or a module class's own parameters.
    triggers = (".cuda(", ".to(", "device", "Module")
    docs = """
        ## What it does
        Follows, within one function, where each tensor and module lives, and flags an operation
        whose operands are known to sit on different devices: a module moved to CUDA called with
        a tensor created on the CPU, arithmetic, `@`, `torch.cat`/`torch.stack` mixing CPU and
        CUDA tensors, indexing a CPU tensor with CUDA indices. A device chosen with
        `torch.device("cuda" if torch.cuda.is_available() else "cpu")` (or `torch.device("cuda") if
        ... else torch.device("cpu")`, `torch.accelerator.current_accelerator().type if
        torch.accelerator.is_available() else "cpu"`) counts as CUDA here: the
        program fails on every machine that has a GPU. A library function the library-models
        table knows to return a CPU tensor (`torchvision.transforms.functional.to_tensor(image)`,
        `torchvision.io.read_image(path)`) makes one. Values whose device is unknown (a
        `device` parameter, what a helper function returns) are never flagged, nor are two
        values on the same device variable, Python scalars, `.item()` results and CPU 0-dim
        tensors in arithmetic (PyTorch lets those mix).

        It also sees across the class boundary: what a plain class's `__init__` (or a
        `unittest.TestCase`'s `setUp`) places on an accelerator in `self.<attr>` is known in
        the class's other methods, so `self.model = Net().cuda()` in `setUp` followed by
        `self.model(torch.randn(2, 3))` in a test is reported. An attribute another method
        assigns or moves in place, one placed only under a condition, a decorated `setUp`, a
        class with a subclass in the file, an nn.Module (whose attributes follow its `.to()`)
        or a class deriving from another library's class are left unknown.

        Inside an nn.Module's own methods, its parameters and submodules are on the module's
        device, wherever `.to()` put it: host data made there (a factory without `device=`,
        `.cpu()`) that meets them, or a host tensor indexed with what they computed, fails once
        the module is on an accelerator (`steps = torch.arange(n); self.pos(steps)`). Not in
        `__init__` and the methods only it calls (the module is still where it was built), not
        in `self(...)` dummy passes, nor in classes that override `to` or `_apply`.

        Across files (`check`): an nn.Module subclass another file of the project defines (`from
        models import Encoder`) is known as the file's own classes are: `Encoder(16).to("cuda")`
        called with a host tensor is reported, unless the class has no parameters, buffers or
        stateful submodules, or moves data itself outside `__init__` (its inputs may be anywhere).

        ## Why it matters
        This is the error every PyTorch user meets first: `RuntimeError: Input type
        (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same` or
        `Expected all tensors to be on the same device, but found at least two devices, cuda:0
        and cpu!`. It often passes unnoticed on a laptop without a GPU and fails on the training
        machine; catching it statically saves the round trip.

        ## Example
        ```python
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = Net().to(device)
        x = torch.randn(8, 3, 224, 224)
        logits = model(x)
        ```

        ## Use instead
        ```python
        x = torch.randn(8, 3, 224, 224, device=device)
        logits = model(x)  # or model(x.to(device))
        ```

        ## Fix safety
        Unsafe: adds `.to(<the other operand's device>)` to the host-side operand (or to the
        module's input), naming the device variable when there is one. That is almost always the
        intent, but it adds a copy and changes where later code finds the result.
        """
    invalid = (
        Invalid(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(224, 10)
                    self.register_buffer("scale", torch.ones(10))

                def forward(self, x):
                    return self.fc(x)

            def main():
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model = Net().to(device)
                x = torch.randn(8, 3, 224, 224)
                return model(x)

            net = Net()
            net.to("cuda:0")
            print(net.scale * torch.arange(10))
            """,
            lines=(17, 21),
            fixed="""
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(224, 10)
                    self.register_buffer("scale", torch.ones(10))

                def forward(self, x):
                    return self.fc(x)

            def main():
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model = Net().to(device)
                x = torch.randn(8, 3, 224, 224)
                return model(x.to(device))

            net = Net()
            net.to("cuda:0")
            print(net.scale * torch.arange(10).to("cuda:0"))
            """,
        ),
        Invalid(
            """
            import torch
            import torchvision

            model = torchvision.models.resnet18()
            model.cuda()
            model.eval()
            image = torch.randn(3, 224, 224)
            print(model(image.unsqueeze(0)))
            """,
            lines=(8,),
            fixed="""
            import torch
            import torchvision

            model = torchvision.models.resnet18()
            model.cuda()
            model.eval()
            image = torch.randn(3, 224, 224)
            print(model(image.unsqueeze(0).to("cuda")))
            """,
        ),
        Invalid(
            """
            import torch

            def step(n):
                weights = torch.ones(n, 4).cuda()
                noise = torch.randn(n, 4)
                total = weights + noise
                both = torch.cat([weights, noise])
                return total, both, weights @ torch.eye(4)
            """,
            lines=(6, 7, 8),
            fixed="""
            import torch

            def step(n):
                weights = torch.ones(n, 4).cuda()
                noise = torch.randn(n, 4)
                total = weights + noise.to("cuda")
                both = torch.cat([weights, noise.to("cuda")])
                return total, both, weights @ torch.eye(4).to("cuda")
            """,
        ),
        Invalid(
            """
            import torch

            DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

            def lookup(table):
                ids = torch.tensor([1, 2]).to(DEVICE)
                rows = torch.zeros(5, 3)[ids]
                return rows
            """,
            lines=(7,),
            fixed="""
            import torch

            DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

            def lookup(table):
                ids = torch.tensor([1, 2]).to(DEVICE)
                rows = torch.zeros(5, 3)[ids.to("cpu")]
                return rows
            """,
        ),
        # Other spellings of a device that is CUDA (an accelerator) whenever one is available.
        Invalid(
            """
            import torch
            from torch import nn

            def classify(n):
                device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
                return nn.Linear(4, 2).to(device)(torch.randn(n, 4) * 2)

            def embed(ids):
                target = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
                table = nn.Embedding(10, 4).to(target)
                return table(torch.tensor([1, 2]))
            """,
            lines=(6, 11),
            fixed="""
            import torch
            from torch import nn

            def classify(n):
                device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
                return nn.Linear(4, 2).to(device)((torch.randn(n, 4) * 2).to(device))

            def embed(ids):
                target = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
                table = nn.Embedding(10, 4).to(target)
                return table(torch.tensor([1, 2]).to(target))
            """,
        ),
        # Across the class boundary: the model placed in `setUp`, called in a test.
        Invalid(
            """
            import unittest
            import torch
            from torch import nn

            class EncoderTest(unittest.TestCase):
                def setUp(self):
                    self.encoder = nn.Linear(3, 4).cuda()

                def test_shape(self):
                    out = self.encoder(torch.randn(2, 3))
                    self.assertEqual(out.shape, (2, 4))
            """,
            lines=(10,),
            fixed="""
            import unittest
            import torch
            from torch import nn

            class EncoderTest(unittest.TestCase):
                def setUp(self):
                    self.encoder = nn.Linear(3, 4).cuda()

                def test_shape(self):
                    out = self.encoder(torch.randn(2, 3).to("cuda"))
                    self.assertEqual(out.shape, (2, 4))
            """,
        ),
        # Inside a module's own methods: host data meets its parameters and submodules.
        Invalid(
            """
            import torch
            from torch import nn

            class RelativeBias(nn.Module):
                def __init__(self, heads, span):
                    super().__init__()
                    self.offsets = nn.Embedding(span, heads)
                    self.gain = nn.Parameter(torch.ones(heads))
                    self.pick = nn.Linear(heads, span)

                def forward(self, scores):
                    where = torch.arange(scores.size(-1))
                    bias = self.offsets(where) * self.gain
                    jitter = torch.rand(1, self.gain.numel()) * self.gain
                    return self.pick(bias + jitter).argmax(-1)

                def label(self, scores, names: torch.Tensor):
                    return names.cpu()[self.pick(scores).argmax(-1)]
            """,
            lines=(13, 14, 18),
            fixed="""
            import torch
            from torch import nn

            class RelativeBias(nn.Module):
                def __init__(self, heads, span):
                    super().__init__()
                    self.offsets = nn.Embedding(span, heads)
                    self.gain = nn.Parameter(torch.ones(heads))
                    self.pick = nn.Linear(heads, span)

                def forward(self, scores):
                    where = torch.arange(scores.size(-1), device=scores.device)
                    bias = self.offsets(where) * self.gain
                    jitter = torch.rand(1, self.gain.numel(), device=scores.device) * self.gain
                    return self.pick(bias + jitter).argmax(-1)

                def label(self, scores, names: torch.Tensor):
                    return names.cpu()[self.pick(scores).argmax(-1).to("cpu")]
            """,
        ),
    )
    valid = (
        # A module's own methods: the dummy pass of `__init__` and of a helper only it calls, `self(...)`,
        # data made where the input is (`zeros_like`, `.type_as(x)`, a 0-dim host tensor plus the input),
        # a 0-dim factor, a class placing itself its own way.
        Valid(
            # `x.data = x.data.to(d)` moves the tensor itself.
            """
            import torch
            from torch import nn

            def score(batch):
                head = nn.Linear(4, 2).cuda()
                features = torch.randn(len(batch), 4)
                features.data = features.data.cuda()
                return head(features)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Probe(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.body = nn.Linear(width, width)
                    self.size = self._measure(width)
                    self.scale = nn.Parameter(torch.ones(width))
                def _measure(self, width):
                    return self.body(torch.zeros(1, width)).shape[-1]
                def trace(self):
                    return torch.jit.trace(self, torch.zeros(1, self.size))(torch.zeros(1, self.size))
                def forward(self, x):
                    steps = torch.arange(x.shape[-1], device=x.device)
                    total = self.body(torch.add(torch.tensor(0.0), x) + torch.zeros_like(x))
                    noise = self.scale * torch.randn(x.shape[0], x.shape[-1]).type_as(x)
                    return self.body(x + steps) * torch.tensor(0.5) * self.scale + total + noise
            class Pinned(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.table = nn.Embedding(10, 4)
                def _apply(self, fn, recurse=True):
                    return self
                def forward(self, x):
                    return self.table(torch.arange(3)) + x
            """
        ),
        # `setUp` moves the input too; a test moves its input; a test rebinds the model.
        Valid(
            """
            import unittest
            import torch
            from torch import nn

            class EncoderTest(unittest.TestCase):
                def setUp(self):
                    self.encoder = nn.Linear(3, 4).cuda()
                    self.batch = torch.randn(2, 3).cuda()
                def test_batch(self):
                    self.encoder(self.batch)
                def test_moved(self):
                    self.encoder(torch.randn(2, 3).cuda())
            class RebindTest(unittest.TestCase):
                def setUp(self):
                    self.encoder = nn.Linear(3, 4).cuda()
                def test_cpu(self):
                    self.encoder = nn.Linear(3, 4)
                    self.encoder(torch.randn(2, 3))
            """
        ),
        # Unknown across the boundary: another method reassigns the attribute, `setUp` places it
        # only when CUDA is there, or `setUp` is an ordinary method of a class that is no TestCase.
        Valid(
            """
            import unittest
            import torch
            from torch import nn

            class ReloadTest(unittest.TestCase):
                def setUp(self):
                    self.encoder = nn.Linear(3, 4).cuda()
                def reload(self):
                    self.encoder = nn.Linear(3, 4)
                def test_shape(self):
                    self.encoder(torch.randn(2, 3))
            class GuardedTest(unittest.TestCase):
                def setUp(self):
                    self.encoder = nn.Linear(3, 4)
                    if torch.cuda.is_available():
                        self.encoder = self.encoder.cuda()
                def test_shape(self):
                    self.encoder(torch.randn(2, 3))
            class Harness:
                def setUp(self):
                    self.encoder = nn.Linear(3, 4).cuda()
                def check(self):
                    self.encoder(torch.randn(2, 3))
            """
        ),
        # Input moved to the model's device variable.
        Valid(
            """
            import torch
            from torch import nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            x = torch.randn(8, 4).to(device)
            y = model(x) + torch.zeros(8, 2, device=device)
            """
        ),
        # A `device` parameter and a helper's return are of unknown device.
        Valid(
            """
            import torch

            def run(model, device):
                model.to(device)
                x = torch.randn(8, 4)
                batch = make_batch()
                return model(x), batch + torch.ones(3).cuda()
            """
        ),
        # Scalars, `.item()` results and CPU 0-dim tensors mix with CUDA tensors.
        Valid(
            """
            import torch

            x = torch.randn(8, 4).cuda()
            scale = torch.randn(3).sum().item()
            y = x * 2.0 + scale + torch.tensor(1.5)
            """
        ),
        # Moved in one branch only: unknown afterwards.
        Valid(
            """
            import torch

            def f(flag):
                x = torch.randn(8, 4)
                if flag:
                    x = x.cuda()
                return x + torch.randn(8, 4)
            """
        ),
        # Rebound in a loop to a value of another device: unknown at the loop head.
        Valid(
            """
            import torch

            def f(n):
                x = torch.randn(8, 4).cuda()
                for _ in range(n):
                    y = x + torch.ones(8, 4).cuda()
                    x = torch.randn(8, 4)
                return y
            """
        ),
        # A module without parameters (a loss) runs wherever its inputs are.
        Valid(
            """
            import torch
            from torch import nn

            criterion = nn.CrossEntropyLoss().cuda()
            loss = criterion(torch.randn(4, 3), torch.tensor([0, 1, 2, 0]))
            """
        ),
        # Expected to fail: a test asserting the error.
        Valid(
            """
            import torch

            class T:
                def test_mismatch(self):
                    a = torch.ones(3, 3).cuda()
                    with self.assertRaises(RuntimeError):
                        a + torch.ones(3, 3)
            """
        ),
        # Indexing a CUDA tensor with CPU indices is allowed.
        Valid(
            """
            import torch

            x = torch.randn(5, 3).cuda()
            rows = x[torch.tensor([1, 2])]
            """
        ),
        # Code after return is unreachable.
        Valid(
            """
            import torch

            def f():
                x = torch.randn(3, 3).cuda()
                return x
                x + torch.randn(3, 3)
            """
        ),
    )
    projects = (
        # A module class another file of the project defines is known as the file's own are.
        ProjectExample(
            {
                "pyproject.toml": "",
                "blocks.py": """
                    from torch import nn

                    class Denoiser(nn.Module):
                        def __init__(self, width):
                            super().__init__()
                            self.proj = nn.Linear(width, width)
                        def forward(self, x):
                            return self.proj(x)
                """,
                "tests/test_blocks.py": """
                    import torch
                    from blocks import Denoiser

                    def test_shape():
                        net = Denoiser(16).to("cuda")
                        assert net(torch.randn(2, 16)).shape == (2, 16)
                """,
            },
            findings=("tests/test_blocks.py:6",),
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._sites: flow.SitesByUnit[cst.Call] = flow.SitesByUnit(ctx)
        self._initialised: dict[cst.FunctionDef, bool] = {}
        # Units whose code may name an accelerator (see `flow.may_mix_devices`).
        self._naming_accelerators: set[flow.Unit | None] = set()

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        raw = node.value  # `"cuda:1"`; an escape (`"\x63uda"`) might spell one too
        if "\\" in raw or any(name in raw for name in ACCELERATORS):
            self._naming_accelerators.add(flow.current_unit(self.ctx))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "current_accelerator":
            self._naming_accelerators.add(
                flow.current_unit(self.ctx)
            )  # `torch.accelerator.current_accelerator()`
        if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda"):
            if func.attr.value == "cuda" or any(isinstance(arg.value, cst.Integer) for arg in node.args):
                self._naming_accelerators.add(flow.current_unit(self.ctx))  # `.cuda()`, `.to(0)`
            self._sites.add(node)
        elif keyword(node, "device") is not None or self._uses_initialised_attributes():
            self._sites.add(node)
        elif flow.in_placed_method(self.ctx) and self._makes_host_data(node):
            self._naming_accelerators.add(flow.current_unit(self.ctx))  # may meet the module's own device
            self._sites.add(node)

    def _makes_host_data(self, node: cst.Call) -> bool:
        """A factory without `device=`, or `.cpu()`: host data, made in a method of a module."""
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cpu":
            return True
        return kinds.is_tensor_factory_call(node, self.ctx.scope) or kinds.constructs_module(
            node, self.ctx.scope
        )

    def _uses_initialised_attributes(self) -> bool:
        """Is the call in a method whose class placed `self.<attr>` on a device in `__init__`/`setUp`?"""
        unit = flow.current_unit(self.ctx)
        if not isinstance(unit, cst.FunctionDef):
            return False
        found = self._initialised.get(unit)
        if found is None:
            found = self._initialised[unit] = initialiser(unit, self.ctx) is not None
        return found

    def leave_scope(self, scope: Scope) -> None:
        if scope.kind == "function" and not flow.may_mix_devices(
            scope, scope.node in self._naming_accelerators, self.ctx
        ):
            self._sites.drop(scope)  # no device known there besides the CPU: nothing can conflict
            return
        taken = self._sites.take(scope)
        if taken is not None:
            created: set[cst.Call] = set()
            for conflict in taken[0].conflicts:
                self._report(conflict, scope, created)

    def _report(self, conflict: flow.Conflict, scope: Scope, created: set[cst.Call]) -> None:
        """`created`: the factories of the unit a fix already gives `device=` (one edit each)."""
        ctx = self.ctx
        moved, holder = _short(ctx, conflict.moved), _short(ctx, conflict.holder)
        target, source = conflict.target.describe(), conflict.moved_device.describe()
        own = conflict.target.type == OWN_TYPE
        later = ""
        if OWN_TYPE in (conflict.target.type, conflict.moved_device.type):
            later = ": this fails once the module is moved to an accelerator"
        if conflict.module_call:
            message = f"`{holder}` is on {target} but is called with `{moved}` on {source}{later}"
        else:
            message = (
                f"`{moved}` is on {source} but `{holder}` is on {target}{later or ': they cannot be mixed'}"
            )
        target_expr = (input_device(scope.node, ctx) if own else None) or conflict.target_expr
        fix = None
        if target_expr is not None:
            to = ctx.code_for(target_expr)
            factory = unplaced_factory(conflict.moved, scope) if own else None
            if factory is not None:
                message += f"; create it with `device={to}`"
                if factory not in created:
                    created.add(factory)
                    risk = f"`{moved}` is then made where `{to}` is, where code after it may expect {source}"
                    replacement = with_keyword(factory, "device", target_expr.deep_clone())
                    fix = Fix("unsafe", f"Create `{moved}` with `device={to}`", {factory: replacement}, risk)
            else:
                message += f"; move it with `.to({to})`"
                moved_to = method_call(conflict.moved, "to", [cst.Arg(target_expr.deep_clone())])
                risk = (
                    f"a copy of `{moved}` to `{to}` is made on each run, and the operation's result is on that "
                    f"device, where code after it may expect {source}"
                )
                fix = Fix("unsafe", f"Move `{moved}` with `.to({to})`", {conflict.moved: moved_to}, risk)
        self.report(conflict.node, message, fix)
