"""No data loss when the fixer is killed, and two fixers at once agree.

`torchdev-fix` runs as a subprocess over a tree of files with findings and
is SIGKILLed as soon as it has written part of the tree: every file must then hold its old or
its new content, never a mix, and a later run must finish the job and leave no
temporary file behind. Two fixers started together over one tree must leave
every file valid and fully fixed.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BAD = 'import torch\n\n# {i}\nstate = torch.load("model_{i}.pt")\nother = torch.load(\n    "x.pt",\n)\n'
FIXED = (
    'import torch\n\n# {i}\nstate = torch.load("model_{i}.pt", map_location="cpu")\n'
    'other = torch.load(\n    "x.pt",\n    map_location="cpu",\n)\n'
)
FIX = [sys.executable, "-c", "from torchdev_lint.cli import fix_entry; fix_entry()"]
FILES = 300

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and flock")


def make_tree(root: Path) -> dict[Path, int]:
    files = {}
    for i in range(FILES):
        path = root / f"pkg{i % 10}" / f"m{i}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(BAD.format(i=i))
        files[path] = i
    return files


def fixer(root: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*FIX, "--no-cache", "--select", "TDL101", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tdl-tmp")]


def _processes_on(root: Path) -> list[int]:
    """Processes whose command line names `root` (a fixer and its forked workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(root).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _no_process_left(root: Path) -> bool:
    """Bounded wait for the kernel to end and reap a killed fixer's workers (Linux: /proc)."""
    if not Path("/proc/self/cmdline").exists():
        return True
    for _ in range(300):
        if not _processes_on(root):
            return True
        time.sleep(0.1)
    return False


def _fixed_count(files: dict[Path, int]) -> int:
    return sum(path.read_text() == FIXED.format(i=i) for path, i in files.items())


def test_sigkill_never_leaves_a_partial_file(tmp_path: Path) -> None:
    """Kills land at observed states, not after timed delays: deterministic on a loaded machine.

    Each round waits until the fixer has written more files than were fixed
    when it started (or until it exits), then kills it. A kill that found the
    job already done does not count as landing midway; rounds repeat until
    five kills have landed midway.
    """
    files = make_tree(tmp_path)
    rng = random.Random(7)
    killed_midway = 0
    for _ in range(40):
        before = _fixed_count(files)
        process = fixer(tmp_path)
        while process.poll() is None and _fixed_count(files) <= before:
            pass
        process.send_signal(signal.SIGKILL)
        process.wait()
        contents = {path: path.read_text() for path in files}
        for path, i in files.items():
            assert contents[path] in (BAD.format(i=i), FIXED.format(i=i)), path
        if any(c == BAD.format(i=files[p]) for p, c in contents.items()):
            killed_midway += 1
            if killed_midway == 5:
                break
        for path in files:  # undo half of the work so later kills also land mid-write
            if rng.random() < 0.5:
                path.write_text(BAD.format(i=files[path]))
    assert killed_midway == 5, "the kills did not land while the fixer was working"
    assert _no_process_left(tmp_path), "worker processes of a killed fixer are still running"
    final = fixer(tmp_path)
    assert final.wait() == 0, final.stderr.read() if final.stderr else ""
    assert all(path.read_text() == FIXED.format(i=i) for path, i in files.items())
    assert temp_files(tmp_path) == []


def test_stale_temp_file_is_removed_but_a_live_one_is_kept(tmp_path: Path) -> None:
    """A temporary file whose writer died is removed; one whose writer holds its lock is not."""
    import fcntl

    from torchdev_lint.files import remove_stale_temp_files

    source = tmp_path / "m.py"
    source.write_text(BAD.format(i=0))
    stale = tmp_path / ".m.py.abc123.tdl-tmp"
    stale.write_text("partial")
    live = tmp_path / ".m.py.def456.tdl-tmp"
    live.write_text("in progress")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl,os,sys; fd=os.open({str(live)!r}, os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        remove_stale_temp_files([str(source)])
        assert not stale.exists() and live.exists()
        assert fcntl is not None
    finally:
        holder.kill()
        holder.wait()
    remove_stale_temp_files([str(source)])
    assert not live.exists() and source.exists()


def test_two_fixers_at_once(tmp_path: Path) -> None:
    files = make_tree(tmp_path)
    first, second = fixer(tmp_path), fixer(tmp_path)
    codes = first.wait(), second.wait()
    assert set(codes) <= {0}, [p.stderr.read() if p.stderr else "" for p in (first, second)]
    for path, i in files.items():
        assert path.read_text() == FIXED.format(i=i), path
        compile(path.read_text(), str(path), "exec")
    assert temp_files(tmp_path) == []
