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
