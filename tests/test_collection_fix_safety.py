"""TDL201's join fix is safe only where every item is provably a host tensor of one dtype.

A list built of host factories and then given another item (`parts.append(cls_token)`,
`parts[0] = t`, `parts += [t]`, through another name, or handed to a helper that may add one)
may hold a tensor on the device: moving each item then joining works, joining on the host first
raises. Items whose dtype is chosen per item are promoted by the join.
"""

from __future__ import annotations

import pytest
from fixsafety import safeties

from torchdev_lint.rules.tdl201_per_item_transfer_in_loop import PerItemTransferInLoop

CASES = [
    ("", "safe"),
    ("parts.append(cls_token)", "unsafe"),
    ("parts.extend([cls_token])", "unsafe"),
    ("parts[0] = cls_token", "unsafe"),
    ("parts += [cls_token]", "unsafe"),
    ("add_special(parts, cls_token)", "unsafe"),
    ("print(len(parts))", "safe"),
    ("bank = parts; bank.append(cls_token)", "unsafe"),
    ("holder = {'parts': parts}", "unsafe"),
    ("parts.__setitem__(0, cls_token)", "unsafe"),
    ("first = parts[0]", "safe"),
    ("for part in parts: part.data = part.data.to(device)", "unsafe"),
]


def test_items_of_dtypes_chosen_per_item_are_not_one_dtype() -> None:
    code = """
        import torch

        def embed(device):
            parts = [torch.zeros(8, dtype=dt) for dt in (torch.float16, torch.float64)]
            return torch.stack([p.to(device) for p in parts])
        """
    assert safeties(PerItemTransferInLoop, code, "embed.py") == ["unsafe"]


@pytest.mark.parametrize(("between", "safety"), CASES)
def test_join_fix_safety(between: str, safety: str) -> None:
    code = f"""
        import torch

        def embed(n, cls_token, device):
            parts = [torch.zeros(8) for _ in range(n)]
            {between}
            return torch.stack([p.to(device) for p in parts])
        """
    assert safeties(PerItemTransferInLoop, code, "embed.py") == [safety]
