"""A module's state saved from host memory: built on the host and never moved (issue 23: a file
written by another script from a `state_dict()` of a model built on the CPU). Look-alikes that may
have left the host keep TDL101's finding at the load of the same file name."""

from __future__ import annotations

import pytest

from torchdev_lint.config import select_rules
from torchdev_lint.engine import check_source

RULES = tuple(select_rules(["TDL101"]))

_PROGRAM = """\
import torch
from torch import nn

class Whitening(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8){where})

def export(folder, tune):
    stats = {build}
    {use}
    torch.save(stats.state_dict(), folder + "/whitening_stats.pt")

def restore(other_folder):
    return torch.load(other_folder + "/whitening_stats.pt")
"""


def _lines(build: str = "Whitening()", use: str = "stats.eval()", where: str = "") -> list[int]:
    source = _PROGRAM.format(build=build, use=use, where=where)
    return [d.line for d in check_source("export.py", source, RULES).diagnostics]


@pytest.mark.parametrize("build", ["Whitening()", "nn.BatchNorm1d(8)"])
def test_a_module_built_on_the_host_and_never_moved_saves_host_data(build: str) -> None:
    assert _lines(build=build) == []


@pytest.mark.parametrize(
    ("build", "use", "where"),
    [
        ("Whitening()", "stats.cuda()", ""),  # moved in place
        ("Whitening()", "tune(stats)", ""),  # handed to code that may move it
        ("Whitening()", "stats.eval()", ', device="cuda"'),  # its class places its parameters
        ('nn.BatchNorm1d(8, device="cuda")', "stats.eval()", ""),
    ],
)
def test_a_module_that_may_have_left_the_host_keeps_the_finding(build: str, use: str, where: str) -> None:
    assert _lines(build, use, where) == [15]
