"""Code that is CUDA-only by what it imports or builds, or by where it lives.

A module importing a CUDA-only library (TensorRT, CuPy, a `*_cuda` extension), building a CUDA
extension as it is imported (`cpp_extension.load(sources=[..., "kernel.cu"])`), or living in a
`cuda` folder never meets a CPU-only machine (`requirements.CudaRequirements` asks here); test,
benchmark and CUDA-specific paths are told by their names.
"""

from __future__ import annotations

import os

import libcst as cst

from torchdev_lint.analysis.context.guards import BENCHMARK_WORDS
from torchdev_lint.analysis.knowledge.cuda_modules import cuda_only_module, own_package
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, resolve
from torchdev_lint.syntax import keyword, positional

_CUDA_PATH_WORDS = frozenset({"cuda", "nccl", "cudnn"})
# Builders of C++/CUDA extensions at import time, by last name.
BUILDERS = {
    "load": "torch.utils.cpp_extension.load",
    "load_inline": "torch.utils.cpp_extension.load_inline",
}


def cuda_specific_path(path: str) -> bool:
    """A file in a CUDA-only part of a package: `torch/cuda/memory.py`, `ops/nccl_utils.py`.

    Folders count by their whole name only: a checkout in `~/cuda_only_tests/` proves nothing.
    A file name counts when it starts with the word (`cuda_graphs.py`): `infer_on_cuda.py` is
    a script that may well be meant to run anywhere.
    """
    folders, stem = _path_parts(path)
    first = stem.lower().lstrip("_").split("_", 1)[0]
    return bool(_CUDA_PATH_WORDS & folders or first in _CUDA_PATH_WORDS)


def benchmark_path(path: str) -> bool:
    """A benchmark script (`benchmarks/attention.py`, `benchmark_kernels.py`): it measures a GPU on purpose."""
    folders, stem = _path_parts(path)
    return bool(BENCHMARK_WORDS & folders or BENCHMARK_WORDS & set(stem.lower().split("_")))


def test_path(path: str) -> bool:
    """A test file (`tests/...`, `test_x.py`, `x_test.py`, `torch/testing/...`)."""
    folders, stem = _path_parts(path)
    return bool({"test", "tests", "testing"} & folders) or test_file_name(stem)


def test_file_name(stem: str) -> bool:
    """A file named like a test module by pytest's conventions: `test_x`, `x_test` (no extension)."""
    return stem.startswith("test_") or stem.endswith("_test")


def test_module(path: str, scope: Scope) -> bool:
    """A test module by name (`test_x.py`, `x_test.py`, `conftest.py`), or one that imports pytest
    or unittest: tests, or helpers written for them (`torch/testing/_internal/common_quantization.py`)."""
    stem = _path_parts(path)[1]
    if test_file_name(stem) or stem == "conftest":
        return True
    return any(
        binding.import_target is not None and binding.import_target.split(".")[0] in ("pytest", "unittest")
        for bindings in scope.module.bindings.values()
        for binding in bindings
    )


def _path_parts(path: str) -> tuple[set[str], str]:
    """The folder names (lower case) and the file name without extension."""
    parts = os.path.normpath(path).replace(os.sep, "/").split("/")
    return {part.lower() for part in parts[:-1]}, os.path.splitext(parts[-1])[0]


def _module_names(node: cst.Import | cst.ImportFrom) -> list[str]:
    if isinstance(node, cst.Import):
        return [n for alias in node.names if (n := dotted_name(alias.name)) is not None]
    if node.relative or node.module is None:
        return []
    base = dotted_name(node.module)
    if base is None:
        return []
    names = [base]
    if not isinstance(node.names, cst.ImportStar):
        names += [f"{base}.{alias.name.value}" for alias in node.names if isinstance(alias.name, cst.Name)]
    return names


def imports_cuda_only(node: cst.Import | cst.ImportFrom, path: str) -> bool:
    """An import of a CUDA-only library by the file at `path`."""
    return any(cuda_only_module(name) and not own_package(name, path) for name in _module_names(node))


def imports_cuda_only_dynamically(call: cst.Call) -> bool:
    """`importlib.import_module("fused_adam_cuda")`, `optional_import("tensorrt")`."""
    name = dotted_name(call.func)
    if name is None or name.rsplit(".", 1)[-1] not in ("import_module", "optional_import"):
        return False
    args = positional(call)
    if not args or not isinstance(args[0].value, cst.SimpleString):
        return False
    text = args[0].value.evaluated_value
    return isinstance(text, str) and cuda_only_module(text)


def _strings(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The string literals of a list or tuple of sources, or the literal itself."""
    if isinstance(node, (cst.List, cst.Tuple)):
        return [element.value for element in node.elements]
    return [node]


def compiles_cuda(call: cst.Call, scope: Scope) -> bool:
    """`cpp_extension.load(..., sources=["ops.cpp", "ops_kernel.cu"])`, `load_inline(..., cuda_sources=...)`:
    the module builds a CUDA extension as it is imported, which needs the CUDA toolkit and a GPU."""
    if resolve(call.func, scope) not in BUILDERS.values():
        return False
    if keyword(call, "cuda_sources") is not None:
        return True
    return any(
        isinstance(node, cst.SimpleString)
        and isinstance(text := node.evaluated_value, str)
        and text.endswith((".cu", ".cuh"))
        for arg in call.args
        for node in _strings(arg.value)
    )
