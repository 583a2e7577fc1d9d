"""An nn.Module subclass defined in another file of the project (issue 23: `from models import
Encoder` was not known to be a module, so `Encoder().to("cuda")` called with a CPU tensor in a test
was no mismatch). Pass 1 summarizes the module classes of the project modules a file that may place
a module on CUDA imports (`flow_classes.placed_module_classes`); the device flow then checks calls
of their instances as it does for the file's own classes. A class that moves its inputs itself,
one without parameters, or an input moved to the module's device keeps the check silent."""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import findings, write_files

_MODELS = """
import torch
from torch import nn

class Encoder(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.project = nn.Linear(width, 8)

    def forward(self, frames):
        return self.project(frames)
"""
_TEST = """
import torch
from models import Encoder

def test_codes_have_eight_channels():
    encoder = Encoder(16).to("cuda")
    codes = encoder(torch.randn(4, 16))
    assert codes.shape == (4, 8)
"""
_FOUND = ["tests/test_encoder.py:7 TDL302"]


def _project(root: Path, models: str = _MODELS, test: str = _TEST) -> None:
    """`pkg/models.py` and `tests/test_encoder.py` in a project (its root has a `pyproject.toml`)."""
    write_files(root, {"pyproject.toml": "", "pkg/__init__.py": "", "pkg/models.py": models})
    write_files(root, {"tests/test_encoder.py": test.replace("from models", "from pkg.models")})


def test_a_module_class_of_another_file_meets_a_host_input(tmp_path: Path) -> None:
    _project(tmp_path)
    assert findings(tmp_path, ["TDL302"]) == _FOUND
    assert findings(tmp_path, ["TDL302"], "tests/test_encoder.py") == _FOUND
    assert findings(tmp_path, ["TDL302"], jobs=2) == _FOUND


def test_a_relative_import_of_the_class(tmp_path: Path) -> None:
    test = _TEST.replace("from models import Encoder", "from .models import Encoder")
    write_files(
        tmp_path, {"tests/__init__.py": "", "tests/models.py": _MODELS, "tests/test_encoder.py": test}
    )
    assert findings(tmp_path, ["TDL302"]) == _FOUND


@pytest.mark.parametrize(
    ("models", "test"),
    [
        # The class moves its inputs itself.
        (
            _MODELS.replace("self.project(frames)", "self.project(frames.to(self.project.weight.device))"),
            _TEST,
        ),
        # No parameters: it runs where its inputs are.
        (_MODELS.replace("self.project = nn.Linear(width, 8)", "self.width = width"), _TEST),
        # The input is moved to the module's device.
        (_MODELS, _TEST.replace("torch.randn(4, 16)", 'torch.randn(4, 16).to("cuda")')),
        # Not a module class.
        (_MODELS.replace("class Encoder(nn.Module):", "class Encoder:"), _TEST),
    ],
)
def test_no_mismatch(tmp_path: Path, models: str, test: str) -> None:
    _project(tmp_path, models, test)
    assert findings(tmp_path, ["TDL302"]) == []
