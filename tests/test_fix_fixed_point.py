"""Safe fixes, round two (issue 24): one `--fix` reaches the project's fixed point, and what it
writes is safe on every device.

- A fix in one file that changes another file's facts (pinning a loader in `main.py` makes the
  copies of its batches in `engine.py` worth making non-blocking) is followed in the same run:
  a second run changes nothing.
- `non_blocking=True` is added safely only to a value proven a tensor (a part of a batch that
  PyTorch's default collation made, here or, through the project facts, in every caller), and
  never where the target may be MPS.
- A loader is pinned with `torch.cuda.is_available()` where the program also runs without CUDA.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest
from multifile import write_files

from torchdev_lint.cli import main

ENGINE = """
    import torch

    def train_one_epoch(model, loader, device):
        for images, targets in loader:
            images, targets = images.cuda(), targets.cuda()
            model(images, targets).backward()
"""
MAIN = """
    import torch
    from torch.utils.data import DataLoader

    from engine import train_one_epoch

    def main(dataset, model, device):
        train_loader = DataLoader(dataset, batch_size=32, shuffle=True{extra})
        for epoch in range(3):
            train_one_epoch(model, train_loader, device)
"""


def _project(root: Path, extra: str = "", engine: str = ENGINE) -> None:
    write_files(root, {"setup.py": "", "engine.py": engine, "main.py": dedent(MAIN).format(extra=extra)})


def _texts(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(root.glob("*.py"))}


def _fix(root: Path, *flags: str) -> int:
    return main(["check", "--fix", "--select", "ALL", "--no-cache", "--isolated", *flags, str(root)])


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_one_fix_run_reaches_the_project_fixed_point(tmp_path: Path, jobs: str) -> None:
    _project(tmp_path)
    _fix(tmp_path, "-j", jobs)
    fixed = _texts(tmp_path)
    assert "pin_memory=torch.cuda.is_available()" in fixed["main.py"]
    # Only known after main.py was fixed: the loader every caller passes is now pinned.
    assert "images.cuda(non_blocking=True), targets.cuda(non_blocking=True)" in fixed["engine.py"]
    _fix(tmp_path, "-j", jobs)
    assert _texts(tmp_path) == fixed, "a second --fix changed the project"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_diff_shows_the_project_fixed_point_and_writes_nothing(
    tmp_path: Path, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--diff` is what `--fix` would write: every round, though no round's fixes are written."""
    fixed_root, shown_root = tmp_path / "fixed", tmp_path / "shown"
    _project(fixed_root)
    _project(shown_root)
    before = _texts(shown_root)
    _fix(fixed_root, "-j", jobs)
    capsys.readouterr()
    assert (
        main(["check", "--diff", "--select", "ALL", "--no-cache", "--isolated", "-j", jobs, str(shown_root)])
        == 1
    )
    diff = capsys.readouterr().out
    assert _texts(shown_root) == before, "--diff wrote a file"
    done = subprocess.run(
        ["patch", "-p1", "-d", str(shown_root)],
        input=diff.replace(f"a/{shown_root}/", "a/").replace(f"b/{shown_root}/", "b/"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _texts(shown_root) == _texts(fixed_root)


def test_torchdev_fix_counts_the_fixes_of_every_round(tmp_path: Path) -> None:
    _project(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "torchdev_lint", "check", "--fix", "--isolated", "--no-cache", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "Fixed 3 findings" in done.stderr, done.stderr


def test_a_project_collate_fn_leaves_the_receiver_unproven(tmp_path: Path) -> None:
    """A custom `collate_fn` may build a project class whose `to()` takes only a device
    (`NestedTensor.to(device)`): `non_blocking=True` would raise at the first step."""
    _project(tmp_path, extra=", pin_memory=True, collate_fn=collate_nested")
    before = _texts(tmp_path)
    _fix(tmp_path)
    assert _texts(tmp_path) == before  # the TDL205 fix is unsafe there
    _fix(tmp_path, "--unsafe-fixes")
    assert "non_blocking=True" in _texts(tmp_path)["engine.py"]


def test_a_project_class_with_its_own_to_is_not_given_non_blocking(tmp_path: Path) -> None:
    """The whole batch object (`for batch in loader: batch.to(device)`) is a project class here."""
    program = """
        import torch
        from torch.utils.data import DataLoader

        class Pair:
            def __init__(self, a, b):
                self.a, self.b = a, b

            def to(self, device):
                return Pair(self.a.to(device), self.b.to(device))

        def run(model, dataset, device):
            loader = DataLoader(dataset, batch_size=4, pin_memory=True, collate_fn=lambda items: Pair(*items))
            for batch in loader:
                batch = batch.to(device)
                model(batch.a, batch.b)
    """
    write_files(tmp_path, {"train.py": program})
    before = _texts(tmp_path)
    _fix(tmp_path)
    assert _texts(tmp_path) == before


@pytest.mark.parametrize(
    "choice",
    [
        'torch.device("mps" if torch.backends.mps.is_available() else "cpu")',
        "torch.accelerator.current_accelerator()",
        '"mps"',
        "pick_device()",
    ],
    ids=["mps-choice", "accelerator-api", "mps-literal", "helper-result"],
)
def test_no_safe_non_blocking_where_the_target_may_be_mps(tmp_path: Path, choice: str) -> None:
    program = f"""
        import torch
        from torch.utils.data import DataLoader

        from helpers import pick_device

        def run(model, dataset):
            device = {choice}
            loader = DataLoader(dataset, batch_size=4, pin_memory=True)
            for x, y in loader:
                model(x.to(device), y.to(device))
    """
    write_files(tmp_path, {"train.py": program})
    before = _texts(tmp_path)
    _fix(tmp_path)
    assert _texts(tmp_path) == before
    _fix(tmp_path, "--unsafe-fixes")
    assert "x.to(device, non_blocking=True)" in _texts(tmp_path)["train.py"]


def test_a_device_parameter_may_be_mps(tmp_path: Path) -> None:
    """The caller may pass `"mps"`: not proven CUDA or the CPU, so the fix is unsafe."""
    program = """
        from torch.utils.data import DataLoader

        def run(model, dataset, device):
            for x, y in DataLoader(dataset, batch_size=4, pin_memory=True):
                model(x.to(device))
    """
    write_files(tmp_path, {"train.py": program})
    before = _texts(tmp_path)
    _fix(tmp_path)
    assert _texts(tmp_path) == before


def test_cuda_only_targets_keep_the_safe_fix(tmp_path: Path) -> None:
    program = """
        import torch
        from torch.utils.data import DataLoader

        def run(model, dataset):
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            loader = DataLoader(dataset, batch_size=4, pin_memory=torch.cuda.is_available())
            for x, y in loader:
                model(x.to(device), y.cuda())
    """
    write_files(tmp_path, {"train.py": program})
    _fix(tmp_path)
    assert "model(x.to(device, non_blocking=True), y.cuda(non_blocking=True))" in _texts(tmp_path)["train.py"]


def test_a_commented_out_pin_memory_is_left_alone(tmp_path: Path) -> None:
    _project(tmp_path, extra=",  # pin_memory=True: pinned pages ran out on the shared nodes\n")
    before = _texts(tmp_path)
    _fix(tmp_path)
    assert _texts(tmp_path) == before


ROWS = """
    from torch.utils.data import Dataset

    class Rows(Dataset):
        def __init__(self, table):
            self.table = table

        def __len__(self):
            return len(self.table)

        def __getitem__(self, index):
            return self.table[index]
"""
PREDICT = """
    import torch
    from torch.utils.data import DataLoader

    from {module} import Rows

    def predict(model, table):
        outputs = []
        for rows in DataLoader(Rows(table), batch_size=64):
            outputs.append(model(rows.cuda()))
        return outputs
"""


@pytest.mark.parametrize(
    ("layout", "module"),
    [({"setup.py": ""}, "tabular.rows"), ({}, "tabular.rows"), ({"tabular/__init__.py": ""}, ".rows")],
    ids=["project", "namespace-package", "relative"],
)
def test_a_dataset_of_another_file_handing_out_its_argument_is_not_pinned_safely(
    tmp_path: Path, layout: dict[str, str], module: str
) -> None:
    """`Rows(table)` yields slices of `table`, which the caller may have put on a device:
    pinning them raises, so the TDL204 fix is not safe (the class is in another file, imported
    from a package without `__init__.py` too)."""
    write_files(
        tmp_path, {**layout, "tabular/rows.py": ROWS, "tabular/predict.py": PREDICT.format(module=module)}
    )
    before = _texts(tmp_path / "tabular")
    _fix(tmp_path)
    assert _texts(tmp_path / "tabular") == before
