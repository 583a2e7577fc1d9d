"""A serial check shares pass 1's parses: a file whose tree is not kept (beyond the runner's
budget) is checked at once with facts that record what the check asks, and checked again
only when the project's facts answer one of those questions otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import file_name, findings, record_checks, write_files

import torchdev_lint.runner
from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.cache import ResultCache
from torchdev_lint.runner import _AskedFacts

GATE = """
    import sys
    import torch

    def init_distributed_mode(args):
        if not torch.cuda.is_available():
            sys.exit("this program needs a GPU")
"""
MAIN = """
    import torch
    import utils

    def main(args):
        utils.{call}(args)
        return torch.nn.Linear(2, 2).cuda()
"""
# Gates of its own (so pass 1 parses it) and calls the gate (its facts), moving nothing: its
# check asks nothing the facts answer otherwise.
LAUNCH = """
    import sys
    import torch
    import utils

    def launch(args):
        if not torch.cuda.is_available():
            sys.exit("this program needs a GPU")

    utils.init_distributed_mode(None)
"""


def test_asked_facts_record_lookups_and_whole_reads() -> None:
    asked = _AskedFacts()
    assert not asked.facts.gates("utils.init_distributed_mode")
    assert asked.questions.same_answers(FileFacts(gating=frozenset({"helpers.setup"})))
    assert asked.questions.same_answers(FileFacts(host_returns=frozenset({"utils.load"})))  # never asked
    assert not asked.questions.same_answers(FileFacts(gating=frozenset({"utils.init_distributed_mode"})))
    assert not asked.facts.cuda_defaults  # read whole: any default answers otherwise
    assert not asked.questions.same_answers(FileFacts(cuda_defaults=frozenset({("Encoder", "device")})))
    assert list(asked.facts.checkpointing) == []
    assert not asked.questions.same_answers(FileFacts(checkpointing=frozenset({("save", 0, "model")})))


@pytest.mark.parametrize("kept", [0, 256 * 1024])
def test_checked_again_only_where_the_facts_answer_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: int
) -> None:
    monkeypatch.setattr(torchdev_lint.runner, "_KEPT_SOURCE_BYTES", kept)
    checked = record_checks(monkeypatch, file_name)
    cache = ResultCache.open(str(tmp_path / ".cache"))
    _write_project(tmp_path / "project")
    assert findings(tmp_path / "project", CODES, cache=cache) == ["other.py:7 TDL301"]
    # Not kept, main.py was checked without its facts first: its gate answers otherwise.
    twice = ["main.py"] if kept == 0 else []
    assert sorted(checked) == sorted(["launch.py", "main.py", "other.py", "setup.py", "utils.py", *twice])
    checked.clear()
    assert findings(tmp_path / "project", CODES, cache=cache) == ["other.py:7 TDL301"]
    assert checked == []  # every report, reused or not, was cached under its key with the facts


def test_workers_keep_the_reports_the_facts_answer_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ResultCache.open(str(tmp_path / ".cache"))
    _write_project(tmp_path / "project")
    assert findings(tmp_path / "project", CODES, cache=cache, jobs=2) == ["other.py:7 TDL301"]
    checked = record_checks(monkeypatch, file_name)
    assert findings(tmp_path / "project", CODES, cache=cache) == ["other.py:7 TDL301"]
    assert checked == []


CODES = ("TDL301", "TDL311")


def _write_project(root: Path) -> None:
    files = {"setup.py": "", "utils.py": GATE, "main.py": MAIN.format(call="init_distributed_mode")}
    files["other.py"] = MAIN.format(call="other_helper")  # asks of a function that does not gate
    files["launch.py"] = LAUNCH
    write_files(root, files)


MODELS = """
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.project = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.project(x)
"""
# Parsed by pass 1 (a gate of its own), and its check asks which imported classes are modules.
ENCODE = """
    import sys
    import torch
    from models import Encoder

    def encode():
        if not torch.cuda.is_available():
            sys.exit("this program needs a GPU")
        return Encoder().to("cuda")(torch.ones(4))
"""


@pytest.mark.parametrize(("for_facts", "twice"), [(512 * 1024, []), (0, ["encode.py"])])
def test_a_file_told_to_keep_is_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, for_facts: int, twice: list[str]
) -> None:
    """Pass 1 tells the runner which files will learn imported module classes, known only at its
    end: their trees are kept (within a budget of their own), not checked at once and again."""
    monkeypatch.setattr(torchdev_lint.runner, "_KEPT_SOURCE_BYTES", 0)
    monkeypatch.setattr(torchdev_lint.runner, "_KEPT_FOR_FACTS_BYTES", for_facts)
    checked = record_checks(monkeypatch, file_name)
    write_files(tmp_path, {"setup.py": "", "models.py": MODELS, "encode.py": ENCODE})
    assert findings(tmp_path, ["TDL302"]) == ["encode.py:9 TDL302"]
    assert sorted(checked) == sorted(["encode.py", "models.py", "setup.py", *twice])
