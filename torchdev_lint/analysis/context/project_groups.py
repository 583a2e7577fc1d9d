"""Does every process group the project starts use NCCL (issue 23: a model's collective helper,
`if dist.is_initialized(): n = torch.tensor(k).cuda(); dist.all_reduce(n)`, in a project whose
training scripts start NCCL groups)?

Each summary lists, per process group its file starts, whether it uses NCCL (`group_starts`, from
`requirements.CudaRequirements.group_starts`). The project's groups are NCCL's when it starts at
least one and every start read is NCCL's, and no file pass 1 could not parse names
`init_process_group` (it may start another backend). A file that starts groups of its own is
judged by them (`CudaRequirements._nccl_file`). Only the files pass 1 reads count: checking a
model's folder without its scripts finds no start, so nothing changes there. The fact goes to the
checked files whose text may test for a group (`pass_one_text.may_test_group`) and to those that
import a project module defining a group test, whatever its name (`in_group()`), so a script that
changes its backend re-checks those only. No LibCST here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def nccl_program(summaries: Iterable[dict[str, Any]], unreadable: Iterable[bytes]) -> bool:
    """Does the project start process groups, all with NCCL?"""
    starts = [nccl for summary in summaries for nccl in summary.get("group_starts", ())]
    return bool(starts) and all(starts) and not any(b"init_process_group" in source for source in unreadable)
