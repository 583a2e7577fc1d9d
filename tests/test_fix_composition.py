"""Fixes compose to what the rules accept (issue 24): fixing a file with every rule, unsafe fixes
included, gives a file that `check --select ALL` accepts, and no fix writes a pattern another
rule asks to avoid on the way (TDL307's legacy constructors followed by `.zero_()`/`.fill_()` and
a move become one factory call with `device=`, never a CPU tensor filled and then moved)."""

from __future__ import annotations

import re

import pytest

from torchdev_lint.config import Settings, select_rules
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import fix_source
from torchdev_lint.rule import dedent

# (source, the text after `--fix --unsafe-fixes` with every rule)
CASES = {
    "filled-then-moved": (
        """
        import torch

        def buffers(n, device):
            a = torch.cuda.FloatTensor(n, 4).fill_(0)
            b = torch.FloatTensor(n, 4).zero_().to(device)
            c = torch.FloatTensor(3, n).fill_(2.5).to(device)
            d = torch.cuda.LongTensor(2, n).cuda().zero_()
            e = torch.FloatTensor(n, 4).to(device)
            return a, b, c, d, e
        """,
        """
        import torch

        def buffers(n, device):
            a = torch.zeros(n, 4, dtype=torch.float32, device="cuda")
            b = torch.zeros(n, 4, dtype=torch.float32, device=device)
            c = torch.full((3, n), 2.5, dtype=torch.float32, device=device)
            d = torch.zeros(2, n, dtype=torch.int64, device="cuda")
            e = torch.empty(n, 4, dtype=torch.float32, device=device)
            return a, b, c, d, e
        """,
    ),
    # Without a device parameter the CUDA the fix writes is TDL301's, fixed in a later round.
    "hard-coded-cuda": (
        """
        import torch

        def init(batch):
            h = torch.cuda.FloatTensor(batch, 16).fill_(0)
            c = torch.FloatTensor(batch, 16).zero_().cuda()
            ids = torch.LongTensor([1, 2, 3]).cuda()
            return h, c, ids
        """,
        """
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

        def init(batch):
            h = torch.zeros(batch, 16, dtype=torch.float32, device=device)
            c = torch.zeros(batch, 16, dtype=torch.float32, device=device)
            ids = torch.tensor([1, 2, 3], dtype=torch.int64, device=device)
            return h, c, ids
        """,
    ),
    # A cast in the move: `full` is created in its own dtype and cast as before; zeros are exact.
    "cast-in-the-move": (
        """
        import torch as T

        def half_state(n, device):
            s = T.FloatTensor(n, 2).fill_(0.1).to(device, T.float16)
            z = T.FloatTensor(n, 2).zero_().to(device, dtype=T.float16)
            return s, z
        """,
        """
        import torch as T

        def half_state(n, device):
            s = T.full((n, 2), 0.1, dtype=T.float32, device=device).to(T.float16)
            z = T.zeros(n, 2, dtype=T.float16, device=device)
            return s, z
        """,
    ),
    "module-level": (
        """
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        grid = torch.FloatTensor(8, 8).zero_().to(device)
        ones = torch.IntTensor(8).fill_(1).to(device)
        """,
        """
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        grid = torch.zeros(8, 8, dtype=torch.float32, device=device)
        ones = torch.full((8,), 1, dtype=torch.int32, device=device)
        """,
    ),
}

# A factory made on the CPU and then filled or moved right away: what TDL203 asks to avoid.
_CREATED_ON_CPU_THEN = re.compile(r"""device=["']cpu["']\)\s*\.\s*(fill_|zero_|to|cuda)\(""")


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixing_with_every_rule_gives_what_every_rule_accepts(name: str) -> None:
    source, expected = (dedent(text) for text in CASES[name])
    rules = select_rules(["ALL"])
    fixed = fix_source("example.py", source.encode(), rules, Settings(), unsafe=True).source.decode()
    assert fixed == expected
    assert not _CREATED_ON_CPU_THEN.search(fixed)
    remaining = check_source("example.py", fixed.encode(), rules, Settings(), skip_filter=False)
    assert [(d.code, d.line, d.message) for d in remaining.diagnostics] == []


def test_the_legacy_type_fix_alone_writes_no_tensor_made_on_the_cpu_and_then_moved() -> None:
    """TDL307's own round already gives the accepted form: no other rule's fix is needed."""
    source = dedent(CASES["filled-then-moved"][0])
    rules = select_rules(["TDL307"])
    fixed = fix_source("example.py", source.encode(), rules, Settings(), max_rounds=1).source.decode()
    assert fixed == dedent(CASES["filled-then-moved"][1])
