"""Which imported modules need CUDA: the names alone tell (no LibCST here, so pass 1 can ask of a
file's import lines before parsing it, and a warm run need not load LibCST)."""

from __future__ import annotations

import os

from torchdev_lint.analysis.knowledge.library_models import Fact, apis

# Words that name CUDA (`nccl` is CUDA-only: code under `if backend == "nccl":` runs with GPUs).
CUDA_WORDS = frozenset({"cuda", "gpu", "gpus", "nccl"})
# First words of functions about CUDA, imported from a module that is not CUDA-only: `has_cuda`, `is_cuda_...`.
_FUNCTION_WORDS = frozenset({"is", "has", "get", "set", "use", "with", "enable", "disable", "requires", "no"})


def cuda_only_module(name: str) -> bool:
    """`tensorrt`, `apex.amp`, `fused_layer_norm_cuda`, `numba.cuda`, `nccl_ops`; not `torch.cuda` (it
    has a CPU side), nor a function named after CUDA (`get_cuda_rng_tracker`, `is_torch_cuda_available`)."""
    root = name.split(".", 1)[0]
    if root in apis(Fact.CUDA_ONLY):
        return True
    return root != "torch" and any(_names_cuda_module(part) for part in name.split("."))


def _names_cuda_module(part: str) -> bool:
    """A module name that starts or ends with a CUDA word (`xentropy_cuda`, `cuda`, `nccl_utils`) and is
    not a question or an action about CUDA (`has_cuda`, `get_cuda_rng_tracker`)."""
    words = part.lower().split("_")
    return (words[0] in CUDA_WORDS or words[-1] in CUDA_WORDS) and words[0] not in _FUNCTION_WORDS


def own_package(module: str, path: str) -> bool:
    """An absolute import of the file's own package (`from yolox.utils import gpu_mem_usage` in
    `yolox/core/trainer.py`): like a relative one, it names project code, CUDA-only by what it
    imports in turn (`analysis/project/context_facts.py`), not by its name."""
    return module.split(".", 1)[0] in os.path.normpath(path).replace(os.sep, "/").split("/")[:-1]
