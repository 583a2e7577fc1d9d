"""Whole modules through checkpoints in a notebook (issue 25): the code cells are one program, so a
module taken out of a checkpoint dict in one cell and used in another is TDL105, and a module built,
saved whole and reopened across cells is TDL103 at the save and TDL104 at the load."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from torchdev_lint.cli import main

CELLS = (
    "import torch\nfrom torch import nn",
    ("markdown", "## Restore the ranker"),
    "ranker = nn.Linear(3, 3)\nbundle = torch.load('bundle.pt', map_location='cpu', weights_only=False)",
    "ranker = bundle['ranker']\nranker.cuda()",
    "weights = torch.load('weights.pt', map_location='cpu')['ranker']\nranker.load_state_dict(weights)",
    "pool = nn.Sequential(nn.Linear(2, 2), nn.Tanh())",
    "torch.save(pool, 'pool.pt')",
    "pool = torch.load('pool.pt', map_location='cpu', weights_only=False)\npool.eval()",
)


def _notebook(cells: tuple[str | tuple[str, str], ...]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for count, cell in enumerate(cells, start=1):
        if isinstance(cell, tuple):
            nb.cells.append(nbformat.v4.new_markdown_cell(cell[1]))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(cell, execution_count=count))
    return nb


def _findings(capsys: pytest.CaptureFixture[str], *paths: Path) -> list[dict[str, object]]:
    argv = ["check", "--isolated", "--no-cache", "--select", "TDL103,TDL104,TDL105", "--format", "json"]
    main([*argv, *map(str, paths)])
    found: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return found


def test_checkpoint_modules_across_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "restore.ipynb"
    nbformat.write(_notebook(CELLS), str(path))
    found = _findings(capsys, path)
    # Cell 3 loads the bundle whose item cell 4 moves as a module; the state-dict item of cell 5
    # goes to `load_state_dict`: silent. Cell 7 saves the module built in cell 6, reopened in cell 8.
    assert [(d["code"], d["cell"], d["line"], d["column"]) for d in found] == [
        ("TDL105", 3, 2, 10),
        ("TDL103", 7, 1, 1),
        ("TDL104", 8, 1, 8),
    ]


def test_a_notebook_finds_what_its_script_finds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "restore.ipynb"
    nbformat.write(_notebook(CELLS), str(path))
    script = tmp_path / "restore.py"
    script.write_text("\n".join(cell for cell in CELLS if isinstance(cell, str)) + "\n")
    found = _findings(capsys, path, script)
    codes = {
        suffix: [d["code"] for d in found if str(d["path"]).endswith(suffix)] for suffix in (".ipynb", ".py")
    }
    assert codes[".ipynb"] == codes[".py"] == ["TDL105", "TDL103", "TDL104"]


def test_a_state_dict_checkpoint_in_cells_is_silent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "weights.ipynb"
    cells = (
        "import torch\nfrom torch import nn",
        "ranker = nn.Linear(3, 3)\nbundle = torch.load('bundle.pt', map_location='cpu')",
        "ranker.load_state_dict(bundle['ranker'])\nranker.cuda()",
        "torch.save({'ranker': ranker.state_dict()}, 'bundle.pt')",
    )
    nbformat.write(_notebook(cells), str(path))
    assert _findings(capsys, path) == []
