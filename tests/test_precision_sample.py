"""The precision harness (`scripts/precision_sample.py`) names a notebook finding's cell, so that
findings of two cells on the same line are two sites a reader can find (session 25)."""

from __future__ import annotations

import json
from pathlib import Path

from project_scripts import load_script


def _notebook(path: Path, cells: list[tuple[str, str]]) -> None:
    path.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
                    | ({"outputs": [], "execution_count": None} if kind == "code" else {})
                    for kind, source in cells
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        ),
        encoding="utf-8",
    )


def test_notebook_findings_name_their_cells(tmp_path: Path) -> None:
    harness = load_script("precision_sample")
    root = tmp_path / "demo-1.0"
    root.mkdir()
    _notebook(
        root / "walkthrough.ipynb",
        [
            ("code", "import torch\nstate = torch.load('a.pt')\n"),
            ("markdown", "Now the other checkpoint.\n"),
            ("code", "import torch\nother = torch.load('b.pt')\n"),
        ],
    )
    project = harness.parse_project(str(root))
    loads = [f for f in harness.run_check(project, 1) if f.code == "TDL101"]
    assert [(f.path, f.line) for f in loads] == [
        ("walkthrough.ipynb:cell 1", 2),
        ("walkthrough.ipynb:cell 3", 2),
    ]
    assert [harness.source_line(root, f.path, f.line) for f in loads] == [
        "state = torch.load('a.pt')",
        "other = torch.load('b.pt')",
    ]
