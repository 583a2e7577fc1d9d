"""TDL312's rewrite to `torch.amp` is safe unless the project tests an object against the old class.

`torch.cuda.amp.GradScaler` is a subclass of `torch.amp.GradScaler`: after the fix,
`isinstance(scaler, torch.cuda.amp.GradScaler)` is False, so code that saves the scaler's
state only for such objects stops saving it. A test of the new class still holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixsafety import safeties
from multifile import write_files

from torchdev_lint.cli import main
from torchdev_lint.rules.tdl312_deprecated_cuda_amp import DeprecatedCudaAmp
from torchdev_lint.runner import CheckOptions, process_files

TRAINER = """
    import torch

    class Trainer:
        def __init__(self, use_amp):
            self.scaler = torch.cuda.amp.GradScaler(enabled=use_amp)

        def checkpoint(self):
            return self.scaler.state_dict() if {test} else None
"""


@pytest.mark.parametrize(
    ("test", "safety"),
    [
        ("isinstance(self.scaler, torch.cuda.amp.GradScaler)", "unsafe"),
        ("issubclass(type(self.scaler), torch.cuda.amp.GradScaler)", "unsafe"),
        ("isinstance(self.scaler, torch.amp.GradScaler)", "safe"),
        ("isinstance(self.scaler, (torch.cuda.amp.GradScaler, type(None)))", "unsafe"),
        ("type(self.scaler) is torch.cuda.amp.GradScaler", "unsafe"),
        ("self.scaler.is_enabled()", "safe"),
    ],
)
def test_a_type_test_of_the_old_class_makes_the_fix_unsafe(test: str, safety: str) -> None:
    assert safeties(DeprecatedCudaAmp, TRAINER.format(test=test), "trainer.py") == [safety]


@pytest.mark.parametrize(("checks", "safety"), [("torch.cuda.amp.GradScaler", "unsafe"), ("dict", "safe")])
def test_a_type_test_in_another_file(tmp_path: Path, checks: str, safety: str) -> None:
    """The scaler is made in `amp_setup.py` and tested in `save.py`, which imports it."""
    write_files(
        tmp_path,
        {
            "amp_setup.py": "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n",
            "save.py": f"import torch\nimport amp_setup\n\nprint(isinstance(amp_setup.scaler, {checks}))\n",
        },
    )
    paths = sorted(str(p) for p in tmp_path.glob("*.py"))
    options = CheckOptions(rules=(DeprecatedCudaAmp,), cache=None, with_edits=True)
    found = [d for report in process_files(paths, options) for d in report.diagnostics]
    assert [(Path(d.path).name, d.fix.safety if d.fix else None) for d in found] == [("amp_setup.py", safety)]


@pytest.mark.parametrize(
    "importing",
    [
        "from amp_utils import autocast, infer",
        "from amp_utils import (\n    infer,  # the model's entry point\n    autocast,\n)",
    ],
    ids=["one-line", "parenthesised"],
)
def test_a_fix_keeps_an_import_another_file_takes_from_the_module(tmp_path: Path, importing: str) -> None:
    """`main.py` imports `autocast` from `amp_utils`: fixing `amp_utils` removes its last use
    there, but the import stays (removing it broke `main.py` with an ImportError), also when the
    name stands on a later line of a parenthesised import."""
    write_files(
        tmp_path,
        {
            "amp_utils.py": """
                import torch
                from torch.cuda.amp import autocast

                def infer(model, x):
                    with autocast(enabled=False):
                        return model(x)
            """,
            "main.py": importing + "\n",
        },
    )
    main(["check", "--fix", "--select", "TDL312", "--no-cache", "--isolated", str(tmp_path)])
    fixed = (tmp_path / "amp_utils.py").read_text()
    assert 'torch.amp.autocast("cuda"' in fixed
    assert "from torch.cuda.amp import autocast" in fixed
