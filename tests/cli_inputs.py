"""Inputs and helpers shared by the bad-input and hostile-input tests."""

from __future__ import annotations

from pathlib import Path

BAD = 'import torch\n\nstate = torch.load("model.pt")\n'
FIXED = 'import torch\n\nstate = torch.load("model.pt", map_location="cpu")\n'


def errors(err: str) -> list[str]:
    """The error lines of a run's stderr."""
    return [line for line in err.splitlines() if line.startswith("torchdev-lint: error:")]


def make_tree(directory: Path) -> Path:
    """Two files with one finding each, named to sort around whatever a test adds."""
    (directory / "a_good.py").write_text(BAD)
    (directory / "z_good.py").write_text(BAD)
    return directory
