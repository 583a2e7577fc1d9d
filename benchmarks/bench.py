"""Speed of torchdev-lint against LibCST's parse floor, `ast` and TorchFix, as ratios.

    .venv/bin/python benchmarks/bench.py [--corpus torch subset project] [--only NAME ...]
                                         [--no-torchfix] [--jobs N]

Every measurement runs its command under a fresh wrapper process, which reports
the command's CPU seconds (user + sys of all its processes, from
`getrusage(RUSAGE_CHILDREN)`), wall seconds and peak RSS (the largest single
process). Corpora (file lists from torchdev-lint's own discovery, so every tool
gets the same files):

- torch:   the installed torch package source, whole (our figures only: TorchFix
           needs about an hour of CPU on it);
- subset:  torch/nn, torch/optim, torch/utils/data (the TorchFix comparison);
- project: this repository's fixtures/ and tests/.

Measurements: `python` (`python -c pass`, the floor of any command), `rules` and `rule`
(`torchdev-lint rules`, `rule TDL101`), once before the corpora; `ast` and `libcst` (bare
`ast.parse` / `libcst.parse_module` in a child Python, over the files that `check --select
ALL` parses, i.e. those its trigger filter keeps); `cold-j1`, `cold` (`--no-cache`, `-j1`
and default jobs); `fill` (default jobs into an empty cache, on a copy of the corpus),
`warm-j1`, `warm` (nothing changed) and `one-changed` (one file edited; the number of new
cache entries says how many files were re-checked); `flake8` (`flake8 --select TDL`);
`torchfix` (`torchfix --select ALL -j1`) and `torchfix-flake8` (`flake8 --select TOR`) from
TorchFix 0.7.0 in `benchmarks/.torchfix-venv`, created on first use (it pins libcst<1.6,
hence its own venv; skipped with a message if it cannot be installed). flake8 runs with
`-j1`. The runs of a few hundredths of a second (`python`, `rules`, `rule`, `warm-j1`,
`warm`) are repeated 7 times and the run of median CPU is reported. Every tool runs from
compiled bytecode (kept in a temporary PYTHONPYCACHEPREFIX, after one unmeasured run). The
machine may be shared: the load average is printed, the ratios matter more than the
seconds, and for -jN the CPU of the -jN run / N / CPU of -j1 says what the wall ratio would
be with the cores to ourselves. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TORCHFIX_VENV = ROOT / "benchmarks" / ".torchfix-venv"
JOBS = 1  # the default-jobs runs' number of processes, set by main
MEASUREMENTS = (
    "python",
    "rules",
    "rule",
    "ast",
    "libcst",
    "cold-j1",
    "cold",
    "fill",
    "warm-j1",
    "warm",
    "one-changed",
    "flake8",
    "torchfix",
    "torchfix-flake8",
)

WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"cpu": usage.ru_utime + usage.ru_stime, "wall": wall, "rss_mb": usage.ru_maxrss / 1024}))
"""

PARSER = """
import sys
paths = open(sys.argv[2], encoding="utf-8").read().splitlines()
if sys.argv[1] == "ast":
    import ast
    for path in paths:
        with open(path, "rb") as handle:
            ast.parse(handle.read())
else:
    import libcst
    for path in paths:
        with open(path, "rb") as handle:
            libcst.parse_module(handle.read())
"""


@dataclass
class Result:
    name: str
    cpu: float
    wall: float
    rss_mb: float
    note: str = ""


# Every tool runs from compiled bytecode, as after an ordinary install, even where the
# environment sets PYTHONDONTWRITEBYTECODE: compiled files go to a folder of their own.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "torchdev-bench-pycache")


def measure(
    name: str, command: Sequence[str], cwd: Path | None = None, note: str = "", repeat: int = 1
) -> Result:
    """One run of `command`, or with `repeat`, the run of median CPU time among that many
    (for runs of a few hundredths of a second, which one busy moment can double)."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [PY, "-c", WRAPPER, *command], capture_output=True, text=True, check=True, cwd=cwd, env=ENV
        ).stdout
        data = json.loads(out)
        runs.append(Result(name, data["cpu"], data["wall"], data["rss_mb"], note))
    result = sorted(runs, key=lambda run: run.cpu)[len(runs) // 2]
    if repeat > 1:
        note = f"{note} median of {repeat}".strip()
        result.note = note
    digits = 3 if repeat > 1 else 2
    print(
        f"  {name:<16} cpu {result.cpu:8.{digits}f} s  wall {result.wall:8.{digits}f} s  "
        f"peak {result.rss_mb:7.0f} MB  {note}"
    )
    sys.stdout.flush()
    return result


def warm_up(torchfix: bool) -> None:
    """Run every tool once on one file, unmeasured, so that its bytecode is compiled."""
    sample = str(ROOT / "fixtures" / "tdl201_per_item_transfer.py")
    commands = [
        [PY, "-m", "torchdev_lint", "check", "--no-cache", "--isolated", sample],
        [PY, "-m", "flake8", "--isolated", "-j1", "--select", "TDL", sample],
    ]
    venv = torchfix_venv() if torchfix else None
    if venv is not None:
        commands += [[str(venv / "torchfix"), sample], [str(venv / "flake8"), "--select", "TOR", sample]]
    for command in commands:
        subprocess.run(command, env=ENV, capture_output=True, check=False)


def corpus_files(name: str) -> list[str]:
    from torchdev_lint.files import discover

    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    assert spec is not None and spec.origin is not None, "torch is not installed"
    torch = Path(spec.origin).parent
    folders = {
        "torch": [torch],
        "subset": [torch / "nn", torch / "optim", torch / "utils" / "data"],
        "project": [ROOT / "fixtures", ROOT / "tests"],
    }[name]
    files, _ = discover([str(f) for f in folders], respect_gitignore=False)
    return files


def torchfix_venv() -> Path | None:
    """TorchFix 0.7.0 and flake8 in their own venv; None (with a message) when that fails."""
    tool = TORCHFIX_VENV / "bin" / "torchfix"
    if not tool.exists():
        print(f"creating {TORCHFIX_VENV.relative_to(ROOT)} with torchfix==0.7.0 ...", flush=True)
        try:
            subprocess.run([PY, "-m", "venv", str(TORCHFIX_VENV)], check=True)
            (TORCHFIX_VENV / ".gitignore").write_text("*\n")
            pip = [str(TORCHFIX_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
            subprocess.run([*pip, "torchfix==0.7.0", "flake8"], check=True)
        except (OSError, subprocess.CalledProcessError) as error:
            print(f"TorchFix skipped: cannot install torchfix==0.7.0 ({error})")
            return None
    return TORCHFIX_VENV / "bin"


# Runs of the small measurements (startup, warm): the one of median CPU is reported.
REPEAT = 7


def run_startup(only: set[str]) -> dict[str, Result]:
    """Costs that do not depend on a corpus: starting Python, and the commands that only read."""
    print("\n## startup")
    commands = {
        "python": [PY, "-c", "pass"],
        "rules": [PY, "-m", "torchdev_lint", "rules"],
        "rule": [PY, "-m", "torchdev_lint", "rule", "TDL101"],
    }
    results = {
        name: measure(name, command, repeat=REPEAT)
        for name, command in commands.items()
        if not only or name in only or name == "python"
    }
    for name in ("rules", "rule"):
        if name in results:
            value = results[name].cpu / results["python"].cpu
            print(f"  {name + ' CPU / python -c pass CPU':<44} {value:6.2f}  (target <= 3)")
    return results


def run_corpus(
    name: str, only: set[str], jobs: int | None, torchfix: bool, startup: dict[str, Result]
) -> dict[str, Result]:
    from torchdev_lint.config import select_rules
    from torchdev_lint.engine import could_match

    files = corpus_files(name)
    rules = select_rules(["ALL"])
    parsed, lines = [], 0
    for path in files:
        data = Path(path).read_bytes()
        lines += data.count(b"\n")
        if could_match(data, rules):
            parsed.append(path)
    print(f"\n## {name}: {len(files)} files, {lines} lines; the trigger filter keeps {len(parsed)} files")
    results: dict[str, Result] = {}
    work = Path(tempfile.mkdtemp(prefix="torchdev-bench-"))
    try:
        parse_list = work / "parsed.txt"
        parse_list.write_text("\n".join(parsed))
        cli = [PY, "-m", "torchdev_lint", "check", "--select", "ALL", "--no-respect-gitignore", "--isolated"]
        cli += ["--format", "concise", "-q"]
        default_jobs = [] if jobs is None else [f"-j{jobs}"]

        def want(key: str) -> bool:
            return not only or key in only

        for kind in ("ast", "libcst"):
            if want(kind):
                results[kind] = measure(kind, [PY, "-c", PARSER, kind, str(parse_list)])
        if want("cold-j1"):
            results["cold-j1"] = measure("cold-j1", [*cli, "--no-cache", "-j1", *files])
        if want("cold"):
            results["cold"] = measure("cold", [*cli, "--no-cache", *default_jobs, *files])
        if {"fill", "warm-j1", "warm", "one-changed"} & (only or set(MEASUREMENTS)):
            # On a copy, so that one file can be changed.
            copy = work / "copy"
            common = os.path.commonpath(files)
            copied = {}
            for path in files:
                target = copy / os.path.relpath(path, common)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                copied[path] = str(target)
            cache = work / "cache"
            cached = [*cli, "--cache-dir", str(cache)]
            results["fill"] = measure("fill", [*cached, *default_jobs, *copied.values()], note="empty cache")
            results["warm-j1"] = measure("warm-j1", [*cached, "-j1", *copied.values()], repeat=REPEAT)
            results["warm"] = measure("warm", [*cached, *default_jobs, *copied.values()], repeat=REPEAT)
            before = len(list(cache.rglob("*.json")))
            changed = Path(copied[parsed[len(parsed) // 2]])
            changed.write_text(changed.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
            one = measure("one-changed", [*cached, *default_jobs, *copied.values()])
            rechecked = len(list(cache.rglob("*.json"))) - before
            one.note = f"re-checked {rechecked} file(s)"
            print(f"  {'':<16} {one.note}")
            results["one-changed"] = one
        if want("flake8"):
            flake8 = [PY, "-m", "flake8", "--isolated", "-j1", "--select", "TDL", *files]
            results["flake8"] = measure("flake8", flake8)
        venv = torchfix_venv() if torchfix and (want("torchfix") or want("torchfix-flake8")) else None
        if venv is not None and want("torchfix"):
            results["torchfix"] = measure(
                "torchfix", [str(venv / "torchfix"), "--select", "ALL", "-j1", *files]
            )
        if venv is not None and want("torchfix-flake8"):
            command = [str(venv / "flake8"), "--isolated", "-j1", "--select", "TOR", *files]
            results["torchfix-flake8"] = measure("torchfix-flake8", command)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios({**startup, **results})
    return results


def ratios(results: dict[str, Result]) -> None:
    def ratio(label: str, a: str, b: str, attr: str = "cpu", target: str = "") -> None:
        if a in results and b in results and getattr(results[b], attr) > 0:
            value = getattr(results[a], attr) / getattr(results[b], attr)
            print(f"  {label:<44} {value:6.2f}  {target}")

    print("  ratios:")
    ratio("cold-j1 CPU / torchfix CPU", "cold-j1", "torchfix", target="(target <= 0.25)")
    ratio("cold-j1 CPU / libcst parse CPU", "cold-j1", "libcst", target="(target <= 2)")
    ratio("libcst parse CPU / ast parse CPU", "libcst", "ast")
    ratio("cold-j1 CPU / warm-j1 CPU", "cold-j1", "warm-j1", target="(target >= 20)")
    ratio("warm-j1 CPU / python -c pass CPU", "warm-j1", "python", target="(target <= 3)")
    ratio("cold wall / warm wall (default jobs)", "cold", "warm", attr="wall")
    ratio("flake8 TDL CPU / torchfix flake8 TOR CPU", "flake8", "torchfix-flake8", target="(target <= 0.5)")
    ratio("cold (default jobs) wall / cold-j1 wall", "cold", "cold-j1", attr="wall", target="(target <= 0.6)")
    ratio("cold (default jobs) CPU / cold-j1 CPU", "cold", "cold-j1")
    if "cold" in results and "cold-j1" in results and JOBS > 1:
        # What the wall ratio would be with the cores to ourselves and balanced workers.
        ideal = results["cold"].cpu / JOBS / results["cold-j1"].cpu
        print(f"  {'  same, / jobs: wall ratio on an idle machine':<44} {ideal:6.2f}")
    ratio("fill CPU / cold CPU (cost of writing the cache)", "fill", "cold")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", choices=("torch", "subset", "project"), default=None)
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, default=[])
    parser.add_argument("--no-torchfix", action="store_true", help="skip the TorchFix measurements")
    parser.add_argument("--jobs", type=int, default=None, help="jobs for the default-jobs runs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from torchdev_lint import __version__
    from torchdev_lint.parallel import default_jobs

    global JOBS
    JOBS = args.jobs or default_jobs()
    corpora = args.corpus or ["torch", "subset", "project"]
    print(f"torchdev-lint {__version__}; Python {sys.version.split()[0]}; {os.cpu_count()} CPUs visible,")
    print(f"default jobs {args.jobs or default_jobs()}; load average {os.getloadavg()[0]:.2f} (1 min)")
    print(f"command: {' '.join([Path(PY).name, 'benchmarks/bench.py', *(argv or sys.argv[1:])])}")
    started = time.perf_counter()
    warm_up(not args.no_torchfix and any(name != "torch" for name in corpora))
    startup = run_startup(set(args.only))
    for name in corpora:
        torchfix = not args.no_torchfix and name != "torch"
        run_corpus(name, set(args.only), args.jobs, torchfix, startup)
        print(f"  load average now {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
