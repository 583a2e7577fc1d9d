"""The cache with project facts: pass 1 once per run, each file parsed once, and a cached answer
that follows the text of every file it depends on (issue 13, "Cache and parallelism").

No timing anywhere: parses, pass-1 computations and worker deaths are counted or forced.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from multifile import write_files

import torchdev_lint.analysis.project.facts_memo
import torchdev_lint.analysis.project.project_facts
import torchdev_lint.cache
import torchdev_lint.engine
import torchdev_lint.runner
from torchdev_lint.cli import main

GATE = """
    import sys
    import torch

    def init_distributed_mode(args):
        if not torch.cuda.is_available():
            sys.exit("this program needs a GPU")
"""
# The same helper, stopping with another message: a text no summary is cached for yet.
OTHER_GATE = GATE.replace("this program needs a GPU", "a GPU is required")
WARNS = """
    import warnings
    import torch

    def init_distributed_mode(args):
        if not torch.cuda.is_available():
            warnings.warn("no GPU: running on the CPU")
"""
UNPARSABLE = "def init_distributed_mode(args:\n"
MAIN = """
    import torch
    import utils

    def main(args):
        utils.init_distributed_mode(args)
        model = torch.nn.Linear(2, 2).cuda()
        return model
"""
# Pass 1 parses it first (it builds a loader), and finds no facts for it.
TRAIN = """
    import torch
    from torch.utils.data import DataLoader

    def loader(dataset):
        return DataLoader(dataset, batch_size=4)
"""
MODEL = """
    import torch

    def build():
        return torch.nn.Linear(2, 2)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_files(
        root, {"setup.py": "", "utils.py": WARNS, "main.py": MAIN, "train.py": TRAIN, "model.py": MODEL}
    )
    return root


def _check(root: Path, capsys: pytest.CaptureFixture[str], *names: str) -> list[str]:
    """`file:line:column: code` of each finding of `check` (-j1, its cache beside the project)
    on `names` (the whole project if none; those starting with `-` are options)."""
    argv = ["check", "--isolated", "--select", "ALL", "--format", "concise", "-q", "-j1"]
    argv += ["--cache-dir", str(root.parent / "cache")]
    options = [name for name in names if name.startswith("-")]
    names = tuple(name for name in names if not name.startswith("-"))
    main([*argv, *options, *([str(root / name) for name in names] or [str(root)])])
    lines = capsys.readouterr().out.splitlines()
    return sorted(" ".join(line.split(" ")[:2]).replace(str(root) + os.sep, "") for line in lines)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often LibCST parsed each file (by name) from now on, for pass 1 or a check."""
    counts: Counter[str] = Counter()
    real = torchdev_lint.engine._parse

    def counting(path: str, *args: object) -> object:
        counts[Path(path).name] += 1
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(torchdev_lint.engine, "_parse", counting)
    return counts


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per pass 1 run to its end from now on (by the CLI's cache answer or the runner)."""
    done: list[str] = []
    real = torchdev_lint.analysis.project.project_facts.project_facts

    def recording(*args: object, **kwargs: object) -> object:
        facts = real(*args, **kwargs)  # type: ignore[arg-type]
        done.append("pass 1")
        return facts

    monkeypatch.setattr(torchdev_lint.analysis.project.project_facts, "project_facts", recording)
    monkeypatch.setattr(torchdev_lint.runner, "project_facts", recording)
    monkeypatch.setattr(torchdev_lint.analysis.project.facts_memo, "project_facts", recording)
    return done


def test_cold_cached_run_parses_each_file_once(
    project: Path, capsys: pytest.CaptureFixture[str], parses: Counter[str], passes: list[str]
) -> None:
    """The CLI's cache answer used to run pass 1 first, parsing every file without a cached
    summary, and the runner then checked those files (parsing them again) and ran pass 1 again."""
    write_files(project, {"utils.py": GATE})
    assert _check(project, capsys) == []  # main.py's .cuda() follows the gate
    # (setup.py is empty: the trigger filter spares its parse)
    assert parses == {"utils.py": 1, "main.py": 1, "train.py": 1, "model.py": 1}, parses
    assert passes == ["pass 1"]


def test_warm_miss_reuses_the_cached_pass_1(
    project: Path, capsys: pytest.CaptureFixture[str], parses: Counter[str], passes: list[str]
) -> None:
    """A file edited that pass 1 does not read: the facts the cache answer computed from cached
    summaries go to the runner, which only checks the edited file."""
    assert _check(project, capsys) == ["main.py:7:13: TDL301"]
    parses.clear()
    passes.clear()
    write_files(project, {"model.py": MODEL.replace("(2, 2)", "(2, 3)")})
    assert _check(project, capsys) == ["main.py:7:13: TDL301"]
    assert parses == {"model.py": 1} and passes == ["pass 1"]


def test_unused_noqa_report_reuses_the_run_pass_1(
    project: Path, capsys: pytest.CaptureFixture[str], passes: list[str]
) -> None:
    """`--report-unused-noqa` asks the facts of the same files: pass 1 runs once cold, and not at
    all warm (the facts are kept with what the cold pass read)."""
    write_files(project, {"model.py": MODEL + "\n    y = 1  # noqa: TDL301\n"})
    for expected in (["pass 1"], []):  # cold, then warm
        passes.clear()
        found = _check(project, capsys, "--report-unused-noqa")
        assert found == ["main.py:7:13: TDL301", "model.py:7:8: NOQA"], found
        assert passes == expected


def test_cached_answer_follows_the_dependency_text(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """utils.py edited from a warning helper to a gating one and back, unparsable in between:
    main.py's result follows utils.py's text each time. The trap: a file whose summary is not
    cached, read as having no facts, gives main.py the digest of the warning state, whose
    result (TDL301) is cached."""
    flagged: list[str] = ["main.py:7:13: TDL301"]
    silent: list[str] = []
    assert _check(project, capsys) == flagged  # WARNS
    write_files(project, {"utils.py": GATE})
    assert _check(project, capsys) == silent
    write_files(project, {"utils.py": WARNS})
    assert _check(project, capsys) == flagged  # both states cached now
    (project / "utils.py").write_text(UNPARSABLE)
    assert _check(project, capsys, "main.py") == flagged  # unknown: no facts
    write_files(project, {"utils.py": OTHER_GATE})  # gating; its summary is in no cache
    assert _check(project, capsys, "main.py") == silent
    (project / "utils.py").write_text(UNPARSABLE)
    assert _check(project, capsys, "main.py") == flagged
    write_files(project, {"utils.py": GATE})
    assert _check(project, capsys, "main.py") == silent
    write_files(project, {"utils.py": OTHER_GATE.replace("required", "needed")})
    assert _check(project, capsys) == silent


def test_warm_run_follows_a_module_that_appears(
    project: Path, capsys: pytest.CaptureFixture[str], passes: list[str]
) -> None:
    """A warm run over unchanged files gives the kept facts without a pass, until a path pass 1
    looked at changes: tools/main.py imports `utils` from the project root (a gate), until
    tools/utils.py (found first, beside the file, and not among the checked files) appears."""
    write_files(project, {"utils.py": GATE, "tools/main.py": MAIN})
    for expected in (["pass 1"], []):  # cold, then warm
        passes.clear()
        assert _check(project, capsys, "tools/main.py") == []
        assert passes == expected
    write_files(project, {"tools/utils.py": WARNS})
    assert _check(project, capsys, "tools/main.py") == ["tools/main.py:7:13: TDL301"]
    assert passes == ["pass 1"]


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per pass 1 started from now on, whether it ends or stops at a file to parse."""
    started: list[str] = []
    real = torchdev_lint.analysis.project.facts_memo.project_facts

    def starting(*args: object, **kwargs: object) -> object:
        started.append("pass 1")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torchdev_lint.analysis.project.facts_memo, "project_facts", starting)
    return started


def test_an_edited_summarized_file_starts_one_pass(
    project: Path, capsys: pytest.CaptureFixture[str], starts: list[str]
) -> None:
    """utils.py now has a gate's text, for which no summary is cached: the cache alone cannot
    give the facts, which the kept entry tells before a pass from the cache starts (it would run
    most of its way and stop there); the runner's pass is the only one."""
    assert _check(project, capsys) == ["main.py:7:13: TDL301"]
    starts.clear()
    write_files(project, {"utils.py": OTHER_GATE})
    assert _check(project, capsys) == []
    assert starts == ["pass 1"]


ENCODER = """
    import torch

    class Encoder(torch.nn.Module):
        def forward(self, x):
            return x
"""
USES_ENCODER = """
    import torch
    from models import Encoder

    def test_encode():
        Encoder().to("cuda")(torch.ones(2))
"""


def test_an_edited_module_read_for_its_classes_starts_one_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], starts: list[str]
) -> None:
    """models.py is read for its module classes alone: a new text has none cached."""
    root = tmp_path / "project"
    write_files(root, {"setup.py": "", "models.py": ENCODER, "test_models.py": USES_ENCODER})
    found = _check(root, capsys)
    assert any((tmp_path / "cache" / "module_classes").rglob("*.json"))
    starts.clear()
    write_files(root, {"models.py": ENCODER + "\n    # edited\n"})
    assert _check(root, capsys) == found
    assert starts == ["pass 1"]


def test_summary_key_holds_libcst_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary is made from LibCST's tree: another LibCST version summarizes again."""
    before = torchdev_lint.cache.summary_key(b"x = 1\n")
    monkeypatch.setattr(torchdev_lint.cache, "libcst_version", lambda: "0.0.1")
    assert torchdev_lint.cache.summary_key(b"x = 1\n") != before


def test_workers_and_cache_give_the_serial_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-j2 = -j1 with project facts, cold and warm (facts in the keys of the parent's lookups)."""
    files = {"setup.py": "", "utils.py": GATE, "train.py": TRAIN}
    for index in range(10):
        call = "utils.init_distributed_mode" if index % 2 else "print"
        files[f"script{index}.py"] = MAIN.replace("utils.init_distributed_mode", call)
    write_files(tmp_path / "project", files)
    outputs = []
    for jobs in ("-j1", "-j2"):
        argv = ["check", "--isolated", "--select", "ALL", "--format", "concise", jobs]
        argv += ["--cache-dir", str(tmp_path / f"cache{jobs}"), str(tmp_path / "project")]
        for _ in range(2):  # cold, then warm
            main(argv)
            outputs.append(capsys.readouterr().out)
    assert outputs[0].count("TDL301") == 5
    assert len(set(outputs)) == 1, outputs
