"""The flake8 plugin's cost on single large files, as a ratio to a bare LibCST parse.

    .venv/bin/python benchmarks/flake8_plugin.py [--repeat N] [--profile] [FILE ...]

For each file: the CPU time of `libcst.parse_module` on its text (the floor:
the plugin cannot check a file without parsing it) and of the plugin as flake8
drives it (`TorchDevLintPlugin(tree, filename, lines).run()`, consumed whole,
default selection, flake8's own `ast` tree built beforehand and not counted),
each the least of `--repeat` runs in this process after one unmeasured run (the
least is the one least disturbed by other processes on a shared machine).
The ratio plugin / parse is issue 16's item 14 (target <= 1.3). `--profile`
prints where the plugin's time goes (cProfile, top functions by cumulative
time). Default files: the largest file of the torch package and two 4,000-line
files from the corpus, one with a finding and one without (when present). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path

import libcst

from torchdev_lint.flake8_plugin import TorchDevLintPlugin

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(libcst.__file__).resolve().parents[1]
DEFAULT_FILES = (
    SITE / "torch" / "testing" / "_internal" / "common_methods_invocations.py",  # 27,820 lines, 2 findings
    # 4,084 lines, 1 finding (whose fix writes a string)
    Path("/work/corpus/src/transformers-5.25.0/transformers/models/qwen2_5_omni/modeling_qwen2_5_omni.py"),
    Path("/work/corpus/src/accelerate-1.16.0/accelerate/accelerator.py"),  # 4,267 lines, no finding
)


def _cpu(function: Callable[[], object], repeat: int) -> float:
    function()  # unmeasured: imports, caches
    times = []
    for _ in range(repeat):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return min(times)


def measure(path: Path, repeat: int, profile: bool) -> tuple[int, float, float]:
    """(lines, bare parse CPU seconds, plugin CPU seconds) for one file."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    TorchDevLintPlugin.parse_options(argparse.Namespace())

    def plugin() -> object:
        return list(TorchDevLintPlugin(tree, str(path), lines).run())

    parse = _cpu(lambda: libcst.parse_module(text), repeat)
    checked = _cpu(plugin, repeat)
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(plugin)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return len(lines), parse, checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    files = args.files or [path for path in DEFAULT_FILES if path.exists()]
    print(f"python {sys.version.split()[0]}, libcst {libcst_version()}, least CPU of {args.repeat} runs")
    print(f"{'file':<60} {'lines':>6} {'parse s':>8} {'plugin s':>9} {'ratio':>6}")
    for path in files:
        count, parse, checked = measure(path, args.repeat, args.profile)
        name = str(path).replace(str(SITE) + "/", "")[-60:]
        print(f"{name:<60} {count:>6} {parse:>8.3f} {checked:>9.3f} {checked / parse:>6.2f}")
    return 0


def libcst_version() -> str:
    from importlib.metadata import version

    return version("libcst")


if __name__ == "__main__":
    sys.exit(main())
