"""Modules that build a CUDA extension as they are imported run only where CUDA is (issue 23: a test
of a compiled CUDA extension), and only those: a C++-only build proves nothing."""

from __future__ import annotations

import pytest

from torchdev_lint.config import select_rules
from torchdev_lint.engine import check_source

RULES = tuple(select_rules(["TDL301"]))

_TEST = """\
import torch
from torch.utils.cpp_extension import {builder}

ops = {builder}({arguments})

def test_kernel():
    assert ops.kernel(torch.ones(4, device="cuda")).is_cuda
"""


def _lines(builder: str, arguments: str) -> list[int]:
    result = check_source("test_kernel.py", _TEST.format(builder=builder, arguments=arguments), RULES)
    return [d.line for d in result.diagnostics if not d.suppressed]


@pytest.mark.parametrize(
    ("builder", "arguments", "flagged"),
    [
        ("load", 'name="k", sources=("k.cpp", "k_kernel.cu")', []),
        ("load", 'name="k", sources=["k.cpp"]', [7]),
        ("load_inline", 'name="k", cpp_sources=CPP, cuda_sources=CUDA', []),
        ("load_inline", 'name="k", cpp_sources=CPP', [7]),
    ],
)
def test_a_cuda_build_at_import_makes_the_module_cuda_only(
    builder: str, arguments: str, flagged: list[int]
) -> None:
    assert _lines(builder, arguments) == flagged


def test_a_build_inside_a_function_does_not_cover_the_module() -> None:
    source = _TEST.replace("ops = ", "def build():\n    return ").replace("ops.kernel", "build().kernel")
    result = check_source(
        "test_kernel.py", source.format(builder="load", arguments='sources=["k.cu"]'), RULES
    )
    assert [d.line for d in result.diagnostics] == [8]
