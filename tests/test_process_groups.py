"""A world size kept in a module-level name: 1 until a function that joins an NCCL group rebinds it.

Issue 23's first example in new spellings: `if replicas < 2: return` in a program whose only process
group is NCCL's lets only distributed (so CUDA) runs past, when `replicas` is the module's `1`
rebound (`global replicas`) to `dist.get_world_size()` or a library's size that is 1 without a group.
"""

from __future__ import annotations

import textwrap

import pytest

from torchdev_lint.config import select_rules
from torchdev_lint.engine import check_source

RULES = tuple(select_rules(["TDL301"]))

_PROGRAM = """\
import torch
import torch.distributed as dist

replicas = 1

def join(rank, count):
    global replicas
    dist.init_process_group("nccl", rank=rank, world_size=count)
    replicas = {size}

def reduce_loss(loss{parameter}):
    if replicas < 2:
        return loss
    total = torch.zeros(1, device="cuda")
    dist.all_reduce(total + loss)
    return total
"""


def _lines(source: str) -> list[int]:
    result = check_source("train.py", textwrap.dedent(source), RULES)
    return [d.line for d in result.diagnostics if not d.suppressed]


def test_a_module_size_rebound_to_the_group_size_gates_the_collective() -> None:
    assert _lines(_PROGRAM.format(size="dist.get_world_size()", parameter="")) == []


@pytest.mark.parametrize(
    ("size", "parameter"),
    [
        # Read from the environment: a CPU run may well set it above 1.
        ('int(__import__("os").environ.get("WORLD_SIZE", 1))', ""),
        # The function's own parameter of the same name, not the module's size.
        ("dist.get_world_size()", ", replicas=1"),
        # Rebound to a sum: not a size that is 1 without a group.
        ("dist.get_world_size() + 1", ""),
    ],
)
def test_other_sizes_prove_nothing(size: str, parameter: str) -> None:
    assert _lines(_PROGRAM.format(size=size, parameter=parameter)) == [14]


def test_a_gloo_group_elsewhere_in_the_file_keeps_the_finding() -> None:
    source = _PROGRAM.format(size="dist.get_world_size()", parameter="") + (
        '\ndef join_on_cpu(rank, count):\n    dist.init_process_group("gloo", rank=rank, world_size=count)\n'
    )
    assert _lines(source) == [14]


def test_a_module_size_never_rebound_is_no_gate() -> None:
    source = _PROGRAM.format(size="dist.get_world_size()", parameter="").replace("    global replicas\n", "")
    assert _lines(source) == [13]  # one line up: the `global` statement is gone


@pytest.mark.parametrize("spelling", ["0x2", "0b10", "0o2", "2_0"])
def test_sizes_in_other_integer_spellings(spelling: str) -> None:
    """Hex, binary, octal and grouped literals are read as numbers, not text (ultralytics' `if a < 0xFF:`
    crashed pass 1): `0x2` is 2 like `2`; `2_0` is 20, which proves nothing."""
    source = _PROGRAM.format(size="dist.get_world_size()", parameter="").replace(
        "replicas < 2", f"replicas < {spelling}"
    )
    assert _lines(source) == ([14] if spelling == "2_0" else [])
