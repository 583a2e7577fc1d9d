"""TDL202/TDL207's hoist is safe only where nothing earlier in the iteration can leave it (a failing
`assert`, `sys.exit`), the loop keeps the current GPU (`.cuda()` means it) and moves no holder of
the module elsewhere (`export = nn.Sequential(model)`, `export.cpu()`)."""

from __future__ import annotations

import pytest
from fixsafety import safeties

from torchdev_lint.rules.tdl202_module_transfer_in_loop import ModuleTransferInLoop


@pytest.mark.parametrize(
    ("first", "safety"),
    [
        ("pass", "safe"),
        ("assert batch is not None", "unsafe"),
        ("sys.exit(0) if batch is None else None", "unsafe"),
        ("torch.cuda.set_device(batch)", "unsafe"),
        ("export.cpu()", "unsafe"),
    ],
)
def test_hoist_fix_safety(first: str, safety: str) -> None:
    code = f"""
        import sys
        import torch
        from torch import nn

        def run(batches, device):
            model = nn.Linear(4, 2)
            export = nn.Sequential(model, nn.Softmax(-1))
            for batch in [1, 2, 3]:
                {first}
                model.cuda()
        """
    assert safeties(ModuleTransferInLoop, code, "run.py") == [safety]
