"""TDL301 hardcoded-cuda."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.placement.hardcoded_uses import HardcodedUses
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.rule import Fix, Invalid, ProjectExample, Rule, Valid

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


_FIX_TITLE = "Use one `device` variable chosen by `torch.cuda.is_available()`"
_FIX_RISK = "the code then also runs on the CPU where it failed before, hiding a misconfigured GPU job"
# The message where the move follows a tensor tested for CUDA (`if mask.is_cuda: filler = filler.cuda()`).
_FOLLOW = (
    "CUDA hard-coded to follow `{tensor}`: it means the current GPU, not `{tensor}`'s, and on MPS/XPU the "
    "tensors end up on different devices; use `.to({tensor}.device)` (or create the tensor there)"
)
_DEFAULT = (  # at `def __init__(self, device="cuda")` or `def f(x, device="cuda")` when no call passes it
    "`{parameter}` defaults to CUDA and no {call} of `{owner}` in the project passes it: the program "
    "always runs on CUDA (fails without a GPU, ignores MPS); choose the default by availability or pass it"
)


class HardcodedCuda(Rule):
    code = "TDL301"
    name = "hardcoded-cuda"
    message = (
        'Hard-coded CUDA device: fails on machines without a GPU; use one `device = torch.device("cuda" if '
        'torch.cuda.is_available() else "cpu")` (or take a device argument)'
    )
    fix_availability = "sometimes"
    triggers = ("cuda",)
    docs = """
        ## What it does
        Flags a CUDA device written into the code: `"cuda"`/`"cuda:N"` used as a device (`.to("cuda")`,
        `device="cuda"`, `torch.device("cuda")`, or assigned to a name that says device, `DEVICE = "cuda"`;
        the index may be computed, `f"cuda:{args.gpu}"`, `"cuda:%d" % rank`, then without a fix)
        and `.cuda()`/`.cuda(i)`, in a function that neither checks `torch.cuda.is_available()`/
        `torch.cuda.device_count()` (to choose: a check only printed or logged does not count) nor
        takes a device parameter (a device-index parameter does not excuse
        `.cuda(i)`: it still targets CUDA; a process rank counts only where the function places data with
        it). For top-level code, the module as a whole must check availability. Also `"cuda"` in a
        conditional whose test does not say CUDA is there (`"xpu" if xpu_ok() else "cuda"`). One finding per statement, however many uses it holds.
        Under a test of a tensor's own device (`if mask.is_cuda: filler = filler.cuda()`) the message says to
        follow it (`.to(mask.device)`): `.cuda()` picks the current GPU; on MPS/XPU they end up apart.

        Across files (`check`): a CUDA default of an `__init__` parameter (`def __init__(self,
        device="cuda")`) stored as `self.device` and used as a device, when the project constructs the class
        and no construction passes it (the program always runs on CUDA); likewise a module-level function's
        CUDA default that its body uses as a device (`def spectrum(x, device="cuda"): x.to(device)`) when the
        project calls it and no call passes it. Not for a class or function used as a value (a subclass,
        `partial(...)`, `pool.map(f, xs)`), decorated, building itself (`cls(...)`) or exported by a
        library's `__init__.py` (users call it), nor a call passing `**kwargs` or run only with CUDA.

        Not flagged:
        - code that runs only where CUDA is: after a gate in the function or in a caller in the file, however
          far up (also in every caller in the project's other files; for a method, every `x.name(...)`): `if not
          torch.cuda.is_available(): sys.exit(...)`, `assert torch.cuda.is_available()`,
          `init_process_group("nccl")`, a call that raises without a CUDA device (`torch.cuda.set_device(rank)`,
          `torch.cuda.synchronize()`, `torch.cuda.Stream()`: the library models), a call of a function that does one (or
          of a class whose `__init__` does: `Context(...)`); the methods of such a class (an instance exists
          only where CUDA is; not static or class methods, nor one `__init__` calls before its gate); in
          a file whose every `init_process_group` uses NCCL (or a setting or parameter defaulting to it,
          `kwargs.get("backend", "nccl")`, `def __init__(self, backend="nccl")`), or that starts none in a
          project whose every start does, past `if not dist.is_initialized(): return` (also through a helper
          of the file or of an imported project module) or `if get_world_size() == 1: return`, or under `if
          world_size > 1:`, for a size that is 1 without a group (a library's, a helper's, a local name bound
          once to one, a module-level `size = 1` only functions rebind to one; not a parameter), and a tensor
          handed to a collective (`dist.all_reduce(torch.tensor([n], device="cuda"))`, or `total = ...` then
          `dist.all_reduce(total)` later in the function, nothing returning or rebinding it in between),
          which NCCL needs on CUDA; a claim in the statement (`torch.device("cuda",
          torch.cuda.current_device())`); a device named (`target = torch.device("cuda:0")`) before such a gate of
          its block, nothing reading the name or leaving the block in between (naming a device touches no GPU;
          every use comes after the gate); tests skipped without CUDA
          (`@unittest.skipIf(not torch.cuda.is_available(), ...)`, `pytest.mark.skipif`, `pytestmark`,
          `@skip_if_lt_x_gpu(2)`, a decorator given a GPU count or flag: `@RunIf(min_cuda_gpus=1)`); `with torch.cuda.stream(s):` bodies; functions (methods through
          `self.helper()`) called only from such code; moves a test expects to fail (`self.assertRaises`,
          `pytest.raises`); `torch.device("cuda")` inside a `try:` that catches the error; modules that import
          a library known to need CUDA or a `*_cuda` extension (also unindented through project modules),
          build a CUDA extension as imported (`cpp_extension.load` of `.cu` sources) or live under a `cuda`
          folder; benchmark scripts; functions that profile CUDA (`activities=[..., ProfilerActivity.CUDA]`,
          `sort_by="self_cuda_time_total"`; not a profiler of the CPU alone);
        - the whole project, with `device-policy = "cuda-only"` in `[tool.torchdev-lint]`;
        - uses under a test that says CUDA is there (`if use_cuda:`, `if args.device == "cuda":`, `if not
          args.cpu:`, GPUs given by a setting named after them, `if self.gpus > 0:`, `if len(gpu_ids) > 0:`, a
          GPU index whose -1 means the CPU: `if args.gpu >= 0:`, `if opts.gpu_id != -1:`,
          `if gpus is not None:`, a name assigned such a test: `_HAS_FLEX = torch.cuda.is_available() and
          ...`) or about where data is kept (`if self.cpu_cache:`, `if offload:`); not under `if
          self.workers > 0:` nor `if t.device != torch.device("cuda"):`, which say nothing about CUDA;
        - a tensor's `.cuda()`/`.to("cuda")` as a statement, its result dropped (TDL306's bug); functions or
          classes about CUDA or host offloading by name (`class CUDATestBase`, `def enable_cpu_offload`) and
          methods that implement a move (`def to`); devices of fake tensors (`with FakeTensorMode():`); a device
          bound to a name its function never reads (dead code);
        - devices as data (dict keys, set members, subscripts, comparisons, decorator arguments such as
          `@pytest.mark.parametrize("device", ["cpu", "cuda"])`, other parameter defaults, names only handed
          to the code under test in a test that takes `monkeypatch`), settings (`cfg.MODEL.DEVICE = "cuda"`,
          `parser.set_defaults(device="cuda")`, a script's top-level `device = "cuda"` before its `exec(...)`
          of a configurator), device tests (`check_device(a, b, device="cuda")`), `autocast("cuda")`,
          `device_type="cuda"`, `GradScaler(device="cuda")` (a device type, as the two before),
          collections of backend names, and `torch.device("cuda" if torch.cuda.is_available() else "cpu")`.

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
        Unsafe. Every use goes through one variable defined once per module, after the imports: `device =
        torch.device("cuda" if torch.cuda.is_available() else "cpu")` (named `default_device` when the module
        already uses the name `device`), in the file's quote style. `.cuda()` becomes `.to(device)` (keeping
        `non_blocking=`), `"cuda"` and `torch.device("cuda")` become `device`; an assignment such as `DEVICE =
        "cuda"` becomes the choice itself (`DEVICE = "cuda" if torch.cuda.is_available() else "cpu"`) and is
        then reused as the module's variable. On a machine without CUDA the code then runs on the CPU instead
        of failing, which may hide a misconfigured GPU job; `.to()` exists on tensors and modules but perhaps
        not on every object with a `.cuda()` method; a string setting may become a `torch.device`. No fix for
        a default no call overrides (whether the class or function should default to the CPU or to a choice is
        the author's), a GPU index (`"cuda:1"`, `.cuda(i)`: one variable cannot stand for a chosen GPU), a branch
        of a conditional, a move that follows a tensor (its device is the answer), nor where the module
        does not import `torch` itself."""
    invalid = (
        Invalid(
            # Not a GPU index's test: another setting's sign; an index equal to -1 (the CPU).
            """
            import torch

            def place(net, opts):
                if opts.workers >= 0:
                    net = net.to(torch.device("cuda:0"))
                if opts.gpu == -1:
                    net = net.to(torch.device("cuda:2"))
                return net
            """,
            lines=(5, 7),
        ),
        Invalid(
            # A tensor made on CUDA and computed on inside a comparison: a use, not a device compared.
            """
            import torch

            def test_sum():
                assert torch.arange(4, device="cuda").sum().item() == 6
            """,
            lines=(4,),
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def test_sum():
                assert torch.arange(4, device=device).sum().item() == 6
            """,
        ),
        Invalid(
            # A decorator asking for no GPU at all (`min_gpus=0`) is no requirement.
            """
            import torch
            from testing_helpers import needs

            @needs(min_gpus=0)
            def test_ones():
                ones = torch.ones(2, device="cuda")
                assert ones.sum() == 2
            """,
            lines=(6,),
            fixed="""
            import torch
            from testing_helpers import needs

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            @needs(min_gpus=0)
            def test_ones():
                ones = torch.ones(2, device=device)
                assert ones.sum() == 2
            """,
        ),
        Invalid(
            # A gate after the use: the move runs before it (and the quick path returns without it).
            """
            import torch

            def describe(net, quick):
                net = net.cuda()
                if quick:
                    return net
                print(torch.cuda.get_device_name())
                return net
            """,
            lines=(4,),
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def describe(net, quick):
                net = net.to(device)
                if quick:
                    return net
                print(torch.cuda.get_device_name())
                return net
            """,
        ),
        Invalid(
            # An availability check only printed or logged chooses nothing.
            """
            import logging
            import torch

            def fit(model, x):
                print("CUDA:", torch.cuda.is_available())
                logging.info(f"{torch.cuda.device_count()} GPUs")
                return model.cuda()(x.cuda())
            """,
            lines=(7,),
            fixed="""
            import logging
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def fit(model, x):
                print("CUDA:", torch.cuda.is_available())
                logging.info(f"{torch.cuda.device_count()} GPUs")
                return model.to(device)(x.to(device))
            """,
        ),
        Invalid(
            # A CUDA device whose index is computed at run time: flagged, without a fix.
            """
            import torch

            def place(model, args):
                target = torch.device(f"cuda:{args.gpu}")
                return model.to(target), model.to("cuda:%d" % args.gpu)
            """,
            lines=(4, 5),
        ),
        Invalid(
            # The name `device` is taken; comparisons do not excuse the moves they guard.
            """
            import torch

            def to_gpu(device):
                return device

            def predict(model, batch):
                model = model.cuda()
                return model(batch.to('cuda')), torch.device('cuda')

            class Sampler:
                def register(self, name, value):
                    if value.device != torch.device('cuda'):
                        value = value.to(torch.device('cuda'))
                    setattr(self, name, value)
            """,
            lines=(7, 8, 13),
            fixed="""
            import torch

            default_device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')

            def to_gpu(device):
                return device

            def predict(model, batch):
                model = model.to(default_device)
                return model(batch.to(default_device)), default_device

            class Sampler:
                def register(self, name, value):
                    if value.device != torch.device('cuda'):
                        value = value.to(default_device)
                    setattr(self, name, value)
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
            # No fix: `torch` is not bound here; a GPU index (`.cuda(i)`, `"cuda:1"`); a sibling's assert
            # and a process rank that places nothing excuse nothing.
            """
            from torch import cuda, nn

            class Trainer:
                def setup(self):
                    self.model = nn.Linear(2, 2).cuda()
                    self.device = "cuda"
                    self.head = nn.Linear(2, 2).cuda(self.index)
                    self.mask = nn.Linear(2, 2).cuda(0), torch.ones(3, device="cuda:1")
                    self.model.cuda()
            def fused(x):
                assert cuda.is_available(), "the fused kernel needs a GPU"
                return x.to("cuda")
            def reference(x, rank):
                print(f"replica {rank}")
                return x.to("cuda")
            """,
            lines=(5, 6, 7, 8, 9, 15),
        ),
        Invalid(
            # A class whose `__init__` claims a GPU: its methods need an instance, which exists only where
            # CUDA is; not a method `__init__` calls before the claim, nor a class method. No fix (no `torch`).
            """
            from torch import cuda, nn

            class Worker:
                def __init__(self, rank):
                    self.warm()
                    cuda.set_device(rank)

                def warm(self):
                    return nn.Linear(2, 2).cuda()

                def run(self):
                    return nn.Linear(2, 2).cuda()

                @classmethod
                def spare(cls):
                    return nn.Linear(2, 2).cuda()
            """,
            lines=(9, 16),
        ),
        Invalid(
            # An unvouched CUDA fallback; a move following a tensor tested for CUDA; not a CUDA library.
            """
            import torch
            from mpu import get_cuda_rng_tracker

            def init_residual(weight, reduced_rank):
                compute_device = "xpu" if is_xpu_available() else "cuda"
                return weight.to(compute_device)

            def pad_mask(mask, width):
                filler = torch.zeros(mask.size(0), width)
                if mask.is_cuda:
                    filler = filler.cuda()
            """,
            lines=(5, 11),
        ),
        Invalid(
            # A process group joined only sometimes is no gate; nor is a world size taken as a parameter.
            """
            import torch

            def main(args):
                if args.distributed:
                    torch.distributed.init_process_group("nccl")
                model = build().cuda()
            def mean_loss(loss, replicas):
                if replicas > 1:
                    return loss.cuda() / replicas
            """,
            lines=(6, 9),
            fixed="""
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def main(args):
                if args.distributed:
                    torch.distributed.init_process_group("nccl")
                model = build().to(device)
            def mean_loss(loss, replicas):
                if replicas > 1:
                    return loss.to(device) / replicas
            """,
        ),
        Invalid(
            # A count that is not of GPUs; a profiler of the CPU alone; guards of a process group
            # of any backend (the file's `init_process_group` does not say NCCL).
            """
            import torch.distributed as dist
            import torch.profiler as profiler

            class Meter:
                def sync(self, x):
                    if self.workers > 0:
                        x = x.cuda()
                    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as p:
                        y = x.to("cuda")
                    print(p.key_averages().table(sort_by="cpu_time_total"))
                    if not dist.is_initialized():
                        return
                    dist.all_reduce(y.to("cuda"))

                def gather(self, y):
                    if dist.get_world_size() == 1:
                        return y
                    dist.all_reduce(y.to("cuda"))

            def init_distributed_mode(args):
                dist.init_process_group(backend=args.dist_backend, init_method="env://")
            """,
            lines=(7, 9, 13, 18),
        ),
    )
    valid = (
        # torch imported inside the function that gates (a CLI that imports torch lazily).
        Valid(
            """
            def serve(port):
                import torch

                print("serving on", torch.cuda.get_device_name())
                return torch.zeros(port, device="cuda")
            """
        ),
        # A test whose decorator asks for GPUs by a keyword (a project's own `RunIf`-style helper).
        Valid(
            """
            import torch
            from testing_helpers import needs

            @needs(min_gpus=2, slow=True)
            def test_split_across_devices():
                left = torch.ones(4, device="cuda:0")
                right = torch.ones(4, device="cuda:1")
                assert torch.equal(left.cpu(), right.cpu())
            """
        ),
        # A device named, then a call that raises without CUDA before anything reads the name.
        Valid(
            """
            import time
            import torch

            def throughput(net, batches):
                target = torch.device("cuda:0")
                torch.backends.cudnn.benchmark = True
                torch.cuda.synchronize()
                net = net.to(target)
                begin = time.perf_counter()
                for batch in batches:
                    net(batch.to(target, non_blocking=True))
                torch.cuda.synchronize()
                return len(batches) / (time.perf_counter() - begin)
            """
        ),
        # A test of a CUDA extension the module builds as it is imported (needs nvcc and a GPU).
        Valid(
            """
            import torch
            from torch.utils import cpp_extension
            ops = cpp_extension.load(name="blur", sources=["blur.cpp", "blur_kernel.cu"])
            def test_blur():
                assert ops.blur(torch.ones(4, device="cuda")).is_cuda
            """
        ),
        # A script's defaults that its configurator (`exec`'d below them) overrides from the command line.
        Valid(
            """
            import sys
            from pathlib import Path
            import torch
            device = "cuda"
            exec(Path(sys.argv[1]).read_text())  # the run's settings file may rebind `device`
            model = torch.nn.Linear(3, 4).to(device)
            """
        ),
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
            _HAS_FLEX = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (7, 5)
            def block_mask(ids, opt, y, bias):
                if _HAS_FLEX:
                    ids = ids.to("cuda")
                if y.is_cuda and bias.is_cuda:
                    y = y.cuda(bias.get_device())
                where = torch.device("cuda:%d" % y.get_device()) if y.is_cuda else torch.device("cpu")
                dev = torch.device("cuda" if opt["num_gpu"] != 0 else "cpu")
                return ids, torch.device("cuda", torch.cuda.current_device())
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
                scaler = torch.amp.GradScaler(device="cuda")  # a device type: disabled without CUDA
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
            def quantize(self, qtensor, meta):  # not torch's `.cuda()`: a quantizer's, own keywords
                self.quantizer.cuda(qtensor, meta=meta, device=self.keys.device)
            def load(path):  # names bound nowhere in the file; numba's `cuda`
                model = Model().to(device)
                numba_stream = cuda.stream()
                return model.to(torch_device), "cuda"
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
            # Chosen under a test that says CUDA is there (GPUs given: `self.gpus > 0`), or about where data is kept.
            """
            import torch

            def step(model, x, use_cuda, args):
                if use_cuda:
                    model = model.cuda()
                y = x.cuda() if args.cuda else x
                dev = torch.device("cpu" if args.cpu else "cuda")
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
                def sinkhorn(self, q):
                    if self.gpus > 0:
                        r = torch.ones(q.shape[0]).cuda(non_blocking=True) / q.shape[0]
                    else:
                        r = torch.ones(q.shape[0]) / q.shape[0]
                    return r, q.cuda() if len(self.gpu_ids) > 0 or self.gpus_per_node >= 1 else q
            """
        ),
        Valid(
            # A GPU index whose -1 means the CPU, by the convention of a `--gpu` option: the user chose CUDA.
            """
            import torch

            def place(net, opts):
                if opts.gpu_index > -1:
                    dev = torch.device(f"cuda:{opts.gpu_index}")
                else:
                    dev = torch.device("cpu")
                return net.to(dev)

            def restore(net, settings):
                if settings.gpu != -1:
                    net = net.cuda(settings.gpu)
                return net
            """
        ),
        Valid(
            # CUDA-only on purpose: decorated tests, tests of CUDA-named flags, benchmarks, profiling, streams.
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
            def profile(model, data):
                data = data.to(device="cuda")
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
                    model(data)
            def trace(model, p):
                model.to(device="cuda")
                print(p.key_averages().table(sort_by="self_cuda_time_total", row_limit=-1))
            def unpack(tensor, stream):
                with torch.cuda.stream(stream):
                    return tensor.to("cuda", non_blocking=True)
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
            # A program that cannot run without CUDA: the NCCL process group, then the rest of `run`
            # and what it calls, past an exit unless a group (NCCL's, in this file) is initialised, or
            # under a world size above 1 (a local name too); a test helper of tests skipped without CUDA.
            """
            import pytest
            import torch
            import torch.distributed as dist

            def join_group(cfg):
                dist.init_process_group(backend="nccl", init_method=cfg.rendezvous)
            def fit(net, batches):
                for images in batches:
                    net(images.cuda(non_blocking=True))
            def group_ready():
                if not dist.is_available() or not dist.is_initialized():
                    return False
                return True
            def share_counts(hits, seen):
                if not group_ready():
                    return
                dist.all_reduce(torch.tensor([hits, seen], device="cuda"))
            def replica_count():
                return dist.get_world_size() if group_ready() else 1
            def average(score):
                replicas = replica_count()
                if replicas > 1:
                    dist.all_reduce(torch.tensor([score], device="cuda"))
                if 2 > replica_count():
                    return score
                return torch.tensor([score], device="cuda") / replicas
            def run(cfg, batches):
                join_group(cfg)
                fit(make_net(cfg).cuda(), batches)
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
            # A probe that handles the failure; a device test; a private helper of skipped tests; a test
            # that expects the move to fail; a dropped move (TDL306's bug); cache keys in a faked test.
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
            def init_codebook(size):
                codebook = torch.randn(size)
                codebook.cuda()
            def test_cache_per_device(monkeypatch):
                monkeypatch.setattr("pkg.ops.build_table", lambda n, device: object())
                first = torch.device("cuda:0")
                second = torch.device("cuda:1")
                assert tables.get(4, first) is not tables.get(4, second)
            """
        ),
        Valid(
            # A device bound in a function that never reads it: dead code needs no GPU.
            """
            import torch

            def reproduce(cfg):
                eval_device = torch.device("cuda:1")
                runner = Runner(cfg, accelerate=True)
                return runner.run()
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
    )
    projects = (
        # A class whose `__init__` joins an NCCL group, in another file: constructing it is a gate, and
        # so is constructing `Trainer`, whose methods then run only where CUDA is; `probe` needs no instance.
        ProjectExample(
            {
                "mesh.py": """
                    import torch.distributed as dist

                    class Mesh:
                        def __init__(self, rank, size):
                            dist.init_process_group("nccl", rank=rank, world_size=size)
                """,
                "trainer.py": """
                    import torch
                    from mesh import Mesh

                    class Trainer:
                        def __init__(self, rank, size):
                            self.mesh = Mesh(rank, size)
                            self.scale = torch.ones(1, device="cuda")

                        def step(self, batch):
                            return batch.cuda() * self.scale

                        @staticmethod
                        def probe():
                            return torch.zeros(1).cuda()
                """,
            },
            findings=("trainer.py:14",),
        ),
        # The gate is in another file, in the caller's caller: `evaluate` and what it calls run only
        # where CUDA is; `export` has a caller without the gate.
        ProjectExample(
            {
                "engine.py": """
                    import torch

                    def _score(images):
                        return images.cuda().sum()
                    def evaluate(net, images):
                        return _score(net(images))
                    def export(net):
                        return net.cuda()
                """,
                "main.py": """
                    import sys
                    import torch
                    from engine import evaluate, export

                    def cli(net, images):
                        if torch.cuda.device_count() == 0:
                            sys.exit("the evaluation needs a GPU")
                        evaluate(net, images)
                    def convert(net):
                        return export(net)
                """,
            },
            findings=("engine.py:8",),
        ),
        # A tensor handed to a collective later in its function, in a program whose every process group
        # is NCCL's (the backend a parameter whose default is NCCL): NCCL needs it on CUDA. Not one
        # returned first, nor one rebound before the collective; and not in a program of another backend.
        ProjectExample(
            {
                "mesh.py": """
                    import torch.distributed as dist

                    class Mesh:
                        def __init__(self, size, backend="nccl"):
                            dist.init_process_group(backend=backend, world_size=size)
                """,
                "norms.py": """
                    import torch
                    import torch.distributed as dist

                    def global_norm(grads, group):
                        if grads:
                            norm = torch.stack([g.norm() for g in grads]).norm()
                        else:
                            norm = torch.zeros((), device="cuda")
                        dist.all_reduce(norm, group=group)
                        return norm
                    def seed_everyone(seed):
                        dist.broadcast(torch.tensor([seed], device="cuda"), src=0)
                    def early(grads, group):
                        norm = torch.zeros((), device="cuda")
                        if not grads:
                            return norm
                        dist.all_reduce(norm, group=group)
                    def rebound(group):
                        norm = torch.zeros((), device="cuda")
                        norm = norm.cpu()
                        dist.all_reduce(norm, group=group)
                """,
            },
            findings=("norms.py:14", "norms.py:19"),
        ),
        ProjectExample(
            {
                "mesh.py": """
                    import torch.distributed as dist

                    def join(size):
                        dist.init_process_group("gloo", world_size=size)
                """,
                "norms.py": """
                    import torch
                    import torch.distributed as dist

                    def seed_everyone(seed):
                        dist.broadcast(torch.tensor([seed], device="cuda"), src=0)
                """,
            },
            findings=("norms.py:5",),
        ),
        # A function's CUDA default that no call passes: the program always runs on CUDA. `denoise`
        # is also handed to `partial` with its device, so its calls are not all seen.
        ProjectExample(
            {
                "filters.py": """
                    import torch

                    def smooth(wave, width=5, device=torch.device("cuda")):
                        kernel = torch.ones(1, 1, width, device=device) / width
                        return torch.conv1d(wave.to(device), kernel)
                    def denoise(wave, device="cuda"):
                        return wave.to(device) * 0.5
                """,
                "pipeline.py": """
                    from functools import partial
                    from filters import denoise, smooth

                    def prepare(wave, target):
                        cleaned = partial(denoise, device=target)(wave)
                        return smooth(cleaned, width=9), denoise(wave)
                """,
            },
            findings=("filters.py:3",),
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.uses = HardcodedUses(ctx)  # one finding per statement, reported when the module ends

    def visit_Call(self, node: cst.Call) -> None:
        self.uses.call(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.uses.assign(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        call = "construction" if node.name.value == "__init__" else "call"
        for owner, param, default in self.uses.unpassed_defaults(node):
            self.report(default, _DEFAULT.format(parameter=param.name.value, call=call, owner=owner))

    def leave_scope(self, scope: Scope) -> None:
        if scope.kind != "module":
            return
        for uses in self.uses.take():
            message = None if uses.followed is None else _FOLLOW.format(tensor=uses.followed)
            replacements = uses.replacements()
            fix = None if replacements is None else Fix("unsafe", _FIX_TITLE, replacements, _FIX_RISK)
            self.report(uses.nodes[0], message, fix=fix)
