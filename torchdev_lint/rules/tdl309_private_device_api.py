"""TDL309 private-device-api."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.knowledge.torch_api import PRIVATE_DEVICE_HELPERS
from torchdev_lint.rule import Invalid, Rule, Valid


class PrivateDeviceApi(Rule):
    code = "TDL309"
    name = "private-device-api"
    message = (
        "Private torch device helper: it may change or vanish in any release; use the public API "
        "(`torch.device(...).index`, `torch.cuda.device_count()`, `torch.cuda.synchronize()`, "
        "`super().to(...)` in a `to()` override, ...)"
    )
    triggers = ("_get_device_index", "_cuda_", "_parse_to")
    docs = """
        ## What it does
        Flags calls of private PyTorch helpers that parse or place devices and have a public
        line to write instead: `torch._utils._get_device_index` (also in `torch.cuda._utils`, and as
        `torch.cuda._get_device_index`),
        `torch._C._nn._parse_to`, and the `torch._C._cuda_*` bindings behind
        `torch.cuda.device_count()`, `current_device()`, `set_device()`, `synchronize()`,
        `empty_cache()`, `current_blas_handle()`, the stream and memory-statistics functions. The message names the
        public replacement.

        `_parse_to` is how a `to()` override learns where the module is going. The public
        line: call `super().to(*args, **kwargs)` and read the device from a parameter or buffer
        afterwards (`next(self.parameters()).device`), or keep the device in a registered buffer
        (`self.register_buffer("device_anchor", torch.empty(0), persistent=False)`, whose
        `.device` follows every move). Earlier versions did not flag `_parse_to`, taking it to
        have no public equivalent.

        Private helpers with no public line at all (`torch._C._cuda_isInBadFork`,
        `torch._C._cuda_clearCublasWorkspaces`, ...) and other private APIs (JIT fuser
        switches, API-usage telemetry) are not flagged.

        ## Why it matters
        These helpers carry no compatibility promise: their signatures and return values have
        changed between releases (`_parse_to` gained a fourth result; `_get_device_index` moved
        between modules), and the `_C._cuda_*` bindings skip the lazy initialisation and error
        checks of their public wrappers. Code using them breaks on upgrade, or on a build
        without CUDA, with errors far from the cause. A `to()` override that records the device
        `_parse_to` parsed also misses every move that does not call it: `.cuda()`, `.cpu()`,
        and moving a parent module (which moves its children through `_apply`, not `to()`),
        so the recorded device goes stale; a parameter's or buffer's device never does.

        ## Example
        ```python
        from torch._utils import _get_device_index
        index = _get_device_index(device, optional=True)
        count = torch._C._cuda_getDeviceCount()

        class Sampler(nn.Module):
            def to(self, *args, **kwargs):
                self.device = torch._C._nn._parse_to(*args, **kwargs)[0]
                return super().to(*args, **kwargs)
        ```

        ## Use instead
        ```python
        device = torch.device(device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        count = torch.cuda.device_count()

        class Sampler(nn.Module):
            def to(self, *args, **kwargs):
                moved = super().to(*args, **kwargs)
                self.device = next(moved.parameters()).device
                return moved
        ```

        ## Fix safety
        No fix: the public replacement depends on what the code needs from the helper.
        """
    invalid = (
        Invalid(
            """
            import torch
            count = torch._C._cuda_getDeviceCount()
            torch._C._cuda_synchronize()
            index = torch.cuda._get_device_index("cuda:1", optional=True)
            handle = torch._C._cuda_getCurrentBlasHandle()
            """,
            lines=(2, 3, 4, 5),
        ),
        Invalid(
            """
            from torch._utils import _get_device_index
            from torch.cuda import _utils as cuda_utils

            def index_of(device):
                return _get_device_index(device, optional=True)

            major = cuda_utils._get_device_index(0)
            """,
            lines=(5, 7),
        ),
        Invalid(
            # A `to()` override parsing its own arguments: `super().to()` then read a buffer.
            """
            import torch
            from torch import nn

            class Codebook(nn.Module):
                def to(self, *args, **kwargs):
                    target, _, _, _ = torch._C._nn._parse_to(*args, **kwargs)
                    self.lookup_device = target
                    return super().to(*args, **kwargs)
            """,
            lines=(6,),
        ),
        Invalid(
            # However it is imported, and wherever its result is taken apart.
            """
            from torch._C._nn import _parse_to
            import torch._C._nn as private_nn

            class Mixin:
                def to(self, *args, **kwargs):
                    where = _parse_to(*args, **kwargs)[0]
                    dtype = private_nn._parse_to(*args, **kwargs)[1]
                    return super().to(*args, **kwargs)
            """,
            lines=(6, 7),
        ),
    )
    valid = (
        Valid(
            """
            import torch
            torch._C._jit_set_profiling_executor(False)
            torch._C._jit_override_can_fuse_on_gpu(True)
            torch._C._log_api_usage_once("my_library.feature")
            torch._C._set_grad_enabled(True)
            """
        ),
        Valid(
            # No public line at all: nothing better to write.
            """
            import torch
            if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
                torch._C._cuda_clearCublasWorkspaces()
            assert not torch._C._cuda_isInBadFork()
            """
        ),
        Valid(
            """
            import torch
            count = torch.cuda.device_count()
            index = torch.cuda.current_device()
            device = torch.device("cuda", index)
            torch.cuda.set_device(device)
            """
        ),
        Valid(
            """
            from mylib._utils import _get_device_index
            index = _get_device_index(device)
            """
        ),
        Valid(
            # The public line for a `to()` override, and a project's own `_parse_to`.
            """
            import torch
            from torch import nn
            from .args import _parse_to

            class Vocoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("anchor", torch.empty(0), persistent=False)

                def to(self, *args, **kwargs):
                    moved = super().to(*args, **kwargs)
                    self.output_device = moved.anchor.device
                    return moved

            size, unit = _parse_to("3 GB")
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualname(node.func)
        replacement = None if name is None else PRIVATE_DEVICE_HELPERS.get(name)
        if name is not None and replacement is not None:
            message = (
                f"Private torch device helper `{name.rsplit('.', 1)[1]}`: it may change or vanish "
                f"in any release; use {replacement}"
            )
            self.report(node, message)
