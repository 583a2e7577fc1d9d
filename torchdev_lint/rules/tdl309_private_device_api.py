"""TDL309 private-device-api."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.rule import Invalid, Rule, Valid

_DEVICE_INDEX = "`torch.device(device).index` (or `torch.cuda.current_device()` when it is None)"
# The private helpers that parse or place devices AND have a public wrapper to use
# instead (torch's own public functions call exactly these). A private helper with
# no public equivalent (`_parse_to`, `_cuda_isInBadFork`, ...) cannot be replaced,
# so a warning there would only be noise.
PUBLIC_REPLACEMENT = {
    "torch._utils._get_device_index": _DEVICE_INDEX,
    "torch.cuda._utils._get_device_index": _DEVICE_INDEX,
    "torch._C._cuda_getDeviceCount": "`torch.cuda.device_count()`",
    "torch._C._cuda_getDevice": "`torch.cuda.current_device()`",
    "torch._C._cuda_setDevice": "`torch.cuda.set_device()`",
    "torch._C._cuda_synchronize": "`torch.cuda.synchronize()`",
    "torch._C._cuda_emptyCache": "`torch.cuda.empty_cache()`",
    "torch._C._cuda_getCurrentStream": "`torch.cuda.current_stream()`",
    "torch._C._cuda_getDefaultStream": "`torch.cuda.default_stream()`",
    "torch._C._cuda_getArchFlags": "`torch.cuda.get_arch_list()`",
    "torch._C._cuda_memoryStats": "`torch.cuda.memory_stats()`",
    "torch._C._cuda_resetPeakMemoryStats": "`torch.cuda.reset_peak_memory_stats()`",
    "torch._C._cuda_setMemoryFraction": "`torch.cuda.set_per_process_memory_fraction()`",
    "torch._C._cuda_memorySnapshot": "`torch.cuda.memory_snapshot()`",
    "torch._C._cuda_ipc_collect": "`torch.cuda.ipc_collect()`",
    "torch._C._cuda_init": "`torch.cuda.init()`",
    "torch._C._cuda_get_sync_debug_mode": "`torch.cuda.get_sync_debug_mode()`",
    "torch._C._cuda_set_sync_debug_mode": "`torch.cuda.set_sync_debug_mode()`",
}


class PrivateDeviceApi(Rule):
    code = "TDL309"
    name = "private-device-api"
    message = (
        "Private torch device helper: it may change or vanish in any release; use its public wrapper "
        "(`torch.device(...).index`, `torch.cuda.device_count()`, `torch.cuda.synchronize()`, ...)"
    )
    triggers = ("_get_device_index", "_cuda_")
    docs = """
        ## What it does
        Flags calls of private PyTorch helpers that parse or place devices and have a public
        wrapper to use instead: `torch._utils._get_device_index` (also in `torch.cuda._utils`)
        and the `torch._C._cuda_*` bindings behind `torch.cuda.device_count()`,
        `current_device()`, `set_device()`, `synchronize()`, `empty_cache()`, the stream and
        memory-statistics functions. The message names the public replacement. Private helpers
        with no public equivalent (`torch._C._nn._parse_to`, `torch._C._cuda_isInBadFork`, ...)
        and other private APIs (JIT fuser switches, API-usage telemetry) are not flagged: there
        is no better line to write.

        ## Why it matters
        These helpers carry no compatibility promise: their signatures and return values have
        changed between releases (`_parse_to` gained a fourth result; `_get_device_index` moved
        between modules), and the `_C._cuda_*` bindings skip the lazy initialisation and error
        checks of their public wrappers. Code using them breaks on upgrade, or on a build
        without CUDA, with errors far from the cause.

        ## Example
        ```python
        from torch._utils import _get_device_index
        index = _get_device_index(device, optional=True)
        count = torch._C._cuda_getDeviceCount()
        ```

        ## Use instead
        ```python
        device = torch.device(device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        count = torch.cuda.device_count()
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
            """,
            lines=(2, 3),
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
            # No public equivalent: nothing better to write.
            """
            import torch
            device, dtype, non_blocking, fmt = torch._C._nn._parse_to(*args, **kwargs)
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
    )

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualname(node.func)
        replacement = None if name is None else PUBLIC_REPLACEMENT.get(name)
        if name is not None and replacement is not None:
            message = (
                f"Private torch device helper `{name.rsplit('.', 1)[1]}`: it may change or vanish "
                f"in any release; use {replacement}"
            )
            self.report(node, message)
