"""The precision harness (`scripts/precision_sample.py`) names a notebook finding's cell, so that
findings of two cells on the same line are two sites a reader can find (session 25)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "precision_sample.py"


def _harness():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("precision_sample", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


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
    harness = _harness()
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
