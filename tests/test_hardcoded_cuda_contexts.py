"""Two places where a hard-coded CUDA device cannot fail for want of a GPU (TDL301), seen in the
spent held-out seven (session 15): under a fake-tensor mode (`with FakeTensorMode():`) a factory's
`device="cuda"` is metadata of a fake tensor (graph-pass tests build node metadata so), and a device
named right before a gate (`device = torch.device("cuda:0")`, then `torch.cuda.set_device(device)`)
is used only once the program has passed it. Outside the `with`, under a name bound to anything
else, or with a statement between the name and the gate, the finding stays."""

from __future__ import annotations

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rule import all_rules

_TDL301 = [rule for rule in all_rules() if rule.code == "TDL301"]


def _lines(source: str) -> list[int]:
    result = check_source("graph_passes.py", source.encode(), _TDL301, Settings(), skip_filter=False)
    return [d.line for d in result.diagnostics]


def test_devices_of_fake_tensors_are_metadata() -> None:
    source = """\
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

def node_metadata(shape):
    mode = torch._subclasses.FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        value = torch.empty(shape, device="cuda")
    with FakeTensorMode(), torch.no_grad():
        other = torch.zeros(shape).cuda()
    return value, other
"""
    assert _lines(source) == []


def test_real_tensors_beside_a_fake_mode_are_flagged() -> None:
    source = """\
import contextlib
import torch

def node_metadata(shape, fake):
    mode = torch._subclasses.FakeTensorMode() if fake else contextlib.nullcontext()
    with mode:
        value = torch.empty(shape, device="cuda")
    with torch._subclasses.FakeTensorMode():
        pass
    return value, torch.zeros(shape, device="cuda")
"""
    assert _lines(source) == [7, 10]


def test_a_device_named_right_before_a_gate() -> None:
    source = """\
import torch

def precompile(config):
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    return build(config, device)

def report_first(config):
    device = torch.device("cuda:0")
    print(device)
    torch.cuda.set_device(device)
"""
    assert _lines(source) == [9]
