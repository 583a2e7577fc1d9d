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
- project: this repository's fixtures/ and tests/;
- projects: several real projects from the corpus folder (`--projects-dir`, default
           /work/corpus/src: timm, basicsr, fairseq, ultralytics, yolov5 at the versions in
           PROJECTS), each checked whole, so that the project analysis finds its own files.

Measurements: `python` (`python -c pass`, the floor of any command), `rules` and `rule`
(`torchdev-lint rules`, `rule TDL101`), once before the corpora; `ast` and `libcst` (bare
`ast.parse` / `libcst.parse_module` in a child Python, over the files that `check --select
ALL` parses, i.e. those its trigger filter keeps); `cold-j1`, `cold` (`--no-cache`, `-j1`
and default jobs); `fill` (default jobs into an empty cache, on a copy of the corpus),
`warm-j1`, `warm` (nothing changed) and `one-changed` (one file edited; the files the CLI
checks are counted as it checks them: how many were re-checked); `flake8` (`flake8 --select TDL`);
`fill-j1` (`cold-j1` into an empty cache: what a first run with the cache costs, pass 1
included; a fresh copy of the corpus and cache each time), `alone-j1` (`cold-j1` with the project analysis off: `TORCHDEV_LINT_NO_PROJECT=1`, today's
check of each file on its own), measured in pairs with `cold-j1` (`--pairs`, alternating, the
median of each and of the pairs' ratios reported: what pass 1 costs in CPU and peak memory);
`project-edits` (on a copy of one project, EDIT_PROJECT, with a filled cache: one function body
edited so that its summary stays the same, then so that it changes, and the number of files
re-checked by a warm run after each, next to the number the project facts say must be);
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
PROJECTS_DIR = Path("/work/corpus/src")  # set by main (--projects-dir)
PAIRS = 3  # alone-j1/cold-j1 pairs, set by main (--pairs)
# The `projects` corpus: unpacked PyPI sdists of multi-module projects, checked whole.
PROJECTS = ("timm-1.0.31", "basicsr-1.4.2", "fairseq-0.12.2", "ultralytics-8.4.190", "yolov5-7.0.14")
# `project-edits`: the function edited, in a copy of this project. get_dist_info is called by
# seven other modules; made to stop without CUDA, its summary changes and so do their facts.
EDIT_PROJECT, EDIT_FILE, EDIT_FUNCTION = "basicsr-1.4.2", "basicsr/utils/dist_util.py", "get_dist_info"
MEASUREMENTS = (
    "python",
    "rules",
    "rule",
    "ast",
    "libcst",
    "alone-j1",
    "cold-j1",
    "cold",
    "fill-j1",
    "fill",
    "warm-j1",
    "warm",
    "one-changed",
    "project-edits",
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

# The CLI with every file check written to a log (argv[1]) as it happens, forked workers
# included (Linux forks them): how many files a warm run re-checked, which the cache's entries
# cannot say (a file checked before its project facts are known is cached under two keys).
COUNTED = """
import sys
import torchdev_lint.runner as runner
log = sys.argv[1]
check = runner.check_source
def counted(path, *rest, **options):
    with open(log, "a", encoding="utf-8") as out:
        out.write(path + "\\n")
    return check(path, *rest, **options)
runner.check_source = counted
from torchdev_lint.cli import main
sys.exit(main(sys.argv[2:]))
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
    name: str,
    command: Sequence[str],
    cwd: Path | None = None,
    note: str = "",
    repeat: int = 1,
    env: dict[str, str] | None = None,
) -> Result:
    """One run of `command`, or with `repeat`, the run of median CPU time among that many
    (for runs of a few hundredths of a second, which one busy moment can double)."""
    runs = [run_once(name, command, cwd, note, env) for _ in range(repeat)]
    result = sorted(runs, key=lambda run: run.cpu)[len(runs) // 2]
    if repeat > 1:
        result.note = f"{note} median of {repeat}".strip()
    show(result, 3 if repeat > 1 else 2)
    return result


def run_once(
    name: str,
    command: Sequence[str],
    cwd: Path | None = None,
    note: str = "",
    env: dict[str, str] | None = None,
) -> Result:
    out = subprocess.run(
        [PY, "-c", WRAPPER, *command], capture_output=True, text=True, check=True, cwd=cwd, env=env or ENV
    ).stdout
    data = json.loads(out)
    return Result(name, data["cpu"], data["wall"], data["rss_mb"], note)


def show(result: Result, digits: int = 2) -> None:
    print(
        f"  {result.name:<16} cpu {result.cpu:8.{digits}f} s  wall {result.wall:8.{digits}f} s  "
        f"peak {result.rss_mb:7.0f} MB  {result.note}"
    )
    sys.stdout.flush()


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def measure_pairs(command: Sequence[str], pairs: int) -> tuple[Result, Result]:
    """`alone-j1` (project analysis off) and `cold-j1` (on), run alternately `pairs` times, so
    that a change in the machine's load falls on both: the run of median CPU of each, and
    the medians of the pairs' CPU and peak-memory ratios."""
    alone_env = {**ENV, "TORCHDEV_LINT_NO_PROJECT": "1"}
    runs = [
        (run_once("alone-j1", command, env=alone_env), run_once("cold-j1", command)) for _ in range(pairs)
    ]
    note = f"median of {pairs}" if pairs > 1 else ""
    alone = sorted((a for a, _ in runs), key=lambda run: run.cpu)[len(runs) // 2]
    cold = sorted((c for _, c in runs), key=lambda run: run.cpu)[len(runs) // 2]
    alone.note, cold.note = f"project analysis off {note}".strip(), f"project analysis on {note}".strip()
    show(alone)
    show(cold)
    cpu = [c.cpu / a.cpu for a, c in runs]
    peak = [c.rss_mb / a.rss_mb for a, c in runs]
    listed = ", ".join(f"{value:.2f}" for value in cpu)
    print(
        f"  {'project analysis: cold-j1 CPU / alone-j1 CPU':<44} {median(cpu):6.2f}  (target <= 1.25; pairs {listed})"
    )
    listed = ", ".join(f"{value:.2f}" for value in peak)
    print(
        f"  {'project analysis: cold-j1 peak / alone-j1 peak':<44} {median(peak):6.2f}  (target <= 1.25; pairs {listed})"
    )
    return alone, cold


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
        "projects": [PROJECTS_DIR / project for project in PROJECTS],
    }[name]
    missing = [str(folder) for folder in folders if not folder.is_dir()]
    assert not missing, f"missing corpus folders: {', '.join(missing)}"
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
        if want("alone-j1"):
            pairs = measure_pairs([*cli, "--no-cache", "-j1", *files], PAIRS)
            results["alone-j1"], results["cold-j1"] = pairs
        elif want("cold-j1"):
            results["cold-j1"] = measure("cold-j1", [*cli, "--no-cache", "-j1", *files])
        if want("cold"):
            results["cold"] = measure("cold", [*cli, "--no-cache", *default_jobs, *files])
        if {"fill-j1", "fill", "warm-j1", "warm", "one-changed"} & (only or set(MEASUREMENTS)):
            # On a copy, so that one file can be changed.
            copy = work / "copy"
            common = os.path.commonpath(files)
            copied = {}
            for path in files:
                target = copy / os.path.relpath(path, common)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                copied[path] = str(target)
            if want("fill-j1"):
                fresh = [*cli, "--cache-dir", str(work / "cache-j1"), "-j1", *copied.values()]
                results["fill-j1"] = measure("fill-j1", fresh, note="empty cache")
            cache = work / "cache"
            cached = [*cli, "--cache-dir", str(cache)]
            results["fill"] = measure("fill", [*cached, *default_jobs, *copied.values()], note="empty cache")
            results["warm-j1"] = measure("warm-j1", [*cached, "-j1", *copied.values()], repeat=REPEAT)
            results["warm"] = measure("warm", [*cached, *default_jobs, *copied.values()], repeat=REPEAT)
            changed = Path(copied[parsed[len(parsed) // 2]])
            changed.write_text(changed.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
            log = work / "checked.log"
            one = measure("one-changed", counted([*cached, *default_jobs, *copied.values()], log))
            one.note = f"re-checked {checks(log)} file(s)"
            print(f"  {'':<16} {one.note}")
            results["one-changed"] = one
        if name == "projects" and want("project-edits"):
            results.update(run_project_edits(work, cli, default_jobs))
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


def counted(command: Sequence[str], log: Path) -> list[str]:
    """`command` (the CLI) run so that each file it checks is written to `log`."""
    assert list(command[:3]) == [PY, "-m", "torchdev_lint"], command
    log.unlink(missing_ok=True)
    return [PY, "-c", COUNTED, str(log), *command[3:]]


def checks(log: Path) -> int:
    """How many file checks the last `counted` run made."""
    return len(log.read_text(encoding="utf-8").splitlines()) if log.exists() else 0


def run_project_edits(work: Path, cli: list[str], default_jobs: list[str]) -> dict[str, Result]:
    """Warm runs after editing one function of a project (a copy, with a filled cache): its
    body without changing its summary, then so that its summary changes. Each prints the
    files re-checked (counted as the CLI checks them) next to those whose inputs changed: the edited
    file, plus the files whose project facts differ (computed here with project_facts)."""
    from torchdev_lint.analysis.project.project_facts import project_facts
    from torchdev_lint.analysis.project.summaries import digest, summarize
    from torchdev_lint.engine import parse
    from torchdev_lint.files import discover

    source = PROJECTS_DIR / EDIT_PROJECT
    copy = work / "edits" / EDIT_PROJECT
    shutil.copytree(source, copy, symlinks=True)
    files, _ = discover([str(copy)], respect_gitignore=False)
    cache = work / "edits-cache"
    command = [*cli, "--cache-dir", str(cache), *default_jobs, *files]
    print(f"  project-edits on a copy of {EDIT_PROJECT} ({len(files)} files), {EDIT_FILE}:{EDIT_FUNCTION}")
    results = {"edits-fill": measure("edits-fill", command, note="empty cache")}
    edited = copy / EDIT_FILE
    original = edited.read_text(encoding="utf-8")
    signature = f"def {EDIT_FUNCTION}("
    assert signature in original, f"{EDIT_FILE} has no {signature}"
    head, _, rest = original.partition(signature)
    first_line_end = rest.index("\n") + 1
    edits = {
        # A statement that calls nothing of the project and binds nothing the function returns
        # (a binding of `rank` would change the `returns` field): the summary stays the same.
        "body-edit": "    timeout = 30\n",
        # A gate: the function now stops without CUDA, and so does every caller after calling it.
        "summary-edit": '    if not torch.cuda.is_available():\n        raise RuntimeError("needs a GPU")\n',
    }

    def state() -> tuple[str, dict[str, str]]:
        text = edited.read_bytes()
        facts = project_facts(files, parse)
        return digest(summarize(parse(str(edited), text), str(edited))), {p: facts.digest(p) for p in files}

    before_summary, before_facts = state()
    for name, statement in edits.items():
        edited.write_text(
            head + signature + rest[:first_line_end] + statement + rest[first_line_end:], encoding="utf-8"
        )
        summary, facts = state()
        expected = {str(edited)} | {path for path in files if facts[path] != before_facts[path]}
        log = work / "checked.log"
        result = measure(name, counted(command, log))
        rechecked = checks(log)
        names = ", ".join(sorted(os.path.relpath(path, copy) for path in expected))
        result.note = (
            f"summary {'unchanged' if summary == before_summary else 'changed'}; re-checked "
            f"{rechecked} file(s), inputs changed in {len(expected)}: {names}"
        )
        print(f"  {'':<16} {result.note}")
        results[name] = result
        edited.write_text(original, encoding="utf-8")
        measure(f"{name}-undone", counted(command, log), note="back to the filled state")
        print(f"  {'':<16} re-checked {checks(log)} file(s) (expected 0: all cached)")
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
    ratio("fill-j1 CPU / cold-j1 CPU (same, serial)", "fill-j1", "cold-j1")


def main(argv: Sequence[str] | None = None) -> int:
    global JOBS, PAIRS, PROJECTS_DIR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", nargs="+", choices=("torch", "subset", "project", "projects"), default=None
    )
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, default=[])
    parser.add_argument("--no-torchfix", action="store_true", help="skip the TorchFix measurements")
    parser.add_argument("--jobs", type=int, default=None, help="jobs for the default-jobs runs")
    parser.add_argument("--pairs", type=int, default=3, help="alone-j1/cold-j1 pairs (default 3)")
    parser.add_argument("--projects-dir", type=Path, default=PROJECTS_DIR, help="where PROJECTS are")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from torchdev_lint import __version__
    from torchdev_lint.parallel import default_jobs

    JOBS = args.jobs or default_jobs()
    PAIRS, PROJECTS_DIR = args.pairs, args.projects_dir
    corpora = args.corpus or ["torch", "subset", "project"]
    print(f"torchdev-lint {__version__}; Python {sys.version.split()[0]}; {os.cpu_count()} CPUs visible,")
    print(f"default jobs {args.jobs or default_jobs()}; load average {os.getloadavg()[0]:.2f} (1 min)")
    print(f"command: {' '.join([Path(PY).name, 'benchmarks/bench.py', *(argv or sys.argv[1:])])}")
    started = time.perf_counter()
    warm_up(not args.no_torchfix and any(name not in ("torch", "projects") for name in corpora))
    startup = run_startup(set(args.only))
    for name in corpora:
        torchfix = not args.no_torchfix and name not in ("torch", "projects")
        run_corpus(name, set(args.only), args.jobs, torchfix, startup)
        print(f"  load average now {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
