"""-j/--jobs: the same output in the same order whatever the number of processes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchdev_lint.cli import fix_main, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """The fixtures plus broken and clean files: enough files for four workers."""
    folder = tmp_path / "corpus"
    shutil.copytree(ROOT / "fixtures", folder)
    (folder / "broken.py").write_text("import torch\ntorch.load(\n")
    for index in range(8):
        (folder / f"clean_{index}.py").write_text(f"x = {index}\n")
    return folder


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_same_output_with_one_and_four_jobs(
    corpus: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    argv = ["check", "--isolated", "--no-cache", "--select", "ALL", "--format", fmt, str(corpus)]
    one = _run(capsys, *argv, "-j1")
    four = _run(capsys, *argv, "-j4")
    assert one == four
    assert one[0] == 2 and "broken.py" in one[2] and one[1].count("TDL") > 10


def test_same_output_with_cache_and_jobs(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--isolated", "--select", "ALL", "--cache-dir", str(tmp_path / "c"), str(corpus)]
    cold = _run(capsys, *argv, "-j1")
    (corpus / "tdl201_per_item_transfer.py").write_text("x = 1\n")  # one changed file
    assert _run(capsys, *argv, "-j4") != cold
    assert _run(capsys, *argv, "-j4") == _run(capsys, *argv, "-j1")


def test_fix_with_jobs_equals_fix_without(tmp_path: Path, corpus: Path) -> None:
    serial = tmp_path / "serial"
    shutil.copytree(corpus, serial)
    assert fix_main(["--isolated", "--no-cache", "--unsafe-fixes", "-j1", str(serial)]) in (1, 2)
    assert fix_main(["--isolated", "--no-cache", "--unsafe-fixes", "-j4", str(corpus)]) in (1, 2)
    for path in sorted(serial.iterdir()):
        assert (corpus / path.name).read_text() == path.read_text(), path.name


def test_bad_jobs_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", "-j0", "."])
    assert exc.value.code == 2


def test_spawned_workers_work_and_never_import_torch(corpus: Path) -> None:
    """The worker entry point is spawn-safe, and a worker holds no torch."""
    script = f"""
import concurrent.futures, multiprocessing, sys
from torchdev_lint.config import select_rules
from torchdev_lint.parallel import _check_chunk
from torchdev_lint.runner import Options

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    options = Options(rules=tuple(select_rules(["ALL"])))
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        reports = pool.submit(_check_chunk, [{str(corpus / "tdl201_per_item_transfer.py")!r}], options).result()
        loaded = pool.submit(eval, "'torch' in __import__('sys').modules").result()
    print(sorted({{d.code for d in reports[0].diagnostics}}), loaded, "torch" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=corpus)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['TDL201'] False False"
