"""The flake8 plugin's cost on single large files, as a ratio to a bare LibCST parse.

    .venv/bin/python benchmarks/flake8_plugin.py [--repeat N] [--profile] [FILE ...]

For each file: the CPU time of `libcst.parse_module` on its text (the floor:
the plugin cannot check a file without parsing it) and of the plugin as flake8
drives it (`TorchDevLintPlugin(tree, filename, lines).run()`, consumed whole,
default selection, flake8's own `ast` tree built beforehand and not counted),
each over `--repeat` runs in this process after one unmeasured run: the median
and the least (the run least disturbed by other processes on a shared machine).
The plugin is measured twice: without a project cache (each file on its own; an
empty cache folder, so that no cache in the current folder is read),
and with one, as after `torchdev-lint check FILE` (the summaries of the file
and of the project modules it leads to, written to a temporary cache folder
first), where the plugin also runs pass 1 from those summaries. The ratio
plugin / parse is issue 16's item 14 (target <= 1.3). `--profile` prints where
the plugin's time goes (cProfile, top functions by cumulative and by own time).
Default files: the largest file of the torch package and three 4,000-line files
from the corpus (when present). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import gc
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import libcst

from torchdev_lint.analysis.project_facts import project_facts
from torchdev_lint.engine import parse
from torchdev_lint.flake8_plugin import TorchDevLintPlugin

SITE = Path(libcst.__file__).resolve().parents[1]
CORPUS = Path("/work/corpus/src")
QWEN = CORPUS / "transformers-5.25.0/transformers/models/qwen2_5_omni"
DEFAULT_FILES = (
    SITE / "torch" / "testing" / "_internal" / "common_methods_invocations.py",  # 27,820 lines
    QWEN / "modular_qwen2_5_omni.py",  # 3,933 lines
    QWEN / "modeling_qwen2_5_omni.py",  # 4,084 lines, a finding whose fix writes a string
    CORPUS / "accelerate-1.16.0/accelerate/accelerator.py",  # 4,267 lines
)


Timing = tuple[float, float]  # CPU seconds: median, least


def _cpu(function: Callable[[], object], repeat: int) -> Timing:
    """(median, least) CPU seconds of `repeat` runs, after one unmeasured run (imports, caches).

    Each run starts from a collected heap and runs with the cyclic GC off: otherwise a collection
    of the previous run's trees (hundreds of thousands of objects) lands in whichever run
    happens to cross the threshold, and the figures swing by a factor of two.
    """
    function()
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            function()
            times.append(time.process_time() - start)
        finally:
            gc.enable()
    return statistics.median(times), min(times)


def measure(path: Path, repeat: int, profile: bool) -> tuple[int, Timing, Timing, Timing]:
    """(lines, bare parse, plugin without a cache, plugin with one): CPU seconds (median, least)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    TorchDevLintPlugin.parse_options(argparse.Namespace())

    def plugin() -> object:
        return list(TorchDevLintPlugin(tree, str(path), lines).run())

    bare = _cpu(lambda: libcst.parse_module(text), repeat)
    with tempfile.TemporaryDirectory() as empty:
        # An empty cache folder, not None: None would find the cache `check` left in the
        # current folder (the project root for a file outside any configured project).
        TorchDevLintPlugin.cache_directory = empty
        try:
            alone = _cpu(plugin, repeat)
        finally:
            TorchDevLintPlugin.cache_directory = None
    with tempfile.TemporaryDirectory() as folder:
        project_facts([str(path)], parse, folder)  # the summaries `torchdev-lint check FILE` writes
        TorchDevLintPlugin.cache_directory = folder
        try:
            cached = _cpu(plugin, repeat)
            if profile:
                profiler = cProfile.Profile()
                profiler.runcall(plugin)
                stats = pstats.Stats(profiler)
                stats.sort_stats("cumulative").print_stats(30)
                stats.sort_stats("tottime").print_stats(30)
        finally:
            TorchDevLintPlugin.cache_directory = None
    return len(lines), bare, alone, cached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    files = args.files or [path for path in DEFAULT_FILES if path.exists()]
    print(
        f"python {sys.version.split()[0]}, libcst {libcst_version()}, CPU seconds: median / least of {args.repeat}"
    )
    print(
        f"{'file':<44} {'lines':>6} {'parse':>13} {'plugin':>13} {'ratio':>11} {'cached':>13} {'ratio':>11}"
    )
    for path in files:
        count, bare, alone, cached = measure(path, args.repeat, args.profile)
        name = str(path).replace(str(SITE) + "/", "").replace(str(CORPUS) + "/", "")[-44:]
        cells = [f"{bare[0]:.3f}/{bare[1]:.3f}"]
        for median, least in (alone, cached):
            cells += [f"{median:.3f}/{least:.3f}", f"{median / bare[0]:.2f}/{least / bare[1]:.2f}"]
        print(
            f"{name:<44} {count:>6} {cells[0]:>13} {cells[1]:>13} {cells[2]:>11} {cells[3]:>13} {cells[4]:>11}"
        )
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"ratios: median / median and least / least; load average now {load} (1, 5, 15 min)")
    return 0


def libcst_version() -> str:
    from importlib.metadata import version

    return version("libcst")


if __name__ == "__main__":
    sys.exit(main())
