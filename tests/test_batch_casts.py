"""TDL204 sees a loader's batch moved behind dtype casts (`batches.uncast`), not through a cast alone."""

from __future__ import annotations

import pytest

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rules.tdl204_loader_without_pin_memory import LoaderWithoutPinMemory

_SOURCE = """\
import torch
from torch.utils.data import DataLoader

def f(model, ds, device):
    loader = DataLoader(ds, batch_size=4)
    for x, y in loader:
        model({use})
"""

MOVES = [
    "x.float().to(device)",
    "x.long().cuda()",
    "x.to(torch.float32).to(device)",
    "x.type(torch.float32).to(device)",
    "x.to(device).float()",
    "x.half().to(dtype=torch.float16).to(device, non_blocking=True)",
    'x["image"].float().cuda()',
]
CASTS_ONLY = [
    "x.float()",
    "x.to(torch.float32)",
    "x.type(torch.float32)",
    "x.float().cpu()",
    'x.float().to("cpu")',
    "x.float().to(dtype=torch.float16)",
]


def _lines(use: str) -> list[int]:
    source = _SOURCE.format(use=use).encode()
    result = check_source("example.py", source, [LoaderWithoutPinMemory], Settings(), skip_filter=False)
    return [d.line for d in result.diagnostics]


@pytest.mark.parametrize("use", MOVES)
def test_a_move_behind_a_cast_moves_the_batch(use: str) -> None:
    assert _lines(use) == [5]


@pytest.mark.parametrize("use", CASTS_ONLY)
def test_a_cast_alone_moves_nothing(use: str) -> None:
    assert _lines(use) == []
