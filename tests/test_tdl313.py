"""TDL313 and where a module is defined: models of test code are fixtures, not shipped modules.

The rule's examples (tests/test_rule_examples.py) cannot choose a path; these can.
"""

from __future__ import annotations

from textwrap import dedent

import pytest

from torchdev_lint.engine import check_source
from torchdev_lint.rules.tdl313_unregistered_module_tensor import UnregisteredModuleTensor

# Shaped like torch's quantization test models: a weight kept as a plain tensor for `F.linear`.
FUNCTIONAL_LINEAR = dedent(
    """
    import torch
    import torch.nn.functional as F
    {imports}

    class FunctionalLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.rand((5, 5))

        def forward(self, x):
            return F.linear(x, self.weight)
    """
)


def _lines(path: str, imports: str = "") -> list[int]:
    result = check_source(path, FUNCTIONAL_LINEAR.format(imports=imports), [UnregisteredModuleTensor])
    return [d.line for d in result.diagnostics]


@pytest.mark.parametrize("path", ["tests/test_models.py", "pkg/models_test.py", "tests/conftest.py"])
def test_silent_in_test_modules(path: str) -> None:
    assert _lines(path) == []


@pytest.mark.parametrize("imports", ["import unittest", "from unittest import TestCase", "import pytest"])
def test_silent_in_helpers_written_for_tests(imports: str) -> None:
    assert _lines("torch/testing/_internal/common_quantization.py", imports) == []


@pytest.mark.parametrize("path", ["pkg/layers.py", "contest/models.py", "tests/fixtures/models.py"])
def test_flagged_elsewhere(path: str) -> None:
    assert _lines(path) == [9]


# Moved where it is used, one call away; used only as an index (issue 23: premises that hold at the
# use, not in the spelling of `__init__`).
CODEBOOK = dedent(
    """
    import torch
    from torch import nn


    def nearest(x, centers=None, scale=1.0):
        \"\"\"Distance to the nearest center.\"\"\"
        centers = centers.to(x).unsqueeze(0)
        return (x - centers).abs().amin(-1) * scale


    def spread(x, centers):
        return x - centers.mean()


    class Codebook(nn.Module):
        def __init__(self, table):
            super().__init__()
            self.centers = torch.from_numpy(table)
            self.weights = torch.ones(4)
            self.order = torch.arange(8).flip(0)
            self.lookup = torch.randn(8, 4)

        def forward(self, x):
            picked = x[:, self.order]
            return nearest(picked, centers=self.centers) + self._rescale(x, self.weights)

        def _rescale(self, x, w):
            w = w.type_as(x)
            return x * w

        def embed(self, ids):
            return self.lookup[ids]
    """
)


def _codebook(replace: tuple[str, str] = ("", "")) -> list[int]:
    source = CODEBOOK.replace(*replace) if replace[0] else CODEBOOK
    return [d.line for d in check_source("codebook.py", source, [UnregisteredModuleTensor]).diagnostics]


def test_moved_by_the_helper_it_is_passed_to_or_used_as_an_index() -> None:
    """`nearest` and `_rescale` move their parameter before reading it; CUDA tensors take CPU
    indices (`x[:, self.order]`), but a CPU table indexed by the input's ids fails (`lookup`)."""
    assert _codebook() == [22]


@pytest.mark.parametrize(
    ("replace", "line"),
    [
        (("nearest(picked, centers=self.centers)", "spread(picked, self.centers)"), 19),  # no move
        (("w = w.type_as(x)\n", "w.sum()\n        w = w.type_as(x)\n"), 20),  # read before the move
        (("x[:, self.order]", "x[:, self.order + x.argmax()]"), 21),  # computed with the input
    ],
    ids=["helper-without-move", "read-before-move", "index-with-the-input"],
)
def test_flagged_when_the_premise_holds(replace: tuple[str, str], line: int) -> None:
    assert _codebook(replace) == sorted([line, 22])
