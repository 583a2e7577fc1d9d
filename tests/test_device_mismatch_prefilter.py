"""TDL302 runs a function's device flow only where it can find a conflict (`flow.may_mix_devices`):
where a device besides the CPU is known. Each place such a device can come from still gives the
finding; a function that names none is not analysed."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdev_lint.analysis.values import flow
from torchdev_lint.config import Settings, select_rules
from torchdev_lint.engine import FileContext, check_source

DEVICE_SOURCES = {
    "a literal": """
        import torch

        def f():
            return torch.ones(3).to("cuda") + torch.ones(3)
        """,
    "an escaped literal": r"""
        import torch

        def f():
            return torch.ones(3).to("\x63uda") + torch.ones(3)
        """,
    "cuda()": """
        import torch

        def f():
            return torch.ones(3).cuda() + torch.ones(3)
        """,
    "an ordinal": """
        import torch

        def f():
            return torch.ones(3).to(0) + torch.ones(3)
        """,
    "a module-level device": """
        import torch

        DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

        def f():
            return torch.ones(3).to(DEVICE) + torch.ones(3)
        """,
    "an enclosing function's device": """
        import torch

        def outer():
            device = torch.device("cuda")

            def f():
                return torch.ones(3).to(device) + torch.ones(3)

            return f
        """,
    "the class's initialiser": """
        import torch

        class Runner:
            def __init__(self):
                self.table = torch.ones(3).cuda()

            def run(self):
                return self.table + torch.ones(3, device="cpu")
        """,
}


def _findings(source: str) -> list[int]:
    result = check_source("example.py", textwrap.dedent(source), select_rules(["TDL302"]), Settings())
    return [d.line for d in result.diagnostics]


@pytest.mark.parametrize("source", DEVICE_SOURCES.values(), ids=DEVICE_SOURCES.keys())
def test_each_device_source_still_reported(source: str) -> None:
    assert _findings(source)


def test_a_function_naming_no_device_is_not_analysed(monkeypatch: pytest.MonkeyPatch) -> None:
    analysed: list[str] = []
    original = flow._analyse

    def recording(unit: flow.Unit, ctx: FileContext) -> flow.Flow:
        analysed.append(unit.name.value if isinstance(unit, cst.FunctionDef) else "<module>")
        return original(unit, ctx)

    monkeypatch.setattr(flow, "_analyse", recording)
    source = """
        import torch

        def passes_device_along(x, device):
            return torch.zeros(3, device=device) + x.to(device)

        def names_cuda(x):
            return x.cuda()
        """
    assert _findings(source) == []
    assert analysed == ["names_cuda"]
