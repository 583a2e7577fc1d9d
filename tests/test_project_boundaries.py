"""The project-wide analysis, the boundaries left by session 5 (issue 13):

- a loader passed on through a second function: `main()` builds the `DataLoader`, passes it to
  `fit(loader)` (another file), which passes it to `engine.train_one_epoch(loader)`, whose loop
  moves the batches (TDL204 at the `DataLoader`, TDL205 at the move);
- methods through inheritance across files: `self.setup()` / `self.train_one_epoch(loader)`
  defined in a base class of another module (the gate silencing TDL301/TDL311 after it; the
  parameter boundaries of TDL204/TDL205).

Each finding has look-alikes that must stay silent (the helper used correctly, overridden, passed
on as a value), and a cache test: the dependent's result changes when only the other file does.
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
from multifile import file_name, findings, record_checks, write_files

from torchdev_lint.cache import ResultCache

ENGINE = """
    def train_one_epoch(model, loader, device):
        for images, targets in loader:
            images, targets = images.to(device), targets.to(device)
            model(images).backward()
"""
TRAIN = """
    from engine import train_one_epoch

    def fit(model, train_loader, device, epochs=10):
        for epoch in range(epochs):
            train_one_epoch(model, train_loader, device)
"""
MAIN = """
    from torch.utils.data import DataLoader

    from train import fit

    def main(dataset, model, device):
        loader = DataLoader(dataset, batch_size=32{pin})
        fit(model, loader, device)
"""
PINNED = ", pin_memory=True"


def _write(root: Path, files: dict[str, str]) -> None:
    write_files(root, {"setup.py": "", **files})


def _findings(root: Path, codes: str, *names: str, cache: ResultCache | None = None) -> list[str]:
    return findings(root, codes.split(","), *names, cache=cache)


def _main(pin: str) -> str:
    return dedent(MAIN).format(pin=pin)


# A loader passed on through a second function ---------------------------------------------------


def test_pinned_loader_passed_on_reaches_the_blocking_move(tmp_path: Path) -> None:
    _write(tmp_path, {"engine.py": ENGINE, "train.py": TRAIN, "main.py": _main(PINNED)})
    assert _findings(tmp_path, "TDL204,TDL205") == ["engine.py:4 TDL205", "engine.py:4 TDL205"]


def test_unpinned_loader_passed_on_is_reported_at_the_dataloader(tmp_path: Path) -> None:
    _write(tmp_path, {"engine.py": ENGINE, "train.py": TRAIN, "main.py": _main("")})
    assert _findings(tmp_path, "TDL204,TDL205") == ["main.py:7 TDL204"]
    assert _findings(tmp_path, "TDL204", "main.py") == ["main.py:7 TDL204"]  # the others unchecked


def test_a_helper_that_prepares_the_loader_and_moves_its_batches(tmp_path: Path) -> None:
    """A library that places the batches (`accelerator.prepare`) still copies them from the
    loader's memory: the helper moving them counts, as one moving plain batches does."""
    engine = """
        def train_one_epoch(model, loader, device, accelerator):
            for images, targets in accelerator.prepare(loader):
                model(images.to(device)).backward()
    """
    train = """
        from engine import train_one_epoch

        def fit(model, train_loader, device):
            train_one_epoch(model, train_loader, device, accelerator=None)
    """
    _write(tmp_path, {"engine.py": engine, "train.py": train, "main.py": _main("")})
    assert _findings(tmp_path, "TDL204") == ["main.py:7 TDL204"]


def test_pinned_through_keywords_and_a_third_call(tmp_path: Path) -> None:
    train = """
        import engine

        def fit(model, train_loader, device):
            run_epoch(model, loader=train_loader, device=device)

        def run_epoch(model, loader, device):
            engine.train_one_epoch(model, loader, device)
    """
    _write(tmp_path, {"engine.py": ENGINE, "train.py": train, "main.py": _main(PINNED)})
    assert _findings(tmp_path, "TDL205") == ["engine.py:4 TDL205", "engine.py:4 TDL205"]
    # A method called through an instance may be any class's: what it is passed is unknown.
    runner = """
        import engine

        class Runner:
            def run_epoch(self, model, loader, device):
                engine.train_one_epoch(model, loader, device)

        def fit(model, train_loader, device):
            Runner().run_epoch(model, loader=train_loader, device=device)
    """
    _write(tmp_path, {"train.py": runner})
    assert _findings(tmp_path, "TDL204,TDL205") == []
    # An uncalled method passing its own parameter on is a caller whose loader is unknown.
    _write(
        tmp_path,
        {"train.py": dedent(train) + dedent(runner).split("def fit")[0].replace("import engine", "")},
    )
    assert _findings(tmp_path, "TDL205") == []


@pytest.mark.parametrize(
    "other",
    [
        # Another caller of fit passes its own parameter, whose callers are unknown.
        "from train import fit\n\n\ndef finetune(model, loader, device):\n    fit(model, loader, device)\n",
        # ... or fit is handed on as a value (called where the analysis cannot see).
        "from train import fit\n\n\ndef spawn(pool, model, loader, device):\n    pool.submit(fit, model, loader, device)\n",
        # ... or the loader is stored before it is passed on.
        "",
    ],
    ids=["unknown-caller", "passed-on-as-value", "stored"],
)
def test_pinned_loader_passed_on_look_alikes(tmp_path: Path, other: str) -> None:
    train = TRAIN
    if not other:
        train = dedent(TRAIN).replace(
            "train_one_epoch(model, train_loader, device)",
            "self_loader = [train_loader]\n        train_one_epoch(model, self_loader[0], device)",
        )
    _write(tmp_path, {"engine.py": ENGINE, "train.py": train, "main.py": _main(PINNED), "other.py": other})
    assert _findings(tmp_path, "TDL205") == []


def test_recursion_alone_does_not_pin(tmp_path: Path) -> None:
    """A cycle of calls passing the loader on proves nothing (least fixed point), even when the
    only loader entering it is pinned."""
    cycle = """
        from engine import train_one_epoch

        def fit(model, train_loader, device):
            pong(model, train_loader, device)

        def pong(model, train_loader, device):
            fit(model, train_loader, device)
            train_one_epoch(model, train_loader, device)
    """
    _write(tmp_path, {"engine.py": ENGINE, "train.py": cycle, "main.py": _main(PINNED)})
    assert _findings(tmp_path, "TDL205") == []


def test_unpinned_look_alike_callee_does_not_move(tmp_path: Path) -> None:
    engine = dedent(ENGINE).replace("images.to(device), targets.to(device)", "images, targets")
    _write(tmp_path, {"engine.py": engine, "train.py": TRAIN, "main.py": _main("")})
    assert _findings(tmp_path, "TDL204,TDL205") == []


# Methods through inheritance across files -------------------------------------------------------

BASE = """
    import sys
    import torch

    class BaseTrainer:
        def setup(self):
            if not torch.cuda.is_available():
                sys.exit("training needs a GPU")

        def train_one_epoch(self, model, loader, device):
            for images, targets in loader:
                model(images.to(device)).sum().backward()
"""
TRAINER = """
    import torch
    from torch.utils.data import DataLoader

    from base import BaseTrainer

    class Trainer(BaseTrainer):
        def run(self, dataset):
            self.setup()
            model = torch.nn.Linear(2, 2).cuda()
            loader = DataLoader(dataset{pin})
            self.train_one_epoch(model, loader, "cuda")
"""


def _trainer(pin: str = "", members: str = "") -> str:
    return dedent(TRAINER).format(pin=pin) + members


def test_gate_in_a_base_class_of_another_file(tmp_path: Path) -> None:
    _write(tmp_path, {"base.py": BASE, "trainer.py": _trainer(PINNED)})
    assert _findings(tmp_path, "TDL301,TDL311") == []
    _write(tmp_path, {"base.py": dedent(BASE).replace('sys.exit("training needs a GPU")', "print('CPU')")})
    assert _findings(tmp_path, "TDL301,TDL311") == ["trainer.py:10 TDL301"]


@pytest.mark.parametrize(
    "files",
    [
        # Overridden in the subclass: its own setup does not gate.
        {"trainer.py": _trainer(PINNED, "\n    def setup(self):\n        pass\n")},
        # ... or in a class between.
        {
            "middle.py": "from base import BaseTrainer\n\n\nclass Middle(BaseTrainer):\n    def setup(self):\n        pass\n",
            "trainer.py": _trainer(PINNED)
            .replace("from base import BaseTrainer", "from middle import Middle")
            .replace("Trainer(BaseTrainer)", "Trainer(Middle)"),
        },
        # A third-party base comes first and may define setup.
        {
            "trainer.py": _trainer(PINNED).replace(
                "Trainer(BaseTrainer)", "Trainer(torch.nn.Module, BaseTrainer)"
            )
        },
    ],
    ids=["overridden", "overridden-between", "third-party-first"],
)
def test_gate_look_alikes_through_inheritance(tmp_path: Path, files: dict[str, str]) -> None:
    _write(tmp_path, {"base.py": BASE, **files})
    assert _findings(tmp_path, "TDL301") == ["trainer.py:10 TDL301"]


def test_gate_through_a_class_between_and_a_package(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from .base import BaseTrainer\n",
        "pkg/base.py": BASE,
        "middle.py": "from pkg import BaseTrainer\n\n\nclass Middle(BaseTrainer):\n    pass\n",
        "trainer.py": _trainer(PINNED)
        .replace("from base import BaseTrainer", "from middle import Middle")
        .replace("Trainer(BaseTrainer)", "Trainer(Middle)"),
    }
    _write(tmp_path, files)
    assert _findings(tmp_path, "TDL301,TDL311") == []


def test_loader_passed_to_a_base_class_method(tmp_path: Path) -> None:
    _write(tmp_path, {"base.py": BASE, "trainer.py": _trainer("")})
    assert _findings(tmp_path, "TDL204,TDL205") == ["trainer.py:11 TDL204"]
    _write(tmp_path, {"trainer.py": _trainer(PINNED)})
    assert _findings(tmp_path, "TDL204,TDL205") == ["base.py:12 TDL205"]


def test_base_class_method_overridden_keeps_loader_facts_silent(tmp_path: Path) -> None:
    override = "\n    def train_one_epoch(self, model, loader, device):\n        model(loader)\n"
    _write(tmp_path, {"base.py": BASE, "trainer.py": _trainer("", override)})
    assert _findings(tmp_path, "TDL204,TDL205") == []
    # A subclass's own override of a base method that moves: calls through `self` in the base may
    # run it with what the base passes, so its callers' meet is unknown.
    moving = "\n    def train_one_epoch(self, model, loader, device):\n        for x, y in loader:\n"
    moving += "            model(x.to(device))\n"
    _write(tmp_path, {"trainer.py": _trainer(PINNED, moving)})
    assert _findings(tmp_path, "TDL205") == []


# Cache: the dependent's result changes when only the other file's summary changes ----------------


def test_cache_follows_a_base_class_and_a_passed_on_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = record_checks(monkeypatch, file_name)
    cache = ResultCache.open(str(tmp_path / ".cache"))
    project = tmp_path / "project"
    _write(project, {"base.py": BASE, "trainer.py": _trainer(PINNED)})
    assert _findings(project, "TDL301", cache=cache) == []

    # The base's setup only warns now: trainer.py (only its dependency changed) is flagged.
    checked.clear()
    _write(project, {"base.py": dedent(BASE).replace('sys.exit("training needs a GPU")', "print('CPU')")})
    assert _findings(project, "TDL301", cache=cache) == ["trainer.py:10 TDL301"]
    assert sorted(set(checked)) == ["base.py", "trainer.py"]

    # Two calls down: engine.py's loop no longer moves, so main.py loses its TDL204.
    other = tmp_path / "other"
    _write(other, {"engine.py": ENGINE, "train.py": TRAIN, "main.py": _main("")})
    assert _findings(other, "TDL204", cache=cache) == ["main.py:7 TDL204"]
    checked.clear()
    _write(
        other,
        {"engine.py": dedent(ENGINE).replace("images.to(device), targets.to(device)", "images, targets")},
    )
    assert _findings(other, "TDL204", cache=cache) == []
    assert "main.py" not in checked or checked.count("main.py") <= 1
    # A body edit of train.py that leaves its facts alone re-checks train.py only.
    _write(other, {"engine.py": ENGINE})
    assert _findings(other, "TDL204", cache=cache) == ["main.py:7 TDL204"]
    checked.clear()
    _write(other, {"train.py": dedent(TRAIN).replace("range(epochs)", "range(epochs + 0)")})
    assert _findings(other, "TDL204", cache=cache) == ["main.py:7 TDL204"]
    assert checked == ["train.py"]


def test_method_called_through_an_instance_elsewhere_keeps_tdl205_silent(tmp_path: Path) -> None:
    _write(tmp_path, {"base.py": BASE, "trainer.py": _trainer(PINNED)})
    assert _findings(tmp_path, "TDL205") == ["base.py:12 TDL205"]
    # A script calling the method through an instance: what it passes is not seen as a call.
    script = "from trainer import Trainer\n\n\ndef go(model, loader):\n    Trainer().train_one_epoch(model, loader, 'cuda')\n"
    _write(tmp_path, {"script.py": script})
    assert _findings(tmp_path, "TDL205") == []


def test_a_subclass_redefining_the_method_makes_self_calls_unknown(tmp_path: Path) -> None:
    """`self.setup()` in Trainer may run a subclass's setup (the object may be one)."""
    special = "from trainer import Trainer\n\n\nclass Special(Trainer):\n    def setup(self):\n        pass\n"
    _write(tmp_path, {"base.py": BASE, "trainer.py": _trainer(PINNED), "special.py": special})
    assert _findings(tmp_path, "TDL301") == ["trainer.py:10 TDL301"]


# A helper that fills the checkpoint dict item by item (TDL105 at the call) ------------------------

FILLING = """
    import torch

    def save_checkpoint(encoder, optimizer, path):
        ckpt = {"epoch": 1}
        ckpt["encoder"] = encoder
        ckpt["optimizer"] = optimizer.state_dict()
        torch.save(ckpt, path)
"""


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ("save_checkpoint(model, optimizer, path)", ["train.py:9 TDL105"]),
        ("save_checkpoint(model.state_dict(), optimizer, path)", []),
        ("save_checkpoint(blob, optimizer, path)", []),
    ],
    ids=["module", "state-dict", "unknown"],
)
def test_checkpoint_helper_filling_items(tmp_path: Path, call: str, expected: list[str]) -> None:
    train = "import torch\n\nfrom utils import save_checkpoint\n\n\ndef main(path, blob):\n"
    train += (
        "    model = torch.nn.Linear(2, 2)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    train += f"    {call}\n"
    _write(tmp_path, {"utils.py": FILLING, "train.py": train})
    assert _findings(tmp_path, "TDL105") == expected


def test_same_results_with_workers(tmp_path: Path) -> None:
    files = {"engine.py": ENGINE, "train.py": TRAIN, "base.py": BASE, "trainer.py": _trainer("")}
    for index in range(4):
        files[f"main{index}.py"] = _main(PINNED if index % 2 else "")
    _write(tmp_path, files)
    serial = findings(tmp_path, ("TDL204", "TDL205", "TDL301"))
    assert serial == ["main0.py:7 TDL204", "main2.py:7 TDL204", "trainer.py:11 TDL204"]
    assert findings(tmp_path, ("TDL204", "TDL205", "TDL301"), jobs=2) == serial
