"""TDL101's fix is safe only where every use of the loaded value ends in `load_state_dict`.

The rule examples check the fixed text (unsafe fixes included); these check which
fixes are offered as safe, since `torchdev-fix` applies those without a person reading them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixsafety import safeties
from multifile import write_files

from torchdev_lint.rules.tdl101_load_without_map_location import LoadWithoutMapLocation
from torchdev_lint.runner import CheckOptions, process_files

CASES = [
    ("model.load_state_dict(torch.load(p))", "safe"),
    ("sd = torch.load(p)\nmodel.load_state_dict(sd)", "safe"),
    ("ckpt = torch.load(p)\nif 'model' in ckpt:\n    model.load_state_dict(ckpt['model'])", "safe"),
    ("ckpt = torch.load(p)\noptimizer.load_state_dict(ckpt.get('optimizer'))", "safe"),
    (
        "sd = torch.load(p)\nsd = sd['state_dict']\nmodel.load_state_dict({k[7:]: v for k, v in sd.items()})",
        "safe",
    ),
    ("torch.load(p)", "safe"),
    ("model = torch.load(p, weights_only=False)\nmodel.eval()", "unsafe"),
    (
        "ckpt = torch.load(p)\nmodel.load_state_dict(ckpt['model'])\noptimizer = ckpt['optimizer']\noptimizer.step()",
        "unsafe",
    ),
    ("return torch.load(p)", "unsafe"),
    ("use(torch.load(p))", "unsafe"),
    ("sd = torch.load(p)\nmodel.load_state_dict(sd)\nreturn sd", "unsafe"),
    ("model.load_state_dict(torch.load(p), assign=True)", "unsafe"),
    # `assign` as the third positional argument, or perhaps inside `*args`/`**options`.
    ("model.load_state_dict(torch.load(p), False, True)", "unsafe"),
    ("model.load_state_dict(torch.load(p), False, False)", "safe"),
    ("model.load_state_dict(torch.load(p), **options)", "unsafe"),
    ("model.load_state_dict(torch.load(p), *flags)", "unsafe"),
    ("t = torch.load(p)\nreturn t * 2", "unsafe"),
    ("global sd\nsd = torch.load(p)\nmodel.load_state_dict(sd)", "unsafe"),
    ("sd = torch.load(p)\nmodel.load_state_dict({k: v.half() for k, v in sd.items()})", "unsafe"),
    ("m = torch.jit.load(p)", "unsafe"),
    ("model.load_state_dict(torch.hub.load_state_dict_from_url(url))", "safe"),
    # A loop over the loaded dict's items: each value's name read only inside the loop.
    ("for name, sd in torch.load(p).items():\n    model[name].load_state_dict(sd)", "safe"),
    ("for sd in torch.load(p).values():\n    model.load_state_dict(sd)", "safe"),
    ("for name, sd in torch.load(p).items():\n    optimizer.add(sd)", "unsafe"),
    ("for name, sd in torch.load(p).items():\n    model.load_state_dict(sd)\nreturn sd", "unsafe"),
    ("for name, sd in torch.load(p).items(default=1):\n    model.load_state_dict(sd)", "unsafe"),
]


@pytest.mark.parametrize(("body", "safety"), CASES)
def test_fix_safety(body: str, safety: str) -> None:
    lines = "\n".join("    " + line for line in body.splitlines())
    code = f"import torch\n\ndef restore(model, optimizer, p, url, options, flags):\n{lines}\n"
    assert safeties(LoadWithoutMapLocation, code, "restore.py") == [safety]


def test_a_file_defining_load_state_dict_gets_no_safe_fix() -> None:
    code = """
        import torch

        class EMA:
            def load_state_dict(self, state):
                self.shadow = state

        def restore(ema, p):
            ema.load_state_dict(torch.load(p))
        """
    assert safeties(LoadWithoutMapLocation, code, "ema.py") == ["unsafe"]


EMA_KEEPING = """
    class EMA:
        def __init__(self, model):
            self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

        def load_state_dict(self, state):
            self.shadow = state
"""
# The look-alike: a helper class of the project with no `load_state_dict` of its own.
EMA_PLAIN = """
    class EMA:
        def __init__(self, model):
            self.model = model
"""
RESUME = """
    import torch
    from ema import EMA

    def resume(model, path):
        ema = EMA(model)
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        ema.load_state_dict(ckpt["ema"])
        return ema
"""


# A module keeping a loaded tensor as given through a hook `load_state_dict` runs.
HOOKED = """
    from torch import nn

    class EMA(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.register_load_state_dict_pre_hook(self._take)

        def _take(self, module, state, prefix, *args):
            self.mean = state.pop(prefix + "mean")
"""
# A module keeping an extra state as loaded: `load_state_dict` hands it to `set_extra_state` as is.
EXTRA_STATE = """
    from torch import nn

    class EMA(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.mean = None

        def set_extra_state(self, state):
            self.mean = state
"""


@pytest.mark.parametrize(
    ("ema", "safety"),
    [(EMA_KEEPING, "unsafe"), (EXTRA_STATE, "unsafe"), (HOOKED, "unsafe"), (EMA_PLAIN, "safe")],
)
@pytest.mark.parametrize("checked", [(), ("train.py",)])
def test_a_class_of_another_file_defining_load_state_dict_makes_the_fix_unsafe(
    tmp_path: Path, ema: str, safety: str, checked: tuple[str, ...]
) -> None:
    """`ema.load_state_dict` may be the project's own, which keeps the CPU tensors as given: the
    project's facts say so whether the whole project or the loading file alone is checked."""
    write_files(tmp_path, {"ema.py": ema, "train.py": RESUME})
    paths = [str(tmp_path / name) for name in checked] or sorted(str(p) for p in tmp_path.glob("*.py"))
    options = CheckOptions(rules=(LoadWithoutMapLocation,), cache=None, with_edits=True)
    found = [d for report in process_files(paths, options) for d in report.diagnostics]
    assert [(Path(d.path).name, d.fix.safety if d.fix else None) for d in found] == [("train.py", safety)]


def test_a_load_another_file_imports_gets_no_safe_fix(tmp_path: Path) -> None:
    """`CKPT = torch.load(p)` at module level, imported by `train.py` and used there as a tensor:
    the uses in this file alone do not say what the others do."""
    write_files(
        tmp_path,
        {
            "state.py": 'import torch\n\nCKPT = torch.load("last.pt")\n',
            "train.py": "from state import CKPT\n\nshadow = CKPT['ema'] * 2\n",
        },
    )
    options = CheckOptions(rules=(LoadWithoutMapLocation,), cache=None, with_edits=True)
    paths = sorted(str(p) for p in tmp_path.glob("*.py"))
    found = [d for report in process_files(paths, options) for d in report.diagnostics]
    assert [(Path(d.path).name, d.fix.safety if d.fix else None) for d in found] == [("state.py", "unsafe")]
