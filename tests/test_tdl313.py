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

    class FunctionalLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.rand((5, 5))

        def forward(self, x):
            return F.linear(x, self.weight)
    """
)


def _lines(path: str) -> list[int]:
    result = check_source(path, FUNCTIONAL_LINEAR, [UnregisteredModuleTensor])
    return [d.line for d in result.diagnostics]


@pytest.mark.parametrize(
    "path", ["tests/test_models.py", "torch/testing/_internal/common_quantization.py", "pkg/models_test.py"]
)
def test_silent_in_test_code(path: str) -> None:
    assert _lines(path) == []


@pytest.mark.parametrize("path", ["pkg/layers.py", "contest/models.py", "src/testbed_models.py"])
def test_flagged_in_library_code(path: str) -> None:
    assert _lines(path) == [8]
