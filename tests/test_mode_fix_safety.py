"""TDL305's reorder is safe only where every module involved is built by a `torch.nn` class.

A container or wrapper (`nn.Sequential`, `nn.ModuleList`, `nn.DataParallel`) runs its children's
`train()` and `to()`: a child of a project class may override them so that the order matters.
"""

from __future__ import annotations

import pytest
from fixsafety import safeties

from torchdev_lint.rules.tdl305_eval_before_transfer import EvalBeforeTransfer

CASES = [
    ("nn.Linear(4, 4)", "safe"),
    ("nn.Sequential(nn.Linear(4, 4), nn.ReLU())", "safe"),
    ("nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 2)])", "safe"),
    ("nn.DataParallel(nn.Linear(4, 4), device_ids=[0, 1])", "safe"),
    ("nn.Sequential(Head())", "unsafe"),
    ("nn.Sequential(backbone, nn.ReLU())", "unsafe"),
    ("nn.Sequential(*layers)", "unsafe"),
    ("nn.DataParallel(Head())", "unsafe"),
    ("nn.ModuleDict({'head': Head()})", "unsafe"),
    ("Head()", "unsafe"),
    ("nn.DataParallel(module=Head())", "unsafe"),
    ("nn.TransformerEncoder(layer, 2)", "unsafe"),
    ("nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), 2)", "safe"),
    ("nn.TransformerEncoder(make_head(), 1)", "unsafe"),
    ("nn.DataParallel(module=backbone)", "unsafe"),
    ("nn.utils.parametrizations.weight_norm(make_head())", "unsafe"),
]


def test_a_container_grown_after_it_is_built_or_a_swap_in_a_try_is_unsafe() -> None:
    code = """
        from torch import nn

        def grown(device, head):
            model = nn.Sequential(nn.Linear(4, 4))
            model.append(head)
            model.eval()
            model.to(device)

        def guarded(device):
            net = nn.Linear(4, 4)
            try:
                net.eval()
                net.to(device)
            except RuntimeError:
                pass
        """
    assert safeties(EvalBeforeTransfer, code, "build.py") == ["unsafe", "unsafe"]


@pytest.mark.parametrize(("built", "safety"), CASES)
def test_reorder_fix_safety(built: str, safety: str) -> None:
    code = f"""
        import torch
        from torch import nn

        class Head(nn.Module):
            def train(self, mode=True):
                self.cache = torch.zeros(2)
                return super().train(mode)

        layer = Head()

        def build(device, backbone, layers):
            return {built}.eval().to(device)
        """
    assert safeties(EvalBeforeTransfer, code, "build.py") == [safety]


@pytest.mark.parametrize(("rebuilt", "safety"), [("", "safe"), ("global model\n    ", "unsafe")])
def test_a_module_level_name_a_function_rebinds_with_global(rebuilt: str, safety: str) -> None:
    """`model = nn.Linear(...)` at module level says nothing of `model` once a function rebinds it
    through `global model` (to a project class whose `train()` may care about the device)."""
    code = f"""
import torch
from torch import nn

model = nn.Linear(4, 4)


def swap_in(head):
    {rebuilt}model = head


model.eval()
model.to("cuda")
"""
    assert safeties(EvalBeforeTransfer, code, "script.py") == [safety]
