"""TDL101's fix is safe only where every use of the loaded value ends in `load_state_dict`.

The rule examples check the fixed text (unsafe fixes included); these check which
fixes are offered as safe, since `torchdev-fix` applies those without a person reading them.
"""

from __future__ import annotations

import pytest

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rule import dedent
from torchdev_lint.rules.tdl101_load_without_map_location import LoadWithoutMapLocation

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
    source = dedent(f"import torch\n\ndef restore(model, optimizer, p, url):\n{lines}\n")
    result = check_source("restore.py", source.encode(), [LoadWithoutMapLocation], Settings())
    assert [d.fix.safety if d.fix else None for d in result.diagnostics] == [safety]


def test_a_file_defining_load_state_dict_gets_no_safe_fix() -> None:
    source = dedent(
        """
        import torch

        class EMA:
            def load_state_dict(self, state):
                self.shadow = state

        def restore(ema, p):
            ema.load_state_dict(torch.load(p))
        """
    )
    result = check_source("ema.py", source.encode(), [LoadWithoutMapLocation], Settings())
    assert [d.fix.safety if d.fix else None for d in result.diagnostics] == ["unsafe"]
