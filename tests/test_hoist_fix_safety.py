"""TDL202/TDL207's hoist is safe only where nothing earlier in the iteration can leave it: a
failing `assert` raises before the move, so a hoisted move would run (or raise) first."""

from __future__ import annotations

import pytest
from fixsafety import safeties

from torchdev_lint.rules.tdl202_module_transfer_in_loop import ModuleTransferInLoop


@pytest.mark.parametrize(("first", "safety"), [("pass", "safe"), ("assert batch is not None", "unsafe")])
def test_hoist_fix_safety(first: str, safety: str) -> None:
    code = f"""
        from torch import nn

        def run(batches, device):
            model = nn.Linear(4, 2)
            for batch in [1, 2, 3]:
                {first}
                model.to(device)
        """
    assert safeties(ModuleTransferInLoop, code, "run.py") == [safety]
