"""The flake8 plugin's cost on single large files, as a ratio to a bare LibCST parse.

    .venv/bin/python benchmarks/flake8_plugin.py [--repeat N] [--profile] [FILE ...]

For each file: the CPU time of `libcst.parse_module` on its text (the floor:
the plugin cannot check a file without parsing it) and of the plugin as flake8
drives it (`TorchDevLintPlugin(tree, filename, lines).run()`, consumed whole,
default selection, flake8's own `ast` tree built beforehand and not counted),
each over `--repeat` rounds in this process after one unmeasured round: the
median and the least (the run least disturbed by other processes on a shared
machine). Each run starts from a collected heap with the GC off; a round runs
the parse and the plugin's two variants in turn, and the ratio column is the
median of the rounds' own ratios (then least over least), which load that
changes between rounds moves less than a ratio of medians.
The plugin is measured twice: without a project cache (each file on its own; an
empty cache folder, so that no cache in the current folder is read),
and with one, as after `torchdev-lint check FILE` (the summaries of the file
and of the project modules it leads to, written to a temporary cache folder
first): "first" is the first flake8 run after that check, where the plugin runs
pass 1 from those summaries (the facts it keeps removed before each run),
"cached" the runs after it, which find the facts kept (`analysis/project/facts_memo.py`). The ratio
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
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import libcst

from torchdev_lint.analysis.project import facts_memo
from torchdev_lint.analysis.project.project_facts import project_facts
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


def _seconds(function: Callable[[], object]) -> float:
    """CPU seconds of one run, from a collected heap with the cyclic GC off: otherwise a collection
    of earlier runs' trees (hundreds of thousands of objects) lands in whichever run crosses the
    threshold."""
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        function()
        return time.process_time() - start
    finally:
        gc.enable()


class Measured(NamedTuple):
    lines: int
    parse: Timing
    plugin: Timing
    first: Timing
    cached: Timing
    plugin_ratio: Timing  # median of the runs' own ratios to the parse, least / least
    first_ratio: Timing
    cached_ratio: Timing


def measure(path: Path, repeat: int, profile: bool) -> Measured:
    """The bare parse, the plugin without a cache and with one, run in turn `repeat` times (after
    one unmeasured round): each round's three runs see about the same load, so the median of the
    rounds' ratios moves less than a ratio of medians on a shared machine."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    TorchDevLintPlugin.parse_options(argparse.Namespace())

    def plugin() -> object:
        return list(TorchDevLintPlugin(tree, str(path), lines).run())

    def parse_only() -> object:
        return libcst.parse_module(text)

    runs: dict[str, list[float]] = {"parse": [], "plugin": [], "first": [], "cached": []}
    # An empty cache folder, not None, for the plugin alone: None would find the cache `check`
    # left in the current folder (the project root for a file outside any configured project).
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as folder:
        project_facts([str(path)], parse, folder)  # the summaries `torchdev-lint check FILE` writes
        try:
            for round_number in range(repeat + 1):
                parse_seconds = _seconds(parse_only)
                TorchDevLintPlugin.cache_directory = empty
                plugin_seconds = _seconds(plugin)
                TorchDevLintPlugin.cache_directory = folder
                shutil.rmtree(os.path.join(folder, facts_memo.FOLDER), ignore_errors=True)
                first_seconds = _seconds(plugin)
                cached_seconds = _seconds(plugin)
                if round_number:
                    runs["parse"].append(parse_seconds)
                    runs["plugin"].append(plugin_seconds)
                    runs["first"].append(first_seconds)
                    runs["cached"].append(cached_seconds)
            if profile:
                profiler = cProfile.Profile()
                profiler.runcall(plugin)
                stats = pstats.Stats(profiler)
                stats.sort_stats("cumulative").print_stats(30)
                stats.sort_stats("tottime").print_stats(30)
        finally:
            TorchDevLintPlugin.cache_directory = None

    def timing(name: str) -> Timing:
        return statistics.median(runs[name]), min(runs[name])

    def ratio(name: str) -> Timing:
        ratios = [seconds / bare for seconds, bare in zip(runs[name], runs["parse"], strict=True)]
        return statistics.median(ratios), min(runs[name]) / min(runs["parse"])

    return Measured(
        len(lines),
        timing("parse"),
        timing("plugin"),
        timing("first"),
        timing("cached"),
        ratio("plugin"),
        ratio("first"),
        ratio("cached"),
    )


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
        f"{'file':<44} {'lines':>6} {'parse':>13} {'plugin':>13} {'ratio':>11} {'first':>13} {'ratio':>11}"
        f" {'cached':>13} {'ratio':>11}"
    )
    for path in files:
        found = measure(path, args.repeat, args.profile)
        name = str(path).replace(str(SITE) + "/", "").replace(str(CORPUS) + "/", "")[-44:]
        cells = [
            f"{found.parse[0]:.3f}/{found.parse[1]:.3f}",
            f"{found.plugin[0]:.3f}/{found.plugin[1]:.3f}",
            f"{found.plugin_ratio[0]:.2f}/{found.plugin_ratio[1]:.2f}",
            f"{found.first[0]:.3f}/{found.first[1]:.3f}",
            f"{found.first_ratio[0]:.2f}/{found.first_ratio[1]:.2f}",
            f"{found.cached[0]:.3f}/{found.cached[1]:.3f}",
            f"{found.cached_ratio[0]:.2f}/{found.cached_ratio[1]:.2f}",
        ]
        print(
            f"{name:<44} {found.lines:>6} {cells[0]:>13} {cells[1]:>13} {cells[2]:>11} {cells[3]:>13} {cells[4]:>11}"
            f" {cells[5]:>13} {cells[6]:>11}"
        )
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"ratios: median of the rounds' ratios / least over least; load average now {load} (1, 5, 15 min)")
    return 0


def libcst_version() -> str:
    from importlib.metadata import version

    return version("libcst")


if __name__ == "__main__":
    sys.exit(main())
