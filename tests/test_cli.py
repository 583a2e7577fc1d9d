"""The command line: selection, formats, fixing, exit codes, rule listing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

import torchdev_lint.cli
import torchdev_lint.config
import torchdev_lint.flake8_plugin
import torchdev_lint.report
import torchdev_lint.rule
from torchdev_lint.cli import fix_main, main
from torchdev_lint.noqa import is_suppressed
from torchdev_lint.rule import Rule, all_rules

BAD = 'import torch\n\nstate = torch.load("model.pt")\n'
FIXED = 'import torch\n\nstate = torch.load("model.pt", map_location="cpu")\n'


class EvalCall(Rule):
    """A stand-in opt-in rule, so selection tests do not depend on which rules exist."""

    code = "TDL998"
    name = "test-eval-call"
    message = "test: `.eval()` called"
    default_enabled = False
    docs = "## What it does\nx\n## Why it matters\nx\n## Example\nx\n## Use instead\nx\n## Fix safety\nx\n"
    triggers = ("eval",)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "eval":
            self.report(node)


@pytest.fixture
def opt_in_rule(monkeypatch: pytest.MonkeyPatch) -> type[Rule]:
    rules = (*all_rules(), EvalCall)
    for module in (torchdev_lint.rule, torchdev_lint.config, torchdev_lint.cli, torchdev_lint.flake8_plugin):
        monkeypatch.setattr(module, "all_rules", lambda: rules)
    return EvalCall


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    return path


def test_check_reports_findings_with_exit_1(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", str(bad))
    assert code == 1
    assert f"{bad}:3:9: TDL101 [*] `torch.load` without `map_location`" in out
    assert '3 | state = torch.load("model.pt")' in out
    assert "        ^^^^^^^^^^^^^^^^^^^^^^" in out
    assert "Found 1 finding." in err
    assert "[*] 1 fixable with --fix." in err


def test_clean_file_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.py").write_text(FIXED)
    code, out, err = run(capsys, "check", str(tmp_path))
    assert (code, out) == (0, "")
    assert "All checks passed!" in err


def test_concise_is_flake8_style(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--format", "concise", str(bad))
    assert code == 1
    assert out.splitlines() == [
        f"{bad}:3:9: TDL101 `torch.load` without `map_location` restores tensors to the device they were "
        'saved on; pass `map_location="cpu"` (or your device)'
    ]


def test_json_keys_and_fix(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--format", "json", str(bad))
    assert code == 1 and err == ""
    (item,) = json.loads(out)
    assert list(item) == [
        "path",
        "line",
        "column",
        "end_line",
        "end_column",
        "code",
        "name",
        "message",
        "fix",
    ]
    assert (item["line"], item["column"], item["end_line"], item["end_column"]) == (3, 9, 3, 31)
    assert (item["code"], item["name"]) == ("TDL101", "load-without-map-location")
    assert item["fix"]["safety"] == "safe"
    assert isinstance(item["fix"]["message"], str)
    (edit,) = item["fix"]["edits"]
    assert set(edit) == {"line", "column", "end_line", "end_column", "content"}
    # Applying the edit to the text gives the fixed file.
    lines = BAD.splitlines(keepends=True)
    assert edit["line"] == edit["end_line"]
    line = lines[edit["line"] - 1]
    lines[edit["line"] - 1] = line[: edit["column"] - 1] + edit["content"] + line[edit["end_column"] - 1 :]
    assert "".join(lines) == FIXED


def test_json_fix_is_null_without_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dp.py"
    path.write_text("import torch\nmodel = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n")
    code, out, _ = run(capsys, "check", "--select", "TDL308", "--format", "json", str(path))
    assert code == 1
    assert [item["fix"] for item in json.loads(out)] == [None]


def test_json_empty_list_when_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.py").write_text(FIXED)
    assert run(capsys, "check", "--format", "json", str(tmp_path))[:2] == (0, "[]\n")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), {"TDL101"}),
        (("--select", "TDL101"), {"TDL101"}),
        (("--select", "TDL1"), {"TDL101"}),
        (("--select", "tdl1"), {"TDL101"}),
        (("--select", "TDL"), {"TDL101"}),
        (("--select", "TDL998"), {"TDL998"}),
        (("--select", "ALL"), {"TDL101", "TDL998"}),
        (("--select", "TDL9"), set()),
        (("--extend-select", "TDL998"), {"TDL101", "TDL998"}),
        (("--select", "ALL", "--ignore", "TDL9"), {"TDL101"}),
        (("--ignore", "TDL101"), set()),
        (("--select", "TDL101,TDL998"), {"TDL101", "TDL998"}),
    ],
)
def test_selection(
    opt_in_rule: type[Rule],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    expected: set[str],
) -> None:
    path = tmp_path / "m.py"
    path.write_text(BAD + "net = torch.nn.Linear(2, 2)\nnet.eval()\n")
    code, out, _ = run(capsys, "check", "--format", "json", *argv, str(path))
    assert {item["code"] for item in json.loads(out)} == expected
    assert code == (1 if expected else 0)


@pytest.mark.parametrize("flag", ["--select", "--ignore", "--extend-select"])
def test_unknown_selector_is_a_usage_error(bad: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    code, out, err = run(capsys, "check", flag, "TDL1O1", str(bad))
    assert code == 2 and out == ""
    assert "TDL1O1" in err and err.count("\n") == 1


def test_fix_writes_and_reports_remaining(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--fix", str(bad))
    assert code == 0 and out == ""
    assert bad.read_text() == FIXED
    assert "Fixed 1 finding" in err


def test_diff_writes_nothing(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--diff", str(bad))
    assert code == 1
    assert bad.read_text() == BAD
    assert f"--- a/{bad}" in out and f"+++ b/{bad}" in out
    assert '-state = torch.load("model.pt")' in out
    assert '+state = torch.load("model.pt", map_location="cpu")' in out


def test_diff_clean_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.py").write_text(FIXED)
    assert run(capsys, "check", "--diff", str(tmp_path))[:2] == (0, "")


def test_statistics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text(BAD)
    (tmp_path / "b.py").write_text(BAD + "again = torch.load('x')\n")
    code, out, _ = run(capsys, "check", "--statistics", "--quiet", str(tmp_path))
    assert code == 1
    assert "3\tTDL101\t[*] load-without-map-location" in out.splitlines()


def test_quiet_prints_no_summary(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--quiet", str(bad))
    assert code == 1 and "TDL101" in out and err == ""


def test_no_cache_is_accepted(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "check", "--no-cache", str(bad))[0] == 1


def test_unsafe_fixes_flag(opt_in_rule: type[Rule], bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "check", "--fix", "--unsafe-fixes", str(bad))
    assert code == 0 and bad.read_text() == FIXED


def test_directory_walk_skips_venvs_and_excludes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for folder in ("pkg", ".git", "__pycache__", "build", "dist", "env", "pkg/gen"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "m.py").write_text(BAD)
    (tmp_path / "env" / "pyvenv.cfg").write_text("")
    (tmp_path / "pkg" / "notes.txt").write_text(BAD)
    code, out, _ = run(capsys, "check", "--format", "concise", "--exclude", "gen", str(tmp_path))
    assert code == 1
    assert [line.split(":")[0] for line in out.splitlines()] == [str(tmp_path / "pkg" / "m.py")]


def test_default_path_is_cwd(
    bad: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(bad.parent)
    code, out, _ = run(capsys, "check", "--format", "concise")
    assert code == 1 and out.startswith("bad.py:3:9: TDL101")


def test_torchdev_fix_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text(BAD)
    (tmp_path / "b.py").write_text(BAD + "again = torch.load('x')\n")
    (tmp_path / "c.py").write_text("import torch\nnet = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n")
    code = fix_main([str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1  # the DataParallel finding has no fix and remains
    assert "Fixed 3 findings in 2 files; 1 remains" in err
    assert "TDL308" in out
    assert (tmp_path / "a.py").read_text() == FIXED


def test_torchdev_fix_clean_exits_0(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fix_main([str(bad)]) == 0
    assert "Fixed 1 finding in 1 file; 0 remain" in capsys.readouterr().err


def test_rules_lists_every_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "rules")
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [rule.code for rule in all_rules()]
    assert any(line.split()[:3] == ["TDL101", "load-without-map-location", "on"] for line in lines)
    assert any(line.split()[:3] == ["TDL206", "sync-in-loop", "opt-in"] for line in lines)
    assert "fix: sometimes" in next(line for line in lines if line.startswith("TDL101"))


@pytest.mark.parametrize(
    "word", ["TDL101", "tdl101", "load-without-map-location", " Load-Without-Map-Location"]
)
def test_rule_accepts_code_or_name(capsys: pytest.CaptureFixture[str], word: str) -> None:
    code, out, _ = run(capsys, "rule", word, "--format", "markdown")
    assert code == 0
    assert out.startswith("# TDL101 load-without-map-location\n")


def test_rule_markdown_is_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    for rule in all_rules():
        assert run(capsys, "rule", rule.code, "--format", "markdown")[1] == rule.documentation()


@pytest.mark.parametrize("fmt", [(), ("--format", "text")])
def test_rule_text_is_plain(capsys: pytest.CaptureFixture[str], fmt: tuple[str, ...]) -> None:
    code, out, _ = run(capsys, "rule", "TDL101", *fmt)
    assert code == 0
    assert out.startswith("TDL101 load-without-map-location\n================================\n")
    for section in ("What it does", "Why it matters", "Example", "Use instead", "Fix safety"):
        assert f"\n{section}\n{'-' * len(section)}\n" in out
    assert "`" not in out
    assert not any(line.startswith("#") for line in out.splitlines())
    assert '\n    state = torch.load("checkpoint.pt")\n' in out  # code blocks indented


def test_rule_newer_than_the_catalog_is_found(
    opt_in_rule: type[Rule], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "rule", "test-eval-call", "--format", "markdown")
    assert code == 0 and out.startswith("# TDL998 test-eval-call")


def test_rule_and_rules_do_not_import_libcst() -> None:
    script = (
        "import sys\n"
        "from torchdev_lint.cli import main\n"
        "assert main(['rules']) == 0\n"
        "assert main(['rule', 'load-without-map-location']) == 0\n"
        "assert main(['rule', 'TDL313', '--format', 'markdown']) == 0\n"
        "assert 'libcst' not in sys.modules, 'libcst was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_unknown_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "rule", "TDL1O1")
    assert code == 2 and out == ""
    assert "TDL1O1" in err and "did you mean 'TDL101'" in err
    code, out, err = run(capsys, "rule", "load-without-map-locaton")
    assert code == 2 and "did you mean 'load-without-map-location'" in err


def test_usage_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--format", "nope"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("comment", "suppressed"),
    [
        ("# noqa", True),
        ("# NOQA", True),
        ("# noqa: TDL101", True),
        ("# noqa:TDL101", True),
        ("# noqa: TDL1", True),
        ("# noqa: tdl101", True),
        ("# noqa: E501,TDL101", True),
        ("# noqa: E501, TDL2", False),
        ("# noqa: TDL102", False),
        ("# no qa", False),
    ],
)
def test_noqa(tmp_path: Path, capsys: pytest.CaptureFixture[str], comment: str, suppressed: bool) -> None:
    assert is_suppressed(f'x = torch.load("m.pt")  {comment}', "TDL101") is suppressed
    path = tmp_path / "m.py"
    path.write_text(f'import torch\nx = torch.load("m.pt")  {comment}\n')
    assert run(capsys, "check", str(path))[0] == (0 if suppressed else 1)
    # A suppressed finding is not fixed either.
    run(capsys, "check", "--fix", str(path))
    assert ('map_location="cpu"' in path.read_text()) is not suppressed


def test_import_and_check_do_not_import_torch(bad: Path) -> None:
    script = (
        "import sys, torchdev_lint, torchdev_lint.flake8_plugin\n"
        "from torchdev_lint.cli import main\n"
        "from torchdev_lint.rule import all_rules\n"
        "all_rules()\n"
        f"code = main(['check', '--quiet', {str(bad)!r}])\n"
        "main(['rules'])\n"
        "assert code == 1, code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_console_scripts_run(bad: Path) -> None:
    bin_dir = Path(sys.executable).parent
    check = subprocess.run(
        [str(bin_dir / "torchdev-lint"), "check", "--format", "concise", str(bad)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 1 and "TDL101" in check.stdout
    module = subprocess.run(
        [sys.executable, "-m", "torchdev_lint", "--version"], capture_output=True, text=True
    )
    assert module.returncode == 0 and module.stdout.startswith("torchdev-lint ")
    fix = subprocess.run(
        [str(bin_dir / "torchdev-fix"), str(bad)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert fix.returncode == 0, fix.stderr
    assert bad.read_text() == FIXED
