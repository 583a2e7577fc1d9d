"""TDL205's `non_blocking=True` is safe only where the moved value is proven a tensor: a part of a
batch the loader's default collation made. With `batch_size=None` the default passes each item
through as the dataset gave it (a project class with its own `.to()` would reject the keyword)."""

from __future__ import annotations

import pytest
from fixsafety import safeties

from torchdev_lint.rules.tdl205_blocking_h2d_copy import BlockingH2dCopy


@pytest.mark.parametrize(
    ("arguments", "safety"),
    [("batch_size=32", "safe"), ("batch_size=None", "unsafe"), ("collate_fn=pad", "unsafe")],
)
def test_non_blocking_fix_safety(arguments: str, safety: str) -> None:
    code = f"""
        import torch
        from torch.utils.data import DataLoader

        def train(dataset, model, pad):
            device = torch.device("cuda")
            for x, y in DataLoader(dataset, {arguments}, pin_memory=True):
                model(x.to(device))
        """
    assert safeties(BlockingH2dCopy, code, "train.py") == [safety]
