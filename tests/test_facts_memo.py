"""The flake8 plugin's kept pass 1 (`analysis/project/facts_memo.py`): a file's project facts are given
again only while every file pass 1 read, every summary it got from the cache and every path the
project index probed are as they were; any change is a miss, and the pass runs again.

Each test writes a small project, lets `project_facts` over the whole of it write the summaries
(as `torchdev-lint check` does), then asks for one file's facts as the plugin does: its own
file parsed, every other file's summary from the cache only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from textwrap import dedent

import libcst as cst
import pytest
from multifile import GATE, WARNS, write_files

from torchdev_lint.analysis.project import facts_memo
from torchdev_lint.analysis.project.facts_memo import NotCached, file_facts, kept_facts
from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.analysis.project.project_facts import project_facts
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import parse

MAIN = """
    import torch
    import utils

    def main(args, path):
        utils.init(args)
        model = torch.nn.Linear(2, 2).cuda()
        utils.save_checkpoint(model, path)
"""
SAVES = """
    import torch

    def save_checkpoint(encoder, path):
        state = {"encoder": encoder, "step": 1}
        torch.save(state, path)
"""


def _check(root: Path, cache: Path) -> None:
    """What `check` leaves in the cache: the summaries of every project file."""
    paths = sorted(str(path) for path in root.rglob("*.py"))
    project_facts(paths, parse, str(cache))


def _only(target: Path) -> Callable[[str, bytes], cst.Module]:
    """The plugin's parse: its own file, and no other."""

    def parse_target(path: str, source: bytes) -> cst.Module:
        if os.path.abspath(path) != str(target):
            raise SourceError(path, "not summarized in the cache")
        return parse(path, source)

    return parse_target


def _fresh(target: Path, cache: Path) -> FileFacts | None:
    """Pass 1 as the plugin runs it, without the kept answer."""
    return project_facts([str(target)], _only(target), str(cache)).of(str(target))


def _refuse_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on pass 1 must not run: only a kept answer can be given."""

    def refuse(*args: object) -> None:
        raise AssertionError("pass 1 ran")

    monkeypatch.setattr(facts_memo, "project_facts", refuse)


def test_a_kept_answer_equals_pass_one_and_runs_no_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_files(tmp_path, {"setup.py": "", "utils.py": GATE + SAVES, "main.py": MAIN})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    main = tmp_path / "main.py"
    expected = _fresh(main, cache)
    assert expected is not None and expected.gates("utils.init")
    assert expected.checkpointed("utils.save_checkpoint") == [(0, "encoder")]  # tuples survive JSON
    assert file_facts(str(main), _only(main), str(cache)) == expected
    _refuse_the_pass(monkeypatch)
    assert file_facts(str(main), _only(main), str(cache)) == expected


def test_a_file_without_facts_is_kept_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_files(tmp_path, {"setup.py": "", "alone.py": "import torch\nx = torch.ones(2)\n"})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    alone = tmp_path / "alone.py"
    assert file_facts(str(alone), _only(alone), str(cache)) is None
    _refuse_the_pass(monkeypatch)
    assert file_facts(str(alone), _only(alone), str(cache)) is None


def test_an_edited_import_is_a_miss(tmp_path: Path) -> None:
    """utils.py edited: unsummarized, its gate is unknown; once summarized, it only warns."""
    write_files(tmp_path, {"setup.py": "", "utils.py": GATE + SAVES, "main.py": MAIN})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    main = tmp_path / "main.py"
    assert file_facts(str(main), _only(main), str(cache)).gates("utils.init")  # type: ignore[union-attr]
    (tmp_path / "utils.py").write_text(dedent(WARNS + SAVES))
    edited = file_facts(str(main), _only(main), str(cache))
    assert edited == _fresh(main, cache) and (edited is None or not edited.gates("utils.init"))
    _check(tmp_path, cache)
    summarized = file_facts(str(main), _only(main), str(cache))
    assert summarized == _fresh(main, cache)
    assert summarized is not None and not summarized.gates("utils.init")
    assert summarized.checkpointed("utils.save_checkpoint") == [(0, "encoder")]


def test_an_edit_of_the_file_itself_is_a_miss(tmp_path: Path) -> None:
    write_files(tmp_path, {"setup.py": "", "utils.py": GATE, "main.py": MAIN})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    main = tmp_path / "main.py"
    assert file_facts(str(main), _only(main), str(cache)) is not None
    main.write_text(dedent(MAIN).replace("utils.init(args)", "pass"))
    assert file_facts(str(main), _only(main), str(cache)) == _fresh(main, cache) is None


def test_a_new_module_that_shadows_an_import_is_a_miss(tmp_path: Path) -> None:
    """tools/main.py imports `utils` from the project root, until tools/utils.py (found first,
    beside the file) appears: a path the index probed now holds a file."""
    write_files(tmp_path, {"setup.py": "", "utils.py": GATE, "tools/main.py": MAIN})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    main = tmp_path / "tools" / "main.py"
    assert file_facts(str(main), _only(main), str(cache)).gates("utils.init")  # type: ignore[union-attr]
    write_files(tmp_path, {"tools/utils.py": WARNS})
    _check(tmp_path, cache)
    assert file_facts(str(main), _only(main), str(cache)) == _fresh(main, cache) is None


def test_a_summary_gone_from_the_cache_is_a_miss(tmp_path: Path) -> None:
    write_files(tmp_path, {"setup.py": "", "utils.py": GATE, "main.py": MAIN})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    main = tmp_path / "main.py"
    assert file_facts(str(main), _only(main), str(cache)) is not None
    for entry in (cache / "summaries").rglob("*.json"):
        entry.unlink()
    assert file_facts(str(main), _only(main), str(cache)) == _fresh(main, cache) is None


ENCODER = """
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.project = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.project(x)
"""
USES_ENCODER = """
    import torch
    from models import Encoder

    def test_encode():
        Encoder().to("cuda")(torch.ones(2))
"""


def test_module_classes_gone_from_the_cache_are_a_miss(tmp_path: Path) -> None:
    """A file read only for the module classes it defines has its own cache entry (no summary)."""
    write_files(tmp_path, {"setup.py": "", "models.py": ENCODER, "test_models.py": USES_ENCODER})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    assert not (cache / "summaries").exists()
    user = tmp_path / "test_models.py"
    expected = FileFacts(module_classes=frozenset({("models.Encoder", True)}))
    assert file_facts(str(user), _only(user), str(cache)) == _fresh(user, cache) == expected
    for entry in (cache / "module_classes").rglob("*.json"):
        entry.unlink()
    assert file_facts(str(user), _only(user), str(cache)) == _fresh(user, cache) is None


def test_a_damaged_kept_entry_is_a_miss(tmp_path: Path) -> None:
    write_files(tmp_path, {"setup.py": "", "utils.py": GATE, "main.py": MAIN})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    main = tmp_path / "main.py"
    expected = file_facts(str(main), _only(main), str(cache))
    (entry,) = (cache / facts_memo.FOLDER).rglob("*.json")
    for damaged in ("{not json", '{"facts": [[]]}', "[]", '{"facts": null}'):
        entry.write_text(damaged)
        assert file_facts(str(main), _only(main), str(cache)) == expected


def test_the_plugins_entry_is_not_a_checks_answer(tmp_path: Path) -> None:
    """The plugin reads utils.py as unreadable (a text whose summary is not cached, and it parses
    no file but its own): a `check` of main.py alone must not be given that answer, but stop
    (NotCached) so that the runner parses utils.py and finds its gate."""
    write_files(tmp_path, {"setup.py": "", "utils.py": GATE, "main.py": MAIN})
    cache = tmp_path / "cache"
    _check(tmp_path, cache)
    write_files(tmp_path, {"utils.py": GATE + "\n    # edited\n"})
    main = tmp_path / "main.py"
    assert file_facts(str(main), _only(main), str(cache)) is None
    with pytest.raises(NotCached):
        kept_facts([str(main)], None, str(cache))
    assert kept_facts([str(main)], parse, str(cache)).of(str(main)).gates("utils.init")  # type: ignore[union-attr]
