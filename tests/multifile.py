"""Small multi-file projects for the tests of facts that cross files: write one, check it,
and record which files the engine was asked to check (cache misses). `GATE` and `WARNS` are a
helper `utils.init()` that stops the program without CUDA, and its look-alike that goes on."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from textwrap import dedent

import pytest

import torchdev_lint.runner
from torchdev_lint.cache import ResultCache
from torchdev_lint.config import select_rules
from torchdev_lint.runner import CheckOptions, process_files

# utils.init() exits without CUDA: every `.cuda()` after a call of it cannot fail for want of a GPU.
GATE = """
    import sys
    import torch

    def init(args):
        if not torch.cuda.is_available():
            sys.exit("this program needs a GPU")
"""
# The look-alike: the program goes on without CUDA.
WARNS = """
    import warnings
    import torch

    def init(args):
        if not torch.cuda.is_available():
            warnings.warn("no GPU: running on the CPU")
"""


def write_files(root: Path, files: dict[str, str]) -> None:
    """Write each file's dedented text under `root`, making folders as needed."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text))


def findings(
    root: Path, codes: Iterable[str], *names: str, cache: ResultCache | None = None, jobs: int = 1
) -> list[str]:
    """`path:line code` of each finding of `codes`, checking `names` (all .py files if none)."""
    paths = [str(root / n) for n in names] or sorted(str(p) for p in root.rglob("*.py"))
    options = CheckOptions(rules=tuple(select_rules(list(codes))), cache=cache, with_edits=False)
    return [
        f"{Path(d.path).relative_to(root).as_posix()}:{d.line} {d.code}"
        for report in process_files(paths, options, jobs=jobs)
        for d in report.diagnostics
    ]


def record_checks(monkeypatch: pytest.MonkeyPatch, entry: Callable[[str], str] = str) -> list[str]:
    """`entry(path)` of every file the runner hands to the engine from now on (the cache misses)."""
    calls: list[str] = []
    real = torchdev_lint.runner.check_source

    def recording(path: str, *args: object, **kwargs: object) -> object:
        calls.append(entry(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torchdev_lint.runner, "check_source", recording)
    return calls


def file_name(path: str) -> str:
    return Path(path).name
