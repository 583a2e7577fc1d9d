"""TDL205's `non_blocking=True` is safe only where the moved value is proven a tensor: a part of a
batch the loader's default collation made. With `batch_size=None` the default passes each item
through as the dataset gave it (a project class with its own `.to()` would reject the keyword)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixsafety import safeties
from multifile import write_files

from torchdev_lint.rules.tdl204_loader_without_pin_memory import LoaderWithoutPinMemory
from torchdev_lint.rules.tdl205_blocking_h2d_copy import BlockingH2dCopy
from torchdev_lint.runner import CheckOptions, process_files


@pytest.mark.parametrize("move", ["x.to(device)"])
@pytest.mark.parametrize(
    ("arguments", "safety"),
    [
        ("batch_size=32", "safe"),
        ("batch_size=None", "unsafe"),
        ("collate_fn=pad", "unsafe"),
    ],
)
def test_non_blocking_fix_safety(arguments: str, safety: str, move: str) -> None:
    code = f"""
        import torch
        from torch.utils.data import DataLoader

        def train(dataset, model, pad):
            device = torch.device("cuda")
            for x, y in DataLoader(dataset, {arguments}, pin_memory=True):
                model({move})
        """
    assert safeties(BlockingH2dCopy, code, "train.py") == [safety]


def test_a_copy_that_also_casts_gets_no_safe_fix() -> None:
    """A blocking copy converts on the host, a non-blocking one on the device."""
    test_non_blocking_fix_safety("batch_size=32", "unsafe", "x.to(device, torch.long)")


def test_a_project_class_with_its_own_to_makes_the_fix_unsafe(tmp_path: Path) -> None:
    """The default collation keeps a namedtuple subclass: `views.to(device, non_blocking=True)` then
    calls the project's own `to()`, which takes no such keyword."""
    write_files(
        tmp_path,
        {
            "scenes.py": """
                from typing import NamedTuple
                import torch

                class Views(NamedTuple):
                    rgb: torch.Tensor

                    def to(self, device):
                        return Views(self.rgb.to(device))
            """,
            "train.py": """
                import torch
                from torch.utils.data import DataLoader

                def train(dataset, model):
                    device = torch.device("cuda")
                    for views, label in DataLoader(dataset, batch_size=4, pin_memory=True):
                        model(views.to(device))
            """,
        },
    )
    options = CheckOptions(rules=(BlockingH2dCopy,), cache=None, with_edits=True)
    paths = sorted(str(p) for p in tmp_path.glob("*.py"))
    found = [d for report in process_files(paths, options) for d in report.diagnostics]
    assert [d.fix.safety if d.fix else None for d in found] == ["unsafe"]


@pytest.mark.parametrize(
    ("table", "fixed"), [("torch.randn(100, 8)", True), ("torch.randn(100, 8).to(DEVICE)", False)]
)
def test_a_dataset_reading_device_data_of_the_module_gets_no_pin_fix(table: str, fixed: bool) -> None:
    """Pinning a batch of CUDA rows raises: a dataset whose items come from a module-level tensor
    moved to the device gets the finding without the `pin_memory=` fix."""
    code = f"""
        import torch
        from torch.utils.data import DataLoader, Dataset

        DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        TABLE = {table}

        class Rows(Dataset):
            def __len__(self):
                return 100

            def __getitem__(self, i):
                return TABLE[i]

        def run(model):
            for x in DataLoader(Rows(), batch_size=10):
                model(x.to(DEVICE))
        """
    assert safeties(LoaderWithoutPinMemory, code, "rows.py") == (["safe"] if fixed else [None])
