"""A `collate_fn` lambda that only forwards to a function of the file (tune4: f5-tts's benchmark,
`collate_fn=lambda x: data_collator(x, vocab, use_perf=...)`) is judged by that function: one
that puts the batch on the GPU makes its loader's batches device data, which `pin_memory=True`
would refuse, so TDL204 stays silent; a forwarding lambda to a host-only collate keeps it."""

from __future__ import annotations

import textwrap

from torchdev_lint.config import select_rules
from torchdev_lint.engine import check_source

RULES = tuple(select_rules(["TDL204"]))

_SOURCE = """
import torch
from torch.utils.data import DataLoader

def data_collator(batch, vocab):
    mels = [item["audio"].to("cuda") for item in batch]
    return torch.stack(mels)

def run(dataset, vocab, device):
    loader = DataLoader(dataset, batch_size=8, collate_fn=lambda x: data_collator(x, vocab))
    for mels in loader:
        mels.to(device)
"""


def _lines(source: str) -> list[int]:
    result = check_source("bench.py", textwrap.dedent(source), RULES)
    return [d.line for d in result.diagnostics if not d.suppressed]


def test_a_lambda_forwarding_to_a_collate_that_moves_to_the_gpu() -> None:
    assert _lines(_SOURCE) == []


def test_a_lambda_forwarding_to_a_host_collate_keeps_the_finding() -> None:
    assert _lines(_SOURCE.replace('item["audio"].to("cuda")', 'item["audio"]')) == [10]
