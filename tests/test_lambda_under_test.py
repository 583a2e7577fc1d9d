"""A lambda made under a test that says CUDA exists only where the test held (tune4: d3rlpy's
`map_location`): `if "cuda" in device: return lambda s, loc: s.cuda(int(index))` follows the
requested device. A nested function under the same test may be called from anywhere: it keeps its
finding, and so does a lambda made outside any such test."""

from __future__ import annotations

import textwrap

from torchdev_lint.config import select_rules
from torchdev_lint.engine import check_source

RULES = tuple(select_rules(["TDL301"]))


def _lines(source: str) -> list[int]:
    result = check_source("restore.py", textwrap.dedent(source), RULES)
    return [d.line for d in result.diagnostics if not d.suppressed]


def test_a_lambda_made_under_a_cuda_test_follows_the_requested_device() -> None:
    source = """
        def map_location(device: str):
            if "cuda" in device:
                _, index = device.split(":")
                return lambda storage, loc: storage.cuda(int(index))
            return "cpu"
    """
    assert _lines(source) == []


def test_a_lambda_outside_the_test_keeps_its_finding() -> None:
    source = """
        def map_location(device: str):
            index = device.split(":")[-1]
            return lambda storage, loc: storage.cuda(int(index))
    """
    assert _lines(source) == [4]  # the leading newline is line 1
