"""TDL208's `.detach()` is safe only where no code outside the function can see the accumulator
or anything computed from it: returned (directly or inside a value), handed to an object the
function was given (`history.append(total)`), stored on `self`."""

from __future__ import annotations

import pytest
from fixsafety import safeties

from torchdev_lint.rules.tdl208_loss_accumulated_with_graph import LossAccumulatedWithGraph

CASES = [
    ("print(total)", "safe"),
    ("return total.item()", "safe"),
    ("return total", "unsafe"),
    ("return {'loss': total}", "unsafe"),
    ("mean = total / 4; return mean", "unsafe"),
    ("history.append(total)", "unsafe"),
    ("local = []; local.append(total)", "safe"),
    ("history.append(total.item())", "safe"),
    ("print(F.relu(total))", "safe"),
    ("history[0] = total", "unsafe"),
]

# The accumulator itself is another name for an object the caller sees.
ALIASED = [
    ("hist = history", "unsafe"),
    ("hist = []", "safe"),
]


@pytest.mark.parametrize(("after", "safety"), CASES)
def test_detach_fix_safety(after: str, safety: str) -> None:
    code = f"""
        import torch.nn.functional as F

        def fit(model, loader, history):
            total = 0.0
            for x, y in loader:
                loss = F.mse_loss(model(x), y)
                loss.backward()
                total += loss
            {after}
        """
    assert safeties(LossAccumulatedWithGraph, code, "fit.py") == [safety]


@pytest.mark.parametrize(("binding", "safety"), ALIASED)
def test_an_accumulator_bound_to_an_outside_object(binding: str, safety: str) -> None:
    code = f"""
        import torch.nn.functional as F

        def fit(model, loader, history):
            {binding}
            for x, y in loader:
                loss = F.mse_loss(model(x), y)
                loss.backward()
                hist.append(loss)
        """
    assert safeties(LossAccumulatedWithGraph, code, "fit.py") == [safety]
