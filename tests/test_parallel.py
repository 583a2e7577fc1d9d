"""-j/--jobs: the same output in the same order whatever the number of processes."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchdev_lint.cli import fix_main, main
from torchdev_lint.parallel import collect_less_often, map_files

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
import concurrent.futures, functools, multiprocessing, sys
from torchdev_lint.config import select_rules
from torchdev_lint.parallel import _run_chunk
from torchdev_lint.runner import CheckOptions, process_file

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    options = CheckOptions(rules=tuple(select_rules(["ALL"])))
    check = functools.partial(process_file, options=options, use_cached=False)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        reports = pool.submit(_run_chunk, check, [{str(corpus / "tdl201_per_item_transfer.py")!r}]).result()
        loaded = pool.submit(eval, "'torch' in __import__('sys').modules").result()
    print(sorted({{d.code for d in reports[0].diagnostics}}), loaded, "torch" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=corpus)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['TDL201'] False False"


_PARENT = os.getpid()


def _dies_in_worker_on(victim: str, markers: Path, path: str) -> tuple[str, int]:
    """Work for `map_files`: records each run in `markers`; in a worker, the run of `victim` first
    waits until every other file has been run, then ends the worker process."""
    with open(markers / "runs", "a", encoding="utf-8") as log:
        log.write(path + "\n")
    if os.getpid() != _PARENT and path == victim:
        others = [p for p in os.listdir(markers.parent / "files") if p != os.path.basename(victim)]
        while not all((markers / name).exists() for name in others):
            time.sleep(0.01)
        os._exit(1)
    (markers / os.path.basename(path)).touch()
    return path, os.getpid()


@pytest.mark.skipif(sys.platform != "linux", reason="the work function is passed to forked workers")
def test_broken_pool_reruns_only_files_without_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker that dies loses only its own chunk's results: only the files whose results were not
    received run again (in this process), and stderr says how many; the others keep their worker
    results.

    The dying worker waits until every other file has been run (by the other worker, one file per
    chunk here), so all their results but possibly the last one's were sent before it dies.
    """
    files, markers = tmp_path / "files", tmp_path / "markers"
    files.mkdir()
    markers.mkdir()
    paths = []
    for index in range(8):
        (files / f"f{index}.py").write_text("x = 1\n")
        paths.append(str(files / f"f{index}.py"))
    victim = paths[3]
    work = functools.partial(_dies_in_worker_on, victim, markers)
    results = map_files(work, paths, jobs=2)
    assert [path for path, _ in results] == paths
    here = {path for path, pid in results if pid == os.getpid()}
    assert victim in here
    assert len(here) <= 2, here  # the victim, and at most the one file whose result may be in flight
    runs = (markers / "runs").read_text().splitlines()
    assert sorted(runs) == sorted(paths + sorted(here)), runs  # rerun files ran twice, the others once
    warning = capsys.readouterr().err
    assert "a worker process ended unexpectedly" in warning
    assert f"running the {len(here)} of 8 files whose results were lost in the main process" in warning


def test_collecting_less_often_still_collects_cycles() -> None:
    """The CLI's collector setting: fewer collections, but a cycle of garbage is still freed."""
    import gc
    import weakref

    saved = gc.get_threshold()
    try:
        collect_less_often()
        assert gc.isenabled() and gc.get_threshold()[0] > saved[0]
        gc.collect()  # counts start from zero: the cycle below is young when the threshold passes

        class Node:
            pass

        first, second = Node(), Node()
        first.other, second.other = second, first  # type: ignore[attr-defined]
        alive = weakref.ref(first)
        del first, second
        kept = [[] for _ in range(60_000)]  # live containers enough to pass the raised threshold
        assert alive() is None
        del kept
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
