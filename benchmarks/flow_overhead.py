"""What the device-flow rules (TDL302/303/306/310) add to a full check, in CPU seconds.

    .venv/bin/python benchmarks/flow_overhead.py [PATH] [--repeat N]

Runs `torchdev-lint check --select ALL` over PATH (default: the installed torch
package source) in a child process, once with every rule and once with the
four flow rules ignored, and prints both child CPU times, their ratio and the
commands. CPU time rather than wall time, since the machine may be shared.
With --repeat the runs alternate and the minimum of each is kept.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

FLOW_RULES = "TDL302,TDL303,TDL306,TDL310"
CLI = [
    sys.executable,
    "-m",
    "torchdev_lint",
    "check",
    "--select",
    "ALL",
    "--no-cache",
    "--no-respect-gitignore",
]
CLI += ["--format", "concise", "-q"]


def cpu_seconds(command: list[str]) -> float:
    """User + system CPU time the command's process (and its children) used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(sysconfig.get_paths()["purelib"]) / "torch"
    parser.add_argument("path", nargs="?", default=str(default))
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with_flow = [*CLI, args.path]
    without_flow = [*CLI, "--ignore", FLOW_RULES, args.path]
    timings: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(args.repeat):
        timings["without"].append(cpu_seconds(without_flow))
        timings["with"].append(cpu_seconds(with_flow))
    base, full = min(timings["without"]), min(timings["with"])
    print(f"without flow rules: {base:.1f} s CPU   {shlex.join(without_flow)}")
    print(f"with flow rules:    {full:.1f} s CPU   {shlex.join(with_flow)}")
    print(f"ratio: {full / base:.3f} (+{(full / base - 1) * 100:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
