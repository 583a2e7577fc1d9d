"""TDL311 cuda-bool-device."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.context.cuda_only_code import test_path
from torchdev_lint.analysis.context.guards import flag_condition, is_cuda_flag
from torchdev_lint.analysis.context.requirements import cuda_requirements
from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.knowledge.tensor_types import legacy_type
from torchdev_lint.rule import Invalid, Rule, Valid

# `torch.accelerator` (current_accelerator, device_count, ...) first shipped in torch 2.6.
ACCELERATOR_SINCE = (2, 6)
_ACCELERATOR_HINT = " (default: `torch.accelerator.current_accelerator()`)"


class CudaBoolDevice(Rule):
    code = "TDL311"
    name = "cuda-bool-device"
    message = (
        "Device chosen by a boolean CUDA flag: it can only pick CUDA or the CPU, never MPS or XPU; "
        "take a `--device` option, pass `torch.device(args.device)` around and use `.to(device)`"
    )
    default_enabled = False
    triggers = ("cuda", "gpu", "GPU")
    docs = """
        ## What it does
        Flags a device chosen by a boolean flag instead of a `torch.device` value: a
        `.cuda()` or `.to("cuda")` that runs only under a CUDA flag (`if cuda: x = x.cuda()`,
        `if args.cuda: model.cuda()`, `x.cuda() if args.cuda else x`, `if not args.cpu:`),
        reported at the move; and a legacy tensor class chosen by one
        (`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`), reported at the
        assignment. A flag is a name or attribute carried around such as `cuda`, `use_cuda`,
        `use_gpu`, `gpu`, `cuda_enabled`, `no_cuda`, `cpu` (negated), `self.is_cuda` where the
        class stores a flag there (`self.is_cuda = cuda`, a parameter, `True`/`False`), a GPU count
        compared with a number (`n_gpu > 0`; `device_count() > 1` asks for a second GPU and is
        not one), or one of these compared with strings, its modes (`use_cuda == "all"`,
        `self.use_cuda in ["all", "batch"]`), also combined with an availability check
        (`torch.cuda.is_available() and not args.cpu`).

        Not flagged: `if torch.cuda.is_available():` on its own (an availability check, not a
        flag carried around), tests about a tensor (`if x.is_cuda:`, and `if self.is_cuda:` where
        the class stores a placement, `next(model.parameters()).is_cuda`, or never assigns it: a
        tensor subclass's own), a device string (`args.device == "cuda"`), and flags in code that
        runs only where CUDA is (after `if not torch.cuda.is_available(): sys.exit()`, an NCCL
        process group, in a test skipped without CUDA; see TDL301), where a flag such as
        `if args.cpu_offload:` chooses host or GPU memory, not the device, and test files (a
        `cuda` parameter of a test helper chooses which backends a test covers). With
        `device-policy = "cuda-only"` in `[tool.torchdev-lint]` the rule is silent.

        ## Why it matters
        A boolean can only say "CUDA or not". Code written this way cannot run on Apple's
        MPS, Intel's XPU or a second GPU without edits at every flag test, and the test is
        repeated at every move, where forgetting one gives a device-mismatch error.
        `torch.device("cuda" if use_cuda else "cpu")` carries the same boolean; a device
        named by the user (a `--device` option) or found by `torch.accelerator` serves every
        backend.

        ## Example
        ```python
        use_cuda = torch.cuda.is_available() and not args.cpu
        if use_cuda:
            model.cuda()
        x = x.cuda() if use_cuda else x
        ```

        ## Use instead
        ```python
        parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps, xpu, ...")
        ...
        if args.device:
            device = torch.device(args.device)
        else:  # torch >= 2.6
            device = torch.accelerator.current_accelerator() or torch.device("cpu")
        model.to(device)
        x = x.to(device)
        ```

        ## Fix safety
        No fix: the flag is usually also used elsewhere (logging, `pin_memory`, AMP), and
        replacing it by a device needs a decision about where that device comes from.
        Opt-in, since the pattern is common in working code. The message mentions
        `torch.accelerator` only when `target-torch-version` is 2.6 or later.
        """
    invalid = (
        Invalid(
            """
            import torch
            cuda = torch.cuda.is_available()
            Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor

            def step(model, x, args):
                if args.cuda:
                    model.cuda()
                    x = x.to("cuda")
                y = x.cuda() if args.use_gpu else x
                if not args.no_cuda:
                    y = y.cuda()
                return model(y)
            """,
            lines=(3, 7, 8, 9, 11),
        ),
        Invalid(
            """
            import torch

            if torch.cuda.is_available() and not args.cpu:
                model = model.cuda()
            if n_gpu > 0 and torch.cuda.device_count() >= 1:
                batch = batch.cuda()
            if use_cuda:
                LongTensor = torch.cuda.LongTensor
            if args.cpu:
                pass
            else:
                model.cuda()
            """,
            lines=(4, 6, 8, 12),
        ),
        Invalid(
            # A flag the class stores as `self.is_cuda`, and a flag whose values are mode strings.
            """
            from torch import nn

            class Profile(nn.Module):
                def __init__(self, cuda: bool = False):
                    super().__init__()
                    self.is_cuda = cuda

                def fit(self, data):
                    for batch in data:
                        if self.is_cuda:
                            batch = batch.cuda()
                        self(batch)

            class Runner:
                def __init__(self, model, use_cuda=None):
                    self.model = model
                    self.use_cuda = use_cuda
                    if use_cuda is not None and use_cuda == "all":
                        self.model = model.cuda()

                def run(self, batch):
                    if self.use_cuda in ["all", "batch"]:
                        self.model.cuda()
                    if self.use_cuda not in ("none", "model"):
                        batch = batch.cuda()
                    return self.model(batch)
            """,
            lines=(11, 19, 23, 25),
        ),
    )
    valid = (
        Valid(
            """
            import torch
            use_cuda = torch.cuda.is_available()
            device = torch.device("cuda" if use_cuda else "cpu")
            model = model.to(device)
            loader = DataLoader(ds, pin_memory=use_cuda)
            if use_cuda:
                x = x.to(device)
                torch.backends.cudnn.benchmark = True
            """
        ),
        Valid(
            # Follows a tensor's device, not a flag; moves outside any flag test.
            """
            import torch

            def step(x, y):
                if x.is_cuda:
                    y = y.cuda()
                if x.device.type == "cuda":
                    y = y.to("cuda")
                if torch.cuda.device_count() > 1:
                    y = y.cuda(1)
                return x.cuda(), y
            """
        ),
        Valid(
            # `self.is_cuda` that follows a tensor's placement, or that the class does not store.
            """
            import torch

            class Scorer:
                def __init__(self, model, device: torch.device):
                    self.model = model
                    self.is_cuda = next(model.parameters()).is_cuda

                def score(self, x, args):
                    if self.is_cuda:
                        x = x.cuda()
                    if args.device == "cuda":
                        x = x.to("cuda")
                    return self.model(x)

            class Packed(torch.Tensor):
                def pinned(self, other):
                    if self.is_cuda:
                        other = other.cuda()
                    return other
            """
        ),
        Valid(
            """
            import torch
            Tensor = torch.cuda.FloatTensor if x.is_cuda else torch.FloatTensor
            Other = torch.cuda.FloatTensor
            Checked = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor
            """
        ),
        Valid(
            # An availability check is not a flag carried around.
            """
            import torch

            class Quantizer:
                def __init__(self, centroids):
                    self.centroids = torch.from_numpy(centroids)
                    if torch.cuda.is_available():
                        self.centroids = self.centroids.cuda()
            """
        ),
        Valid(
            # A program that cannot run without CUDA: the flag keeps data in host or GPU memory.
            """
            import sys
            import torch

            def main(args):
                if not torch.cuda.is_available():
                    sys.exit("this trainer needs a GPU")
                feats = extract(args)
                if not args.cpu:
                    feats = feats.cuda()
            """
        ),
        Valid(
            """
            import torch

            def step(model, use_cuda):
                if use_cuda:
                    model.cuda()
            """,
            settings={"device_policy": "cuda-only"},
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("cuda", "to"):
            return
        if (
            func.attr.value == "cuda"
            and isinstance(func.value, cst.Name)
            and self.ctx.qualname(func.value) == "torch"
        ):
            return
        move = as_move(node, self.ctx.scope)
        if move is None or move.device.type != "cuda":
            return
        if flag_condition(node, self.ctx.ancestors, self.ctx.scope) is not None:
            self._report(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        scope = self.ctx.scope
        if isinstance(value, cst.IfExp):
            if is_cuda_flag(value.test, scope, availability=False) and legacy_type(value, scope) is not None:
                self._report(node)
            return
        kind = legacy_type(value, scope)
        if kind is not None and kind.cuda and flag_condition(node, self.ctx.ancestors, scope) is not None:
            self._report(node)

    def _report(self, node: cst.CSTNode) -> None:
        """Report unless the program cannot run without CUDA (there a flag places memory) or is a test."""
        settings = self.ctx.settings
        if (
            settings.device_policy == "cuda-only"
            or test_path(self.ctx.path)
            or cuda_requirements(self.ctx.scope, self.ctx.path, self.ctx.project).requires_cuda(node)
        ):
            return
        hint = _ACCELERATOR_HINT if settings.target_torch_version >= ACCELERATOR_SINCE else ""
        self.report(node, self.message + hint)
