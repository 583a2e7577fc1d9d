"""TDL309 private-device-api."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.rule import Invalid, Rule, Valid

# Exactly the private helpers that parse or place devices. Other private torch
# APIs (JIT fuser switches, telemetry, ...) are someone else's business.
_EXACT = frozenset({"torch._C._nn._parse_to", "torch._utils._get_device_index"})
_CUDA_UTILS = "torch.cuda._utils."
_C_CUDA = "torch._C._cuda_"


def is_private_device_api(name: str | None) -> bool:
    """Is this resolved name one of the private device helpers?"""
    if name is None:
        return False
    if name in _EXACT:
        return True
    if name.startswith(_CUDA_UTILS):
        return "." not in name[len(_CUDA_UTILS) :]
    return name.startswith(_C_CUDA) and "." not in name[len(_C_CUDA) :]


class PrivateDeviceApi(Rule):
    code = "TDL309"
    name = "private-device-api"
    message = (
        "private torch device helper: it may change or vanish in any release; use the public API "
        "(`torch.device`, `torch.cuda.current_device()`, `torch.accelerator`)"
    )
    triggers = ("_parse_to", "_get_device_index", "_utils", "_cuda_")
    docs = """
        ## What it does
        Flags calls of private PyTorch helpers that parse or place devices:
        `torch._C._nn._parse_to`, `torch._utils._get_device_index`, anything in
        `torch.cuda._utils`, and the `torch._C._cuda_*` bindings. Other private APIs (JIT fuser
        switches, API-usage telemetry) are not flagged.

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
            device, dtype, non_blocking, fmt = torch._C._nn._parse_to(*args, **kwargs)
            count = torch._C._cuda_getDeviceCount()
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
        if is_private_device_api(self.ctx.qualname(node.func)):
            self.report(node)
