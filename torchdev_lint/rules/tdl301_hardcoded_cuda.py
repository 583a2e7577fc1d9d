"""TDL301 hardcoded-cuda."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.devices import CUDA, literal_device
from torchdev_lint.analysis.guards import availability_guarded, flag_condition, is_availability_call
from torchdev_lint.analysis.requirements import benchmark_path, cuda_requirements
from torchdev_lint.analysis.scopes import Scope, dotted_name, module_reference, resolve
from torchdev_lint.analysis.walk import walk
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import keyword, positional

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext
    from torchdev_lint.rule import Replacement

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
        device, `DEVICE = "cuda"`) and `.cuda()`/`.cuda(i)`, in a function that neither checks
        `torch.cuda.is_available()`/`torch.cuda.device_count()` nor takes a device parameter
        (a device-index parameter does not excuse `.cuda(i)`: it still targets CUDA). For
        top-level code, the module as a whole must check availability somewhere. One finding
        per statement, however many uses it holds.

        Not flagged:
        - code that runs only where CUDA is: after a gate in the same function or a caller in
          the same file (`if not torch.cuda.is_available(): sys.exit(...)`, `assert
          torch.cuda.is_available()`, `torch.distributed.init_process_group("nccl")`,
          `torch.cuda.set_device(rank)`, or a call such as `init_distributed_mode(args)` of a
          function of the file that does one), tests skipped without CUDA
          (`@unittest.skipIf(not torch.cuda.is_available(), ...)`, `pytest.mark.skipif`,
          `pytestmark`, `@skip_if_lt_x_gpu(2)`), bodies of `with torch.cuda.stream(s):`,
          functions (and private methods, through `self._helper()`) called only from such code,
          moves a test expects to fail (`with self.assertRaises(...)`, `pytest.raises`),
          `torch.device("cuda")` looked up inside `try:` that catches the error (`except RuntimeError:`),
          modules that import a CUDA-only library
          (TensorRT, CuPy, apex, a `*_cuda` extension) or live under a `cuda` folder, and
          benchmark scripts;
        - the whole project, with `device-policy = "cuda-only"` in `[tool.torchdev-lint]`;
        - uses under a test that says CUDA is there (`if use_cuda:`, `if x.is_cuda:`,
          `if args.device == "cuda":`, `if not args.cpu:`) or about where data is kept
          (`if self.cpu_cache:`, `if offload:`); not under `if t.device != torch.device("cuda"):`,
          which says nothing about CUDA being there;
        - functions or classes about CUDA or host offloading by name (`class CUDATestBase`,
          `def enable_cpu_offload`) and methods that implement a move (`def to`);
        - device objects used as data (dict keys, set members, subscripts, comparisons,
          decorator arguments such as `@pytest.mark.parametrize("device", ["cpu", "cuda"])`,
          parameter defaults), settings (`cfg.MODEL.DEVICE = "cuda"`, `args.device = "cuda"`,
          `parser.set_defaults(device="cuda")`), device tests (`check_device(a, b, device="cuda")`),
          `autocast("cuda")`, `device_type="cuda"`,
          tuples and lists of backend names, and
          `torch.device("cuda" if torch.cuda.is_available() else "cpu")`.

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

        def predict(model, batch):
            model = model.to(device)
            return model(batch.to(device))
        ```

        ## Fix safety
        Unsafe. Every use goes through one variable defined once per module, after the imports:
        `device = torch.device("cuda" if torch.cuda.is_available() else "cpu")` (named
        `default_device` when the module already uses the name `device`), in the file's quote
        style. `.cuda()` becomes `.to(device)` (keeping `non_blocking=`), `"cuda"` and
        `torch.device("cuda")` become `device`; an assignment such as `DEVICE = "cuda"` becomes
        the choice itself (`DEVICE = "cuda" if torch.cuda.is_available() else "cpu"`) and is then
        reused as the module's variable. On a machine without CUDA the code then runs on the CPU
        instead of failing, which may hide a misconfigured GPU job; `.to()` exists on tensors and
        modules but perhaps not on every object with a `.cuda()` method; a string setting may
        become a `torch.device`. No fix for a GPU index (`"cuda:1"`, `.cuda(i)`: one variable
        cannot stand for a chosen GPU), nor where the module does not import `torch` itself.
        """
    invalid = (
        Invalid(
            """
            import torch

            def predict(model, batch):
                model = model.cuda()
                return model(batch.to('cuda')), torch.device('cuda')
            """,
            lines=(4, 5),
            fixed="""
            import torch

            device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')

            def predict(model, batch):
                model = model.to(device)
                return model(batch.to(device)), device
            """,
        ),
        Invalid(
            # The module's own choice is reused; a device-index parameter does not excuse `.cuda(i)`.
            """
            import torch as T
            import torch.nn as nn
            DEVICE = "cuda"

            def place(model, batch, gpu_id):
                return model.cuda(), batch.cuda(non_blocking=True), model.cuda(gpu_id)
            """,
            lines=(3, 6),
            fixed="""
            import torch as T
            import torch.nn as nn
            DEVICE = "cuda" if T.cuda.is_available() else "cpu"

            def place(model, batch, gpu_id):
                return model.to(DEVICE), batch.to(DEVICE, non_blocking=True), model.cuda(gpu_id)
            """,
        ),
        Invalid(
            # The name `device` is taken; comparisons do not excuse the moves they guard.
            """
            import torch

            def to_gpu(device):
                return device

            class Sampler:
                def register(self, name, value):
                    if value.device != torch.device("cuda"):
                        value = value.to(torch.device("cuda"))
                    setattr(self, name, value)
            """,
            lines=(9,),
            fixed="""
            import torch

            default_device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def to_gpu(device):
                return device

            class Sampler:
                def register(self, name, value):
                    if value.device != torch.device("cuda"):
                        value = value.to(default_device)
                    setattr(self, name, value)
            """,
        ),
        Invalid(
            # No fix: `torch` is not bound here; a GPU index (`.cuda(i)`, `"cuda:1"`).
            """
            from torch import nn

            class Trainer:
                def setup(self):
                    self.model = nn.Linear(2, 2).cuda()
                    self.device = "cuda"
                    self.head = nn.Linear(2, 2).cuda(self.index)
                    self.mask = nn.Linear(2, 2).cuda(0), torch.ones(3, device="cuda:1")
            """,
            lines=(5, 6, 7, 8),
        ),
        Invalid(
            # A process group joined only sometimes is no gate.
            """
            import torch

            def main(args):
                if args.distributed:
                    torch.distributed.init_process_group("nccl")
                model = build().cuda()
            """,
            lines=(6,),
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def main(args):
                if args.distributed:
                    torch.distributed.init_process_group("nccl")
                model = build().to(device)
            """,
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
            # Not devices: autocast's device type, backend-name collections, comparisons, data.
            """
            import torch
            import pytest
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

            STREAMS = {torch.device("cuda:0"): 0, torch.device("cuda:1"): 1}
            SEEN = {torch.device("cuda")}

            @pytest.mark.parametrize("device", [torch.device("cpu"), torch.device("cuda")])
            def test_shapes(device, cache, limit=torch.device("cuda")):
                return cache[torch.device("cuda:0")]
            """
        ),
        Valid(
            # Settings: whoever runs the program overrides them.
            """
            import argparse

            _C.MODEL.DEVICE = "cuda"
            cfg.device = "cuda"

            def options():
                parser = argparse.ArgumentParser()
                parser.add_argument("--device", default="cuda")
                parser.set_defaults(device="cuda")
                return dict(device="cuda")
            """
        ),
        Valid(
            # Chosen under a test that says CUDA is there, or about where data is kept.
            """
            import torch

            def step(model, x, use_cuda, args):
                if use_cuda:
                    model = model.cuda()
                y = x.cuda() if args.cuda else x
                if x.is_cuda:
                    y = y.to("cuda")
                if not args.cpu:
                    model.cuda()
                if ProfilerActivity.CUDA in args.activities:
                    model.device = "cuda"
                if args.cpu:
                    pass
                else:
                    y = y.cuda()
                return model(y)

            class Propagation:
                def forward(self, feats):
                    if self.cpu_cache:
                        feats = [f.cuda() for f in feats]
                    return feats
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
            # A program that cannot run without CUDA: the NCCL process group, then the rest of main
            # and what main calls; a test helper called only from a test skipped without CUDA.
            """
            import os
            import pytest
            import torch
            import torch.distributed as dist

            def init_distributed_mode(args):
                args.dist_backend = "nccl"
                dist.init_process_group(backend=args.dist_backend, init_method="env://")

            def train(model, loader):
                for x in loader:
                    model(x.cuda(non_blocking=True))

            def main(args):
                init_distributed_mode(args)
                model = build(args).cuda()
                train(model, loader)

            def _loader():
                return Prefetcher(device=torch.device("cuda"))

            @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is required")
            def test_prefetch():
                assert next(iter(_loader())).is_cuda

            def test_half():
                if not torch.cuda.is_available():
                    pytest.skip("needs a GPU")
                x = torch.ones(2, device="cuda").half()

            def worker(rank):
                torch.cuda.set_device(rank)
                torch.zeros(1).cuda()
            """
        ),
        Valid(
            # Code under a CUDA stream, a module built on a CUDA-only library.
            """
            import tensorrt as trt
            import torch

            def run(engine, x):
                return engine.execute(x.to("cuda:0"))

            def unpack(tensor, stream):
                with torch.cuda.stream(stream):
                    return tensor.to("cuda", non_blocking=True)
            """
        ),
        Valid(
            # A probe that handles the failure; a device test; a private helper of skipped tests;
            # a test that expects the move to fail.
            """
            import unittest
            import torch

            class TestRemote(unittest.TestCase):
                def test_unsupported(self):
                    with self.assertRaisesRegex(ValueError, "not supported"):
                        remote_module.cuda()

            def backend_of(group):
                try:
                    return group.get_backend(torch.device("cuda"))
                except RuntimeError:
                    return group.get_backend(torch.device("cpu"))

            def should_decompose(a, b):
                return check_device(a, b, device="cuda")

            class TestCollectives(unittest.TestCase):
                def _helper(self, rank):
                    return torch.ones(2).cuda(rank)

                @skip_if_lt_x_gpu(2)
                def test_all_reduce(self):
                    self._helper(0)

                @skip_if_lt_x_gpu(2)
                def test_broadcast(self):
                    self._helper(1)
            """
        ),
        Valid(
            # The project says it is CUDA-only.
            """
            import torch
            model = Net().cuda()
            """,
            settings={"device_policy": "cuda-only"},
        ),
        Valid(
            # Not torch's `.cuda()`: a quantizer's method with its own keywords.
            """
            import torch

            def quantize(self, qtensor, meta):
                self.quantizer.cuda(qtensor, meta=meta, device=self.keys.device)
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

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # One finding per statement: the sites of each statement, reported when the module ends.
        self._statements: dict[int, list[_Site]] = {}
        self._names_in_use: set[str] | None = None

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.settings.device_policy == "cuda-only":
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            if isinstance(func.value, cst.Name) and self.ctx.qualname(func.value) == "torch":
                return
            if all(arg.keyword is None or arg.keyword.value in _CUDA_METHOD_KEYWORDS for arg in node.args):
                self._check(node, node, self._cuda_method_edit(node), device_parameter=False)
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            args = positional(node)
            if args and _is_cuda_literal(args[0].value):
                self._check(args[0].value, node, self._literal_edit(args[0].value))
        elif self.ctx.qualname(func) == "torch.device":
            args = positional(node)
            if (
                args
                and _is_cuda_literal(args[0].value)
                and not self._used_as_data()
                and not _probed(self.ctx.ancestors)
            ):
                self._check(args[0].value, node, self._device_call_edit(node))
        given = keyword(node, "device")
        if given is not None and _is_cuda_literal(given.value) and not _configures(node):
            self._check(given.value, node, self._literal_edit(given.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if self.ctx.settings.device_policy == "cuda-only" or not _is_cuda_literal(node.value):
            return
        for target in node.targets:
            name = dotted_name(target.target)
            if name is not None and _DEVICE_NAME.match(name.rsplit(".", 1)[-1]) and not _is_config(name):
                self._check(node.value, node, self._choice_edit(node.value))
                return

    def leave_scope(self, scope: Scope) -> None:
        if scope.kind != "module":
            return
        for sites in self._statements.values():
            self.report(sites[0].node, fix=self._statement_fix(sites))

    # Detection -------------------------------------------------------------

    def _check(
        self,
        node: cst.BaseExpression,
        site: cst.CSTNode,
        edit: _Edit | None,
        *,
        device_parameter: bool = True,
    ) -> None:
        """Record a hard-coded use at `node` (inside `site`, the call or assignment) unless it is harmless."""
        scope = self.ctx.scope
        if (
            _in_comparison(node, self.ctx.ancestors)
            or availability_guarded(scope, device_parameter=device_parameter)
            or flag_condition(node, self.ctx.ancestors, scope, strict=False)
            or _expected_to_raise(self.ctx.ancestors)
            or benchmark_path(self.ctx.path)
            or cuda_requirements(scope, self.ctx.path, self.ctx.project).requires_cuda(site)
        ):
            return
        statement = next(a for a in reversed(self.ctx.ancestors) if isinstance(a, cst.BaseStatement))
        self._statements.setdefault(id(statement), []).append(_Site(node, edit))

    def _used_as_data(self) -> bool:
        """`{torch.device("cuda:0"): ...}`, set members, subscripts, test parameters, parameter defaults."""
        child = self.ctx.ancestors[-1]
        for ancestor in reversed(self.ctx.ancestors[:-1]):
            if isinstance(ancestor, (cst.Set, cst.SubscriptElement, cst.Decorator, cst.Param)):
                return True
            if isinstance(ancestor, cst.DictElement):
                return child is ancestor.key
            if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement, cst.Arg)):
                return False
            child = ancestor
        return False

    # Fixes: every use goes through one `device` variable -------------------

    def _literal_edit(self, literal: cst.BaseExpression) -> _Edit | None:
        """`"cuda"` → `device`; an indexed `"cuda:1"` names one GPU and has no fix."""
        if not isinstance(literal, cst.SimpleString) or literal.evaluated_value != "cuda":
            return None
        return self._through_variable(literal, lambda name: name)

    def _device_call_edit(self, call: cst.Call) -> _Edit | None:
        """`torch.device("cuda")` → `device`; as the value of an assignment it becomes the choice itself."""
        if len(call.args) != 1:
            return None
        if isinstance(self.ctx.parent(), cst.Assign):
            return self._choice_edit(call.args[0].value)
        literal = call.args[0].value
        if not isinstance(literal, cst.SimpleString) or literal.evaluated_value != "cuda":
            return None
        return self._through_variable(call, lambda name: name)

    def _cuda_method_edit(self, call: cst.Call) -> _Edit | None:
        """`x.cuda(non_blocking=True)` → `x.to(device, non_blocking=True)`; `.cuda(1)` has no fix."""
        assert isinstance(call.func, cst.Attribute)
        if positional(call) or any(arg.star for arg in call.args):
            return None
        func = call.func.with_changes(attr=cst.Name("to"))
        rest = list(call.args)

        def moved(name: cst.Name) -> cst.BaseExpression:
            comma = (
                cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if rest else cst.MaybeSentinel.DEFAULT
            )
            return call.with_changes(func=func, args=[cst.Arg(name, comma=comma), *rest])

        return self._through_variable(call, moved)

    def _choice_edit(self, literal: cst.BaseExpression) -> _Edit | None:
        """`DEVICE = "cuda"` → `DEVICE = "cuda" if torch.cuda.is_available() else "cpu"`: the one definition."""
        if not isinstance(literal, cst.SimpleString):
            return None
        choice = self._choice(literal, literal)
        return None if choice is None else _Edit(literal, choice, None)

    def _choice(self, at: cst.CSTNode, cuda: cst.SimpleString | None = None) -> cst.IfExp | None:
        """`"cuda" if torch.cuda.is_available() else "cpu"`, in the quotes legal at `at`."""
        torch = module_reference(self.ctx.scope, "torch")
        cpu = self.ctx.string("cpu", at=at)
        cuda = cuda or self.ctx.string("cuda", at=at)
        if torch is None or cpu is None or cuda is None:
            return None
        available = cst.Attribute(
            value=cst.Attribute(value=torch, attr=cst.Name("cuda")), attr=cst.Name("is_available")
        )
        return cst.IfExp(test=cst.Call(func=available), body=cuda, orelse=cpu)

    def _through_variable(
        self, old: cst.BaseExpression, build: Callable[[cst.Name], cst.BaseExpression]
    ) -> _Edit | None:
        """Replace `old` by an expression of the module's device variable, defining it if needed."""
        scope = self.ctx.scope
        existing = self._existing_definition()
        if existing is not None:
            return _Edit(old, build(cst.Name(existing)), None)
        if module_reference(scope.module, "torch") is None or _top_level_index(self.ctx.ancestors) is None:
            return None
        name = self._free_name()
        anchor = self._anchor()
        site_index = _top_level_index(self.ctx.ancestors)
        if name is None or anchor is None or (not self._in_function() and site_index <= anchor[0]):
            return None
        definition = self._definition(name, anchor[1])
        if definition is None:
            return None
        return _Edit(old, build(cst.Name(name)), (anchor[1], definition))

    def _existing_definition(self) -> str | None:
        """A module-level name bound once to the device choice, visible here and defined before this code."""
        module = self.ctx.scope.module
        body = module.node.body  # type: ignore[attr-defined]
        site_index = _top_level_index(self.ctx.ancestors)
        for name, bindings in module.bindings.items():
            if (
                len(bindings) != 1
                or bindings[0].value is None
                or not self._is_choice(bindings[0].value, module)
            ):
                continue
            found = self.ctx.scope.lookup(name)
            if found is None or found[0] is not module:
                continue
            index = next((i for i, s in enumerate(body) if _contains(s, bindings[0].node)), None)
            if index is not None and (self._in_function() or (site_index or 0) > index):
                return name
        return None

    def _in_function(self) -> bool:
        """Code in a function runs after the module has been executed, definitions included."""
        return any(isinstance(a, (cst.FunctionDef, cst.Lambda)) for a in self.ctx.ancestors)

    def _is_choice(self, value: cst.BaseExpression, scope: Scope) -> bool:
        """`"cuda" if torch.cuda.is_available() else "cpu"`, bare or in `torch.device(...)`."""
        if (
            isinstance(value, cst.Call)
            and resolve(value.func, scope) == "torch.device"
            and len(value.args) == 1
        ):
            value = value.args[0].value
        return (
            isinstance(value, cst.IfExp)
            and is_availability_call(value.test, scope)
            and literal_device(value.body) == CUDA
            and isinstance(value.body, cst.SimpleString)
            and value.body.evaluated_value == "cuda"
            and literal_device(value.orelse) == "cpu"
        )

    def _free_name(self) -> str | None:
        """`device`, unless the module already uses that name anywhere (then another)."""
        if self._names_in_use is None:
            self._names_in_use = _names_in_use(self.ctx.module)
        return next((n for n in _DEFINITION_NAMES if n not in self._names_in_use), None)

    def _anchor(self) -> tuple[int, cst.BaseStatement] | None:
        """The top-level statement after which the definition goes: the import of torch and the imports after it."""
        body = self.ctx.module.body
        torch = module_reference(self.ctx.scope.module, "torch")
        bindings = self.ctx.scope.module.bindings.get(torch.value, []) if torch is not None else []
        start = next(
            (i for i, s in enumerate(body) for b in bindings if b.import_target and _contains(s, b.node)),
            None,
        )
        if start is None:
            return None
        end = start
        while end + 1 < len(body) and _is_import_line(body[end + 1]):
            end += 1
        return end, body[end]

    def _definition(self, name: str, anchor: cst.BaseStatement) -> cst.SimpleStatementLine | None:
        torch = module_reference(self.ctx.scope.module, "torch")
        choice = self._choice(anchor)
        if torch is None or choice is None:
            return None
        value = cst.Call(func=cst.Attribute(value=torch, attr=cst.Name("device")), args=[cst.Arg(choice)])
        return cst.SimpleStatementLine(
            body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value)],
            leading_lines=[cst.EmptyLine()],
        )

    def _statement_fix(self, sites: list[_Site]) -> Fix | None:
        """One fix for every use in the statement, plus the definition when the module lacks one."""
        edits = [site.edit for site in sites if site.edit is not None]
        edits = [e for e in edits if not any(o is not e and _contains(o.old, e.old) for o in edits)]
        if not edits:
            return None
        replacements: dict[cst.CSTNode, Replacement] = {e.old: e.new for e in edits}
        definition = next((e.definition for e in edits if e.definition is not None), None)
        if definition is not None:
            anchor, statement = definition
            replacements[anchor] = cst.FlattenSentinel([anchor, statement])
        return Fix("unsafe", "Use one `device` variable chosen by `torch.cuda.is_available()`", replacements)


_CUDA_METHOD_KEYWORDS = frozenset({"device", "non_blocking", "memory_format"})
_DEFINITION_NAMES = ("device", "default_device", "compute_device")
# Owners whose attributes are configuration: `cfg.MODEL.DEVICE`, `args.device`, `self.config.device`.
_CONFIG_OWNERS = frozenset(
    {
        "cfg",
        "config",
        "conf",
        "configs",
        "args",
        "opt",
        "opts",
        "hparams",
        "options",
        "settings",
        "defaults",
        "hp",
        "_c",
    }
)
# Calls that build configuration rather than tensors: `parser.set_defaults(device="cuda")`, `dict(device="cuda")`.
_CONFIG_CALLS = frozenset(
    {
        "set_defaults",
        "add_argument",
        "dict",
        "update",
        "setdefault",
        "SimpleNamespace",
        "Namespace",
        "EasyDict",
        "edict",
        "create",
    }
)


@dataclass(frozen=True)
class _Edit:
    """One use rewritten; `definition` is the (anchor, statement) that defines the variable, when missing."""

    old: cst.CSTNode
    new: cst.BaseExpression
    definition: tuple[cst.BaseStatement, cst.SimpleStatementLine] | None


@dataclass(frozen=True)
class _Site:
    node: cst.BaseExpression
    edit: _Edit | None


def _is_config(name: str) -> bool:
    """`cfg.MODEL.DEVICE`, `args.device`, `self.config.device`: a setting, overridden by whoever runs the code."""
    owners = name.split(".")[:-1]
    return any(part.lower() in _CONFIG_OWNERS or (part.isupper() and len(part) > 1) for part in owners)


def _configures(call: cst.Call) -> bool:
    """A call that records or tests a device rather than placing data: `set_defaults(device=...)`,
    `check_device(a, b, device="cuda")`."""
    name = dotted_name(call.func)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1]
    return last in _CONFIG_CALLS or last.startswith(("check", "is_", "has_"))


def _probed(ancestors: list[cst.CSTNode]) -> bool:
    """Inside `try:` with a handler for the error a missing GPU raises: a device looked up, expecting failure.

    Only for device objects (`group.get_backend(torch.device("cuda"))`): a move under such a
    `try:` usually guards against something else (out of memory) and still breaks without a GPU.
    """
    child: cst.CSTNode | None = None
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, cst.Try) and child is ancestor.body:
            return any(_catches_missing_gpu(handler) for handler in ancestor.handlers)
        child = ancestor
    return False


def _expected_to_raise(ancestors: list[cst.CSTNode]) -> bool:
    """Under `with self.assertRaises(...)` / `with pytest.raises(...)`: the test wants it to fail."""
    for ancestor in ancestors:
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                call = item.item
                name = dotted_name(call.func) if isinstance(call, cst.Call) else None
                if name is not None and name.rsplit(".", 1)[-1].startswith(("assertRaises", "raises")):
                    return True
    return False


def _catches_missing_gpu(handler: cst.ExceptHandler) -> bool:
    """`except:`, `except Exception`, `except RuntimeError`, `except (AssertionError, ...)`."""
    if handler.type is None:
        return True
    types = (
        [e.value for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) else [handler.type]
    )
    names = {dotted_name(t) for t in types}
    return bool(names & {"Exception", "BaseException", "RuntimeError", "AssertionError"})


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


def _top_level_index(ancestors: list[cst.CSTNode]) -> int | None:
    """Index in the module body of the top-level statement holding the current node."""
    if len(ancestors) < 2 or not isinstance(ancestors[0], cst.Module):
        return None
    statement = ancestors[1]
    return next((i for i, s in enumerate(ancestors[0].body) if s is statement), None)


def _contains(outer: cst.CSTNode, inner: cst.CSTNode | None) -> bool:
    if inner is None:
        return False
    found = outer is inner

    def enter(node: cst.CSTNode) -> None:
        nonlocal found
        found = found or node is inner

    if not found:
        walk(outer, enter, lambda node: None)
    return found


def _is_import_line(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _names_in_use(module: cst.Module) -> set[str]:
    """Every name the module binds or reads (not attribute names or keyword-argument names)."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = []

    def enter(node: cst.CSTNode) -> None:
        parent = stack[-1] if stack else None
        stack.append(node)
        if not isinstance(node, cst.Name):
            return
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            return
        names.add(node.value)

    walk(module, enter, lambda node: stack.pop())
    return names
