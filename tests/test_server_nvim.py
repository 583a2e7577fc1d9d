"""Neovim end to end: a real editor starts `torchdev-lint server`, shows its diagnostics and applies a
quick fix (tests/data/nvim/quickfix.lua does the editor's part)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from torchdev_lint.cli import main as cli_main

pytest.importorskip("pygls", reason="the language server needs the [lsp] extra")
NVIM = shutil.which("nvim")
pytestmark = pytest.mark.skipif(
    NVIM is None, reason="nvim is not installed (apt-get install neovim; .ci/run installs it where apt works)"
)
SCRIPT = Path(__file__).parent / "data" / "nvim" / "quickfix.lua"

SOURCE = """\
import torch


def make():
    x = torch.zeros(3).cuda()
    return x
"""


def _servers_with(marker: str) -> list[int]:
    """Processes whose environment holds the marker (Linux /proc): servers this test started."""
    found = []
    needle = f"TDL_NVIM_MARKER={marker}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def test_neovim_shows_the_diagnostics_and_applies_the_quick_fix(tmp_path: Path) -> None:
    assert NVIM is not None
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    expected = tmp_path / "expected.py"
    expected.write_text(SOURCE)
    cli_main(["check", "--fix", "--no-cache", "-q", str(expected)])
    out = tmp_path / "result.json"
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "TDL_FILE": str(path),
        "TDL_OUT": str(out),
        "TDL_CODE": "TDL203",
        "TDL_SERVER": json.dumps([sys.executable, "-m", "torchdev_lint", "server"]),
        "TDL_NVIM_MARKER": marker,
        "XDG_STATE_HOME": str(tmp_path / "state"),  # Neovim's LSP log, kept out of $HOME
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    completed = subprocess.run(
        [NVIM, "--headless", "--clean", "-n", "-c", f"luafile {SCRIPT}"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=300,
    )
    assert out.exists(), completed.stderr.decode(errors="replace")
    result = json.loads(out.read_text())
    assert "error" not in result, result
    assert "TDL203" in result["codes"] and set(result["sources"]) == {"torchdev-lint"}
    assert any(title.startswith("Suppress TDL203") for title in result["titles"])
    assert "\n".join(result["lines"]) + "\n" == expected.read_text()
    assert path.read_text() == SOURCE  # the buffer changed, the file was never written
    if sys.platform == "linux":
        assert _servers_with(marker) == []  # Neovim's exit stopped the server
