"""A module's `if __name__ == "__main__":` demo (issue 23, tune3: dac's `model/dac.py`): where other
files of the project import the module, the block is the author's smoke test, not the program, and
TDL203 (a speed rule) leaves it alone as it leaves tests; a script nobody imports keeps its findings
(in the block's loop: what a block does once is setup, session 15), and so does the module checked
alone or code outside the block."""

from __future__ import annotations

from pathlib import Path

from multifile import findings, write_files

_MODEL = """
import torch

class Codec(torch.nn.Module):
    def forward(self, x):
        return x + torch.zeros(x.shape[-1]).to(x.device)

if __name__ == "__main__":
    model = Codec()
    for length in (8, 16):
        x = torch.randn(1, 1, length).to("cuda")
        print(model(x).shape)
"""
_TRAIN = """
import torch
from codec.model import Codec

def train(device):
    return Codec().to(device)
"""


def test_the_demo_of_an_imported_module_is_left_alone(tmp_path: Path) -> None:
    write_files(tmp_path, {"codec/__init__.py": "", "codec/model.py": _MODEL, "train.py": _TRAIN})
    assert findings(tmp_path, ["TDL203"]) == ["codec/model.py:6 TDL203"]
    assert findings(tmp_path, ["TDL203"], jobs=2) == ["codec/model.py:6 TDL203"]


def test_a_script_nobody_imports_keeps_its_main_block_findings(tmp_path: Path) -> None:
    write_files(tmp_path, {"codec/__init__.py": "", "codec/model.py": _MODEL})
    assert findings(tmp_path, ["TDL203"]) == ["codec/model.py:6 TDL203", "codec/model.py:11 TDL203"]


def test_the_module_checked_alone_keeps_its_main_block_findings(tmp_path: Path) -> None:
    write_files(tmp_path, {"codec/__init__.py": "", "codec/model.py": _MODEL, "train.py": _TRAIN})
    assert findings(tmp_path, ["TDL203"], "codec/model.py") == [
        "codec/model.py:6 TDL203",
        "codec/model.py:11 TDL203",
    ]


def test_only_a_main_test_counts(tmp_path: Path) -> None:
    other = _MODEL.replace('if __name__ == "__main__":', 'if __name__ != "__main__":')
    write_files(tmp_path, {"codec/__init__.py": "", "codec/model.py": other, "train.py": _TRAIN})
    assert findings(tmp_path, ["TDL203"]) == ["codec/model.py:6 TDL203", "codec/model.py:11 TDL203"]
