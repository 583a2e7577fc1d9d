"""What the device-flow rules (TDL302/303/306/310) add to a full check, in CPU seconds.

    .venv/bin/python benchmarks/flow_overhead.py [PATH] [--every N]

Checks every `.py` file under PATH (default: the installed torch package
source) as `torchdev-lint check --select ALL` does, twice per file and back to
back: once with every rule and once with the four flow rules left out. Both
runs happen in one process with the same code loaded, so a shared machine or
a tree that changes meanwhile affects both alike; CPU time (not wall time) is
summed per configuration. `--every N` checks every N-th file only.
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import time
from pathlib import Path

from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source
from torchdev_lint.rule import all_rules

FLOW_RULES = frozenset({"TDL302", "TDL303", "TDL306", "TDL310"})


def files_under(root: str) -> list[str]:
    found = [os.path.join(d, f) for d, _, names in os.walk(root) for f in names if f.endswith(".py")]
    return sorted(found)


def cpu_seconds(path: str, source: bytes, rules: tuple[type, ...]) -> float:
    start = time.process_time()
    try:
        check_source(path, source, rules, Settings())
    except SourceError:
        pass
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(Path(sysconfig.get_paths()["purelib"]) / "torch"))
    parser.add_argument("--every", type=int, default=1, help="check every N-th file only")
    args = parser.parse_args()
    everything = all_rules()
    without = tuple(rule for rule in everything if rule.code not in FLOW_RULES)
    paths = files_under(args.path)[:: args.every]
    totals = {"with": 0.0, "without": 0.0}
    for index, path in enumerate(paths):
        source = Path(path).read_bytes()
        order = ("with", "without") if index % 2 else ("without", "with")
        for name in order:
            totals[name] += cpu_seconds(path, source, everything if name == "with" else without)
    base, full = totals["without"], totals["with"]
    command = f"{Path(sys.executable).name} benchmarks/flow_overhead.py {args.path} --every {args.every}"
    print(f"command: {command}")
    print(
        f"files: {len(paths)}; rules: {len(everything)} (ALL) vs {len(without)} (ALL minus TDL302/303/306/310)"
    )
    print(f"without flow rules: {base:.1f} s CPU")
    print(f"with flow rules:    {full:.1f} s CPU")
    print(f"ratio: {full / base:.3f} ({(full / base - 1) * 100:+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
