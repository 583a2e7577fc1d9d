"""A module that imports, whenever it is imported, a project module needing a CUDA-only library
(issue 23, tune4: a TensorRT deployment's server model imports the project's engine wrapper,
which imports `tensorrt`): it cannot be imported where CUDA is missing, so a hard-coded `"cuda"` in
it cannot fail for want of a GPU (TDL301), through any number of such imports. An import that may
fail quietly (under `try:`, in a function), or an engine whose CUDA-only import is itself
indented, keeps the finding; so does a file that merely sits beside the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import findings, write_files

_ENGINE = """
import cupy
import torch

class Kernels:
    def run(self, x):
        return torch.as_tensor(cupy.asarray(x))
"""
_SERVER = """
import torch
from kernels import Kernels

class Handler:
    def __init__(self):
        self.device = torch.device("cuda")
        self.kernels = Kernels()
"""
_FOUND = ["deploy/server.py:7 TDL301"]


def test_a_module_importing_a_cuda_only_project_module_is_cuda_only(tmp_path: Path) -> None:
    write_files(tmp_path, {"deploy/kernels.py": _ENGINE, "deploy/server.py": _SERVER})
    assert findings(tmp_path, ["TDL301"]) == []
    assert findings(tmp_path, ["TDL301"], "deploy/server.py") == []
    assert findings(tmp_path, ["TDL301"], jobs=2) == []


def test_through_a_chain_of_unindented_imports(tmp_path: Path) -> None:
    server = _SERVER.replace("from kernels import Kernels", "from wrapper import Kernels")
    wrapper = "from kernels import Kernels\n"
    write_files(
        tmp_path, {"deploy/kernels.py": _ENGINE, "deploy/wrapper.py": wrapper, "deploy/server.py": server}
    )
    assert findings(tmp_path, ["TDL301"]) == []


@pytest.mark.parametrize(
    "spelling",
    [
        "try:\n    from kernels import Kernels\nexcept ImportError:\n    Kernels = None",
        "def kernels():\n    from kernels import Kernels\n    return Kernels",
    ],
)
def test_an_import_that_may_fail_quietly_keeps_the_finding(tmp_path: Path, spelling: str) -> None:
    server = _SERVER.replace("from kernels import Kernels", spelling)
    write_files(tmp_path, {"deploy/kernels.py": _ENGINE, "deploy/server.py": server})
    assert findings(tmp_path, ["TDL301"], "deploy/server.py") == [
        "deploy/server.py:" + _line(server) + " TDL301"
    ]


def test_an_engine_whose_cuda_only_import_is_optional_keeps_the_finding(tmp_path: Path) -> None:
    engine = _ENGINE.replace("import cupy\n", "try:\n    import cupy\nexcept ImportError:\n    cupy = None\n")
    write_files(tmp_path, {"deploy/kernels.py": engine, "deploy/server.py": _SERVER})
    assert findings(tmp_path, ["TDL301"], "deploy/server.py") == _FOUND


def test_a_file_beside_the_engine_that_does_not_import_it_keeps_the_finding(tmp_path: Path) -> None:
    server = _SERVER.replace("from kernels import Kernels", "from layers import Kernels")
    layers = "class Kernels:\n    pass\n"
    write_files(
        tmp_path, {"deploy/kernels.py": _ENGINE, "deploy/layers.py": layers, "deploy/server.py": server}
    )
    assert findings(tmp_path, ["TDL301"], "deploy/server.py") == _FOUND


def _line(text: str) -> str:
    """The line of `torch.device("cuda")` in the written (dedented) text."""
    return str(next(n for n, line in enumerate(text.splitlines(), 1) if '"cuda"' in line))


@pytest.mark.parametrize(
    ("spelling", "found"),
    [
        ("from deploy.gpu_stats import gpu_mem_usage", _FOUND),  # the project's own: its imports decide
        ("from deploy import gpu_mem_usage", _FOUND),
        ("from apex.contrib import xentropy_cuda", []),  # a library's compiled extension
        ("import pycuda.autoinit", []),
    ],
    ids=["own-module", "own-package", "library-extension", "library"],
)
def test_a_name_of_the_projects_own_package_is_not_a_cuda_only_library(
    tmp_path: Path, spelling: str, found: list[str]
) -> None:
    """`from yolox.utils import gpu_mem_usage` in `yolox/core/trainer.py` imports a function of the
    project, not a CUDA-only library, though its name starts with a CUDA word."""
    stats = "import torch\n\ndef gpu_mem_usage():\n    return torch.cuda.max_memory_allocated()\n"
    server = _SERVER.replace("from kernels import Kernels", spelling)
    write_files(
        tmp_path, {"deploy/__init__.py": "", "deploy/gpu_stats.py": stats, "deploy/server.py": server}
    )
    assert findings(tmp_path, ["TDL301"], "deploy/server.py") == found
