"""TDL202/TDL207's hoist is safe only where nothing earlier in the iteration can leave it: a
failing `assert` raises before the move, so a hoisted move would run (or raise) first."""

from __future__ import annotations

import pytest

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rule import dedent
from torchdev_lint.rules.tdl202_module_transfer_in_loop import ModuleTransferInLoop


@pytest.mark.parametrize(("first", "safety"), [("pass", "safe"), ("assert batch is not None", "unsafe")])
def test_hoist_fix_safety(first: str, safety: str) -> None:
    source = dedent(
        f"""
        from torch import nn

        def run(batches, device):
            model = nn.Linear(4, 2)
            for batch in [1, 2, 3]:
                {first}
                model.to(device)
        """
    )
    result = check_source("run.py", source.encode(), [ModuleTransferInLoop], Settings())
    assert [d.fix.safety if d.fix else None for d in result.diagnostics] == [safety]
