"""A branch whose test implies an earlier branch's test runs only after that branch's block ran
(`analysis/context/requirements.py`, `_gated_in_earlier_branch`): a gate there gates it too."""

from __future__ import annotations

import textwrap

import pytest

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rules.tdl301_hardcoded_cuda import HardcodedCuda

_PROGRAM = """
import os
import torch
import torch.distributed as dist

def launch(net, opts):
    rank = int(os.environ.get("LOCAL_RANK", 0))
    sharded = opts.sharded
    replicated = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if {earlier}:
        dist.init_process_group(backend=opts.backend)
        torch.cuda.set_device(rank)
    {between}
    if {later}:
        net = net.cuda(rank)
    return net
"""

GATED = {
    "same flag": ("replicated", "", "replicated"),
    "one side of an or": ("replicated or sharded", "", "replicated"),
    "an and implies its parts": ("sharded", "", "sharded and replicated"),
    "unrelated code between": ("replicated or sharded", "net.train()", "replicated"),
}
NOT_GATED = {
    "the later test is wider": ("replicated", "", "replicated or sharded"),
    "flag rebound in between": ("replicated", "replicated = opts.force", "replicated"),
    "a comparison is not a flag": ("rank > 0", "", "rank > 0"),
    "a negated flag": ("replicated", "", "not replicated"),
}


def _findings(earlier: str, between: str, later: str) -> list[int]:
    source = _PROGRAM.format(earlier=earlier, between=between or "pass", later=later)
    result = check_source(
        "train.py", textwrap.dedent(source).encode(), [HardcodedCuda], Settings(), skip_filter=False
    )
    return [d.line for d in result.diagnostics]


@pytest.mark.parametrize("tests", GATED.values(), ids=GATED.keys())
def test_a_branch_implying_a_gated_branch_requires_cuda(tests: tuple[str, str, str]) -> None:
    assert _findings(*tests) == []


@pytest.mark.parametrize("tests", NOT_GATED.values(), ids=NOT_GATED.keys())
def test_otherwise_the_hard_coded_device_is_reported(tests: tuple[str, str, str]) -> None:
    assert _findings(*tests) == [15]
