"""TDL302 across the class boundary: what `__init__` (a TestCase's `setUp`) places on a device, other methods see.

End to end through the command line (`check --format json`), on files written
to a temporary folder: each case that must be reported has a look-alike that
must not (issue 13, first bullet).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from torchdev_lint.cli import main

HEADER = """\
import unittest

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(x)
"""


def findings(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str) -> list[tuple[int, str]]:
    """(line, message) of each TDL302 finding in HEADER + `body`."""
    path = tmp_path / "test_net.py"
    path.write_text(HEADER + textwrap.dedent(body), encoding="utf-8")
    main(["check", "--select", "TDL302", "--no-cache", "--format", "json", str(path)])
    out, _ = capsys.readouterr()
    return [(item["line"], item["message"]) for item in json.loads(out)]


def line_of(body: str, text: str) -> int:
    source = HEADER + textwrap.dedent(body)
    return next(n for n, line in enumerate(source.splitlines(), 1) if text in line)


SET_UP = """
class NetTest(unittest.TestCase):
    def setUp(self):
        self.model = Net().cuda()

    def test_forward(self):
        out = self.model(torch.randn(2, 3))
        self.assertEqual(out.shape, (2, 4))
"""

INIT = """
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Predictor:
    def __init__(self):
        self.model = Net().to(DEVICE)

    def warm_up(self):
        self.model(torch.zeros(1, 3))
"""


def test_model_placed_in_set_up_called_in_a_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert findings(tmp_path, capsys, SET_UP) == [
        (
            line_of(SET_UP, "out = self.model("),
            '`self.model` is on CUDA but is called with `torch.randn(2, 3)` on the CPU; move it with `.to("cuda")`',
        )
    ]


def test_model_placed_in_init_called_in_a_method(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ((line, message),) = findings(tmp_path, capsys, INIT)
    assert line == line_of(INIT, "self.model(torch.zeros")
    assert message.startswith("`self.model` is on `DEVICE` (CUDA whenever CUDA is available)")
    assert message.endswith("move it with `.to(DEVICE)`")


@pytest.mark.parametrize(
    "body",
    [
        # setUp moves the input too
        SET_UP.replace("Net().cuda()", "Net().cuda()\n        self.x = torch.randn(2, 3).cuda()").replace(
            "self.model(torch.randn(2, 3))", "self.model(self.x)"
        ),
        # the test moves its input to the model's device
        SET_UP.replace("torch.randn(2, 3)", "torch.randn(2, 3).to(next(self.model.parameters()).device)"),
        # the test rebinds the model before use
        SET_UP.replace("        out = self.model(", "        self.model = Net()\n        out = self.model("),
        # another method rebinds or moves the model
        SET_UP + "\n    def use_cpu(self):\n        self.model = Net()\n",
        SET_UP + "\n    def use_cpu(self):\n        self.model.cpu()\n",
        # setUp places the model only where CUDA is available
        SET_UP.replace(
            "self.model = Net().cuda()",
            "self.model = Net()\n        if torch.cuda.is_available():\n            self.model.cuda()",
        ),
        # a decorated setUp may not run as written
        SET_UP.replace(
            "    def setUp", "    @unittest.skipUnless(torch.cuda.is_available(), 'cuda')\n    def setUp"
        ),
        # a subclass may set the model up differently
        SET_UP + "\n\nclass CpuTest(NetTest):\n    def setUp(self):\n        self.model = Net()\n",
        # `setUp` is an ordinary method of a class that is no TestCase
        SET_UP.replace("(unittest.TestCase)", ""),
        # a module's submodule follows the module's `.to()`; its inputs come from callers
        """
class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Net().cuda()

    def forward(self, x):
        return self.net(x)
""",
        # a class deriving from a library's class (a model base class) may be a module
        "\nfrom transformers import PreTrainedModel\n\n\nclass Head(PreTrainedModel):\n"
        "    def __init__(self):\n        self.proj = nn.Linear(3, 4).cuda()\n\n"
        "    def probe(self):\n        return self.proj(torch.randn(2, 3))\n",
        # a model left on the CPU in __init__: code outside the class may move it to the GPU
        INIT.replace("Net().to(DEVICE)", "Net()").replace(
            "torch.zeros(1, 3)", "torch.zeros(1, 3).to(DEVICE)"
        ),
        # a plain class whose method gets its input from the caller
        INIT.replace(
            "def warm_up(self):\n        self.model(torch.zeros(1, 3))",
            "def predict(self, x):\n        return self.model(x)",
        ),
    ],
)
def test_look_alikes_stay_silent(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str) -> None:
    assert findings(tmp_path, capsys, body) == []
