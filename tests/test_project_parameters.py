"""The project-wide analysis, parameter boundaries: what a function does with what its callers pass.

- TDL105: `save_checkpoint(encoder, ...)` in `utils.py` stores its parameters in a dict it
  gives to `torch.save`; `train.py` passing a module there is reported at the call.
- TDL204: a `DataLoader` without `pin_memory` in `main.py` passed to `engine.train_one_epoch`,
  which moves the batches of that parameter to the device, is reported at the `DataLoader(...)`.
- TDL205: `engine.train_one_epoch` moves batches without `non_blocking` and every call in the
  project passes it a pinned loader: reported at the move in `engine.py`.

Each project is a few files written into tmp_path; each finding has look-alikes that must stay
silent (the same helper used correctly, an unknown argument, another module's function).
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
from multifile import file_name, findings, record_checks, write_files

from torchdev_lint.cache import ResultCache
from torchdev_lint.config import select_rules
from torchdev_lint.runner import CheckOptions, process_files

UTILS = """
    import torch

    def save_checkpoint(encoder, decoder, optimizer, path, *, extra=None):
        state = {"encoder": encoder, "decoder": decoder, "optimizer": optimizer.state_dict(), "extra": extra}
        torch.save(state, path)

    def save_weights(encoder, path):
        torch.save({"encoder": encoder.state_dict()}, path)

    class Saver:
        def save(self, encoder, path):
            torch.save(dict(encoder=encoder, step=1), path)
"""
TRAIN = """
    import torch
    from torch import nn

    import utils
    from utils import Saver, save_checkpoint
    {imports}

    class Net(nn.Module):
        pass

    def main(path, blob):
        model = Net()
        decoder = nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        {call}
"""
ENGINE = """
    from tqdm import tqdm

    def train_one_epoch(model, loader, device, log_every=10):
        for step, (images, targets) in enumerate(tqdm(loader)):
            images, targets = images.to(device), targets.to(device)
            model(images).backward()
"""
MAIN = """
    from torch.utils.data import DataLoader

    from engine import train_one_epoch

    def main(dataset, model, device):
        train_loader = DataLoader(dataset, batch_size=32, shuffle=True{pin})
        for epoch in range(10):
            train_one_epoch(model, train_loader, device)
"""


def _write(root: Path, files: dict[str, str]) -> None:
    write_files(root, {"setup.py": "", **files})


def _findings(
    root: Path, codes: str, *names: str, cache: ResultCache | None = None, jobs: int = 1
) -> list[str]:
    """`path:line code` of each finding of `codes`, checking `names` (all .py files if none)."""
    return findings(root, codes.split(","), *names, cache=cache, jobs=jobs)


def _train(call: str, imports: str = "") -> str:
    return dedent(TRAIN).format(imports=imports, call=call)


# TDL105: a module handed to a helper that saves it in a checkpoint dict -------------------


@pytest.mark.parametrize(
    "call",
    [
        "save_checkpoint(model, decoder, optimizer, path)",
        "utils.save_checkpoint(decoder.state_dict(), decoder, optimizer, path)",
        "save_checkpoint(encoder=model, decoder=None, optimizer=optimizer, path=path)",
        "save_checkpoint(None, None, optimizer, path, extra=torch.nn.Linear(2, 2))",
    ],
)
def test_module_passed_to_a_checkpoint_helper(tmp_path: Path, call: str) -> None:
    _write(tmp_path, {"utils.py": UTILS, "train.py": _train(call)})
    assert _findings(tmp_path, "TDL105") == ["train.py:16 TDL105"]
    assert _findings(tmp_path, "TDL105", "train.py") == ["train.py:16 TDL105"]  # utils.py unchecked


def test_message_names_the_helper(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"utils.py": UTILS, "train.py": _train("utils.save_checkpoint(model, None, optimizer, path)")},
    )
    options = CheckOptions(rules=tuple(select_rules(["TDL105"])), with_edits=False)
    (report,) = [r for r in process_files([str(tmp_path / "train.py")], options) if r.diagnostics]
    (finding,) = report.diagnostics
    assert "`utils.save_checkpoint`, which stores it in a checkpoint dict" in finding.message
    assert finding.fix is None


@pytest.mark.parametrize(
    ("call", "imports"),
    [
        ("utils.save_weights(model, path)", ""),  # the helper saves `encoder.state_dict()`
        ("save_checkpoint(model.state_dict(), decoder.state_dict(), optimizer, path)", ""),
        ("save_checkpoint(blob, blob, optimizer, path)", ""),  # the argument's kind is unknown
        ("Saver().save(model, path)", ""),  # a method called through an instance: unknown
        ("hub.save_checkpoint(model, decoder, optimizer, path)", "import hub"),  # third-party
        ("other.save_checkpoint(model, decoder, optimizer, path)", "import other"),
    ],
    ids=[
        "state-dict-in-helper",
        "state-dict-passed",
        "unknown-kind",
        "instance-method",
        "third-party",
        "other-module",
    ],
)
def test_checkpoint_look_alikes_stay_silent(tmp_path: Path, call: str, imports: str) -> None:
    other = "import torch\n\ndef save_checkpoint(encoder, decoder, optimizer, path):\n    torch.save(encoder.state_dict(), path)\n"
    _write(tmp_path, {"utils.py": UTILS, "other.py": other, "train.py": _train(call, imports)})
    assert _findings(tmp_path, "TDL105") == []


def test_helper_that_names_its_parameter_model_is_reported_once(tmp_path: Path) -> None:
    """`{"model": model}` in the helper is reported there (per file); its callers are not."""
    utils = "import torch\n\ndef save(model, path):\n    torch.save({'model': model}, path)\n"
    _write(tmp_path, {"utils.py": utils, "train.py": _train("utils.save(model, path)")})
    assert _findings(tmp_path, "TDL105") == ["utils.py:4 TDL105"]


def test_method_called_through_self(tmp_path: Path) -> None:
    trainer = """
        import torch
        from torch import nn

        class Trainer:
            def __init__(self):
                self.model = nn.Linear(2, 2)

            def checkpoint(self, encoder, path):
                torch.save({"encoder": encoder, "epoch": 1}, path)

            def end_epoch(self, path):
                self.checkpoint(self.model, path)
                self.checkpoint(encoder=nn.Linear(2, 2), path=path)
                self.checkpoint(self.model.state_dict(), path)
    """
    _write(tmp_path, {"trainer.py": trainer})
    assert _findings(tmp_path, "TDL105") == ["trainer.py:13 TDL105", "trainer.py:14 TDL105"]


# TDL204/TDL205: a loader built in main.py, its batches moved in engine.py ------------------


def test_pinned_loader_passed_to_a_blocking_move(tmp_path: Path) -> None:
    _write(tmp_path, {"engine.py": ENGINE, "main.py": dedent(MAIN).format(pin=", pin_memory=True")})
    assert _findings(tmp_path, "TDL204,TDL205") == ["engine.py:6 TDL205", "engine.py:6 TDL205"]


def test_unpinned_loader_passed_to_a_move(tmp_path: Path) -> None:
    _write(tmp_path, {"engine.py": ENGINE, "main.py": dedent(MAIN).format(pin="")})
    assert _findings(tmp_path, "TDL204,TDL205") == ["main.py:7 TDL204"]
    assert _findings(tmp_path, "TDL204,TDL205", "main.py") == ["main.py:7 TDL204"]  # engine.py unchecked


@pytest.mark.parametrize(
    ("pin", "found"), [("", "main.py:7 TDL204"), (", pin_memory=True", "training/engine.py:6 TDL205")]
)
def test_a_callee_a_package_re_exports(tmp_path: Path, pin: str, found: str) -> None:
    """The package's `__init__` leads to the module that moves the batches, though only the file
    building the loader names the callee."""
    main = dedent(MAIN).format(pin=pin).replace("from engine import", "from training import")
    files = {"training/__init__.py": "from .engine import train_one_epoch\n", "training/engine.py": ENGINE}
    _write(tmp_path, {**files, "main.py": main})
    assert sorted(set(_findings(tmp_path, "TDL204,TDL205"))) == [found]


def test_a_loader_handed_on_by_a_file_that_builds_none(tmp_path: Path) -> None:
    """`loop.run` passes its loader on to the function that moves it: a caller of `run` is read
    (it names a function that moves a loader parameter's batches), though it builds no loader."""
    loop = """
        from engine import train_one_epoch

        def run(model, loader, device):
            train_one_epoch(model, loader, device)
    """
    main = dedent(MAIN).format(pin=", pin_memory=True").replace("train_one_epoch", "run")
    main = main.replace("from engine import", "from loop import")
    launch = """
        from loop import run

        def launch(model, loader, device):
            run(model, loader, device)
    """
    _write(tmp_path, {"engine.py": ENGINE, "loop.py": loop, "main.py": main})
    assert sorted(set(_findings(tmp_path, "TDL204,TDL205"))) == ["engine.py:6 TDL205"]
    _write(tmp_path, {"launch.py": launch})  # a call whose loader is unknown
    assert _findings(tmp_path, "TDL204,TDL205") == []


@pytest.mark.parametrize(
    "loop",
    [
        "for images, targets in loader:",
        "for step, (images, targets) in enumerate(loader):",
        "for images, targets in tqdm(loader, desc='train'):",
        "for batch in metric_logger.log_every(loader, log_every):\n        images, targets = batch",
    ],
    ids=["direct", "enumerate", "tqdm", "log-every-unpacked"],
)
def test_wrapper_spellings_in_the_callee(tmp_path: Path, loop: str) -> None:
    engine = dedent(ENGINE).replace("for step, (images, targets) in enumerate(tqdm(loader)):", loop)
    _write(tmp_path, {"engine.py": engine, "main.py": dedent(MAIN).format(pin=", pin_memory=True")})
    line = engine.splitlines().index(next(x for x in engine.splitlines() if "images.to(" in x)) + 1
    assert _findings(tmp_path, "TDL205") == [f"engine.py:{line} TDL205"] * 2


@pytest.mark.parametrize(
    "engine",
    [
        # The callee does not move the batches.
        "def train_one_epoch(model, loader, device):\n    for images, targets in loader:\n        model(images)\n",
        # ... moves them to the CPU only.
        "def train_one_epoch(model, loader, device):\n    for images, targets in loader:\n        model(images.to('cpu'))\n",
    ],
    ids=["no-move", "cpu-only"],
)
def test_loader_look_alikes_stay_silent(tmp_path: Path, engine: str) -> None:
    for pin in ("", ", pin_memory=True"):
        _write(tmp_path, {"engine.py": engine, "main.py": dedent(MAIN).format(pin=pin)})
        assert _findings(tmp_path, "TDL204,TDL205") == []


def test_non_blocking_move_of_a_pinned_loader_stays_silent(tmp_path: Path) -> None:
    engine = dedent(ENGINE).replace("to(device)", "to(device, non_blocking=True)")
    _write(tmp_path, {"engine.py": engine, "main.py": dedent(MAIN).format(pin=", pin_memory=True")})
    assert _findings(tmp_path, "TDL204,TDL205") == []


def test_one_unpinned_or_unknown_call_site_keeps_tdl205_silent(tmp_path: Path) -> None:
    pinned = dedent(MAIN).format(pin=", pin_memory=True")
    evaluate = """
        from engine import train_one_epoch

        def finetune(model, loader, device):
            train_one_epoch(model, loader, device)
    """
    _write(tmp_path, {"engine.py": ENGINE, "main.py": pinned, "finetune.py": evaluate})
    assert _findings(tmp_path, "TDL205") == []  # the loader finetune.py passes is unknown
    plain = pinned.replace(
        "def main(",
        "def other(dataset, model, device):\n    train_one_epoch(model, DataLoader(dataset), device)\n\n\ndef main(",
    )
    _write(tmp_path, {"finetune.py": "", "main.py": plain})
    assert _findings(tmp_path, "TDL205") == []  # one call passes an unpinned loader
    assert _findings(tmp_path, "TDL205", "engine.py") == []  # never called in the checked files


def test_function_handed_on_as_a_value_keeps_tdl205_silent(tmp_path: Path) -> None:
    """`pool.submit(train_one_epoch, ...)` calls it where the analysis cannot see what is passed."""
    main = dedent(MAIN).format(pin=", pin_memory=True")
    _write(tmp_path, {"engine.py": ENGINE, "main.py": main})
    assert _findings(tmp_path, "TDL205") == ["engine.py:6 TDL205", "engine.py:6 TDL205"]
    handed = (
        main
        + "\n\ndef spawn(pool, model, loader, device):\n    pool.submit(train_one_epoch, model, loader, device)\n"
    )
    _write(tmp_path, {"main.py": handed})
    assert _findings(tmp_path, "TDL205") == []


def test_loaders_handed_to_accelerate_stay_silent(tmp_path: Path) -> None:
    """Per file: a file that hands loaders to accelerate moves none itself (the batches come on
    the device); the same exemption holds for a loader passed on to the project's engine."""
    main = (
        dedent(MAIN)
        .format(pin="")
        .replace("    for epoch", "    train_loader = accelerator.prepare(train_loader)\n    for epoch")
        .replace("def main(dataset, model, device)", "def main(dataset, model, device, accelerator)")
    )
    _write(tmp_path, {"engine.py": ENGINE, "main.py": main})
    assert _findings(tmp_path, "TDL204") == []


def test_same_results_with_workers(tmp_path: Path) -> None:
    files = {"engine.py": ENGINE}
    for index in range(8):
        files[f"main{index}.py"] = dedent(MAIN).format(pin=", pin_memory=True" if index % 2 else "")
    _write(tmp_path, files)
    serial = _findings(tmp_path, "TDL204,TDL205")
    assert serial == [f"main{i}.py:7 TDL204" for i in range(0, 8, 2)]
    assert _findings(tmp_path, "TDL204,TDL205", jobs=2) == serial


# Cache: an edit that changes a callee's summary re-checks exactly its callers -------------------


def test_cache_rechecks_the_dependents_of_a_changed_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = record_checks(monkeypatch, file_name)
    cache = ResultCache.open(str(tmp_path / ".cache"))
    project = tmp_path / "project"
    other = "def evaluate(model, path):\n    return model(path)\n"
    _write(
        project,
        {"engine.py": ENGINE, "main.py": dedent(MAIN).format(pin=""), "other.py": other, "utils.py": UTILS},
    )
    codes = "TDL105,TDL204,TDL205"
    assert _findings(project, codes, cache=cache) == ["main.py:7 TDL204"]
    # (A file pass 1 parses is checked once, from that parse's tree, once its facts are known.)
    assert sorted(checked) == ["engine.py", "main.py", "other.py", "setup.py", "utils.py"]

    # A body edit that leaves the summary's facts alone: only engine.py is checked again.
    checked.clear()
    _write(project, {"engine.py": dedent(ENGINE).replace("model(images)", "model(images * 2)")})
    assert _findings(project, codes, cache=cache) == ["main.py:7 TDL204"]
    assert checked == ["engine.py"]

    # The batches are no longer moved: main.py (which calls it) loses its facts, so it is checked
    # again (pass 1 kept its tree for one check, with its facts); other.py is untouched.
    checked.clear()
    _write(
        project,
        {"engine.py": dedent(ENGINE).replace("images.to(device), targets.to(device)", "images, targets")},
    )
    assert _findings(project, codes, cache=cache) == []
    assert sorted(checked) == ["engine.py", "main.py"]

    # The caller now pins memory: engine.py's facts change (its moves are back, every call pinned).
    checked.clear()
    _write(project, {"engine.py": ENGINE, "main.py": dedent(MAIN).format(pin=", pin_memory=True")})
    assert _findings(project, codes, cache=cache) == ["engine.py:6 TDL205", "engine.py:6 TDL205"]
    assert sorted(set(checked)) == ["engine.py", "main.py"]
