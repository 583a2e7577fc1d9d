"""The gate in a caller in another file (issue 23): a module-level function whose every call from the
rest of the project runs after the program made sure of CUDA is CUDA-only code; one call elsewhere
without the gate, or a use that is not a call, keeps its findings."""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import findings, write_files

_OPS = """
import torch

def fused_buffer(n):
    return torch.zeros(n, device="cuda")
"""
_TRAIN = """
import sys
import torch
from ops import fused_buffer

def main():
    if not torch.cuda.is_available():
        sys.exit("this trainer needs a GPU")
    return fused_buffer(8)
"""


def test_a_function_called_only_after_a_gate_in_another_file_is_cuda_only(tmp_path: Path) -> None:
    write_files(tmp_path, {"ops.py": _OPS, "train.py": _TRAIN})
    assert findings(tmp_path, ["TDL301"]) == []


@pytest.mark.parametrize(
    "other",
    [
        "from ops import fused_buffer\n\ndef smoke():\n    return fused_buffer(2)\n",  # a caller without the gate
        "from ops import fused_buffer\n\nHOOKS = [fused_buffer]\n",  # handed on as a value
    ],
)
def test_another_use_without_the_gate_keeps_the_finding(tmp_path: Path, other: str) -> None:
    write_files(tmp_path, {"ops.py": _OPS, "train.py": _TRAIN, "evaluate.py": other})
    assert findings(tmp_path, ["TDL301"]) == ["ops.py:5 TDL301"]


def test_no_caller_in_the_project_keeps_the_finding(tmp_path: Path) -> None:
    write_files(tmp_path, {"ops.py": _OPS, "train.py": _TRAIN.replace("return fused_buffer(8)", "return 8")})
    assert findings(tmp_path, ["TDL301"]) == ["ops.py:5 TDL301"]


def test_callers_of_a_helper_that_never_names_cuda_are_not_read(tmp_path: Path) -> None:
    """Pass 1 reads the other callers of a gated callee only when the callee reaches CUDA (names it,
    or uses a function of its file that does): a version check called everywhere costs nothing."""
    from torchdev_lint.analysis.project.project_facts import project_pass
    from torchdev_lint.engine import parse

    files = {
        "ops.py": _OPS + "\ndef version():\n    return 1\n",
        "train.py": _TRAIN.replace("return fused_buffer(8)", "version()\n    return fused_buffer(8)").replace(
            "from ops import fused_buffer", "from ops import fused_buffer, version"
        ),
        "report.py": "from ops import version\n\ndef show():\n    return version()\n",
    }
    write_files(tmp_path, files)
    paths = sorted(str(p) for p in tmp_path.rglob("*.py"))
    analysis = project_pass(paths, parse)._analysis
    assert not any(path.endswith("report.py") for path in analysis.summaries)
    assert findings(tmp_path, ["TDL301"]) == []
