"""`# noqa`: how directives are read, that a directive anywhere in a statement silences it, that
`check` and the flake8 plugin agree on every spelling, and `--report-unused-noqa`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchdev_lint.cli import main
from torchdev_lint.noqa import Directives, is_suppressed, unused_codes
from torchdev_lint.positions import LineIndex

FLAKE8 = [sys.executable, "-m", "flake8", "--isolated", "--select", "TDL"]
CHECK = [sys.executable, "-m", "torchdev_lint", "check", "--isolated", "--no-cache", "--format", "concise"]
LOAD = 'torch.load("m.pt")'  # TDL101 (on by default)


def _found(command: list[str], cwd: Path) -> set[tuple[str, int, str]]:
    """(file, line, code) of each finding the command prints."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stdout + result.stderr
    found = set()
    for line in result.stdout.splitlines():
        path, number, _, rest = line.split(":", 3)
        found.add((path.removeprefix("./"), int(number), rest.split()[0]))
    return found


# Spellings: flake8 wants exactly one space between `#` and the word, a colon with at most one space after it, and
# codes that are letters then digits; `check` reads every spelling flake8 does, in any case.
SPELLINGS = {
    "# noqa": True,
    "# NOQA": True,
    "# noqa:TDL101": True,
    "# noqa: TDL101": True,
    "#noqa: TDL101 , TDL2": True,
    "#  noqa:TDL101": True,
    "# NOQA: tdl1": True,
    "# noqa: Tdl101": True,
    "# NoQa:tDl10": True,
    "# noqa: E501,TDL101": True,
    "# noqa:E501 TDL1": True,
    "# noqa: TDL1x": True,  # flake8 reads the codes `TDL1`
    "# noqa: TDL": True,  # no digits: flake8 reads a blanket directive
    "# noqa:  TDL102": True,  # two spaces: blanket for flake8
    "# noqa : TDL102": True,  # space before the colon: blanket for flake8
    "# type: ignore  # noqa: TDL101": True,
    "# noqa:E501  # noqa: TDL101": True,  # flake8 reads only the first; check reads both
    "# noqa: E501": False,
    "# noqa: TDL102": False,
    "# noqa: E501, TDL2": False,
    "# no qa": False,
    "# noqa-ish: TDL101": True,  # blanket for flake8 too: the word followed by anything
}


def test_spellings_agree_between_check_and_flake8(tmp_path: Path) -> None:
    expected = set()
    for index, (comment, silenced) in enumerate(SPELLINGS.items()):
        (tmp_path / f"m{index}.py").write_text(f"import torch\nx = {LOAD}  {comment}\n")
        assert is_suppressed(f"x = {LOAD}  {comment}", "TDL101") is silenced, comment
        if not silenced:
            expected.add((f"m{index}.py", 2, "TDL101"))
    assert _found([*CHECK, "."], tmp_path) == expected
    assert _found([*FLAKE8, "."], tmp_path) == expected


# A directive anywhere in a statement's lines silences a finding on any of them.
STATEMENTS = {
    "call_last_line": ("x = torch.load(\n    'm.pt'\n)  # noqa: TDL101\n", None),
    "call_first_line": ("x = torch.load(  # noqa: TDL101\n    'm.pt'\n)\n", None),
    "call_middle_line": ("x = [\n    torch.load('m.pt'),\n    1,  # noqa: TDL1\n]\n", None),
    "string": ('x = torch.load("""\nm.pt""")  # noqa: TDL101\n', None),
    "string_later_line": ('x = (\n    1, """\n    a""", torch.load("m.pt"))  # noqa\n', None),
    "backslash": ("x = 1 + \\\n    torch.load('m.pt')  # noqa: TDL101\n", None),
    "backslash_finding_first": ("x = torch.load('m.pt') + \\\n    1  # noqa: TDL101\n", None),
    "comment_line_inside": ("x = torch.load(\n    # noqa: TDL101\n    'm.pt',\n)\n", None),
    # Not the same statement: these do not silence.
    "comment_line_above": ("# noqa: TDL101\nx = torch.load('m.pt')\n", 3),
    "previous_statement": ("y = 1  # noqa\nx = torch.load('m.pt')\n", 3),
    "next_statement": ("x = torch.load('m.pt')\ny = 1  # noqa\n", 2),
    "block_body": ("if True:  # noqa\n    x = torch.load('m.pt')\n", 3),
    "other_code": ("x = torch.load(\n    'm.pt'\n)  # noqa: TDL102\n", 2),
}


def test_statement_suppression_agrees_between_check_and_flake8(tmp_path: Path) -> None:
    expected = set()
    for name, (body, line) in STATEMENTS.items():
        (tmp_path / f"case_{name}.py").write_text(f"import torch\n{body}")
        if line is not None:
            expected.add((f"case_{name}.py", line, "TDL101"))
    assert _found([*CHECK, "."], tmp_path) == expected
    assert _found([*FLAKE8, "."], tmp_path) == expected


def test_every_line_of_a_statement_is_looked_at() -> None:
    text = "a = f(\n    1,\n    2,\n)  # noqa: TDL2\nb = 1\n"
    directives = Directives(LineIndex(text))
    assert [directives.suppresses(n, "TDL201") for n in range(1, 6)] == [True] * 4 + [False]
    assert not directives.suppresses(1, "TDL101")


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_statement_lines_follow_pythons_line_breaks(newline: str) -> None:
    text = newline.join(["a = f(", "    1,", ")  # noqa", "b = 2", ""])
    directives = Directives(LineIndex(text))
    assert [directives.suppresses(n, "TDL101") for n in range(1, 5)] == [True, True, True, False]


def test_an_untokenizable_text_falls_back_to_the_line_itself() -> None:
    text = "a = f(\n    1  # noqa\n"  # unclosed bracket: the tokenizer fails
    directives = Directives(LineIndex(text))
    assert directives.suppresses(2, "TDL101")
    assert not directives.suppresses(1, "TDL101")


# --report-unused-noqa -----------------------------------------------------------


def test_unused_codes() -> None:
    text = (
        "import torch\n"
        "a = torch.load(p)  # noqa: TDL101\n"  # used
        "b = 1  # noqa: TDL101\n"  # unused
        "c = 1  # noqa: E501, tdl1, F401\n"  # unused, other tools' codes left alone
        "d = 1  # noqa\n"  # blanket: never reported
        "e = '# noqa: TDL101'\n"  # a string, not a directive
        "f = 1  # noqa: TDL301\n"  # TDL301 not selected: cannot be judged
        "g = 1  # noqa: TDL999\n"  # no such rule
        "h = f(\n"
        "    torch.load(p),\n"
        ")  # noqa: TDL101\n"  # used by the finding on line 10
    )
    silenced = [(2, "TDL101"), (10, "TDL101")]
    unused = unused_codes(text, silenced, ["TDL101", "TDL102"], ["TDL101", "TDL102", "TDL301"])
    assert [(u.line, u.code, u.known) for u in unused] == [
        (3, "TDL101", True),
        (4, "tdl1", True),
        (8, "TDL999", False),
    ]
    assert text.splitlines()[2][unused[0].column : unused[0].end_column] == "# noqa: TDL101"


def test_report_unused_noqa(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\n"
        'a = torch.load("a.pt")  # noqa: TDL101\n'
        'b = torch.load("b.pt", map_location="cpu")  # noqa: E501, TDL101\n'
        "c = 1  # noqa\n"
    )
    assert main(["check", "--isolated", "--no-cache", str(path)]) == 0
    capsys.readouterr()
    assert (
        main(["check", "--isolated", "--no-cache", "--report-unused-noqa", "--format", "json", str(path)])
        == 1
    )
    found = json.loads(capsys.readouterr().out)
    assert [(d["line"], d["column"], d["code"], d["name"]) for d in found] == [(3, 45, "NOQA", "unused-noqa")]
    assert "TDL101" in found[0]["message"]
    command = ["check", "--isolated", "--no-cache", "--report-unused-noqa", str(path)]
    for fmt in ("text", "concise", "github"):
        assert main([*command, "--format", fmt]) == 1
    capsys.readouterr()
    assert main([*command, "--format", "sarif"]) == 1
    sarif = json.loads(capsys.readouterr().out)
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    (result,) = sarif["runs"][0]["results"]
    assert rules[result["ruleIndex"]]["id"] == "NOQA"


def test_unused_noqa_of_a_rule_that_did_not_run_is_not_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.py"
    path.write_text("import torch\nb = torch.load('b.pt', map_location='cpu')  # noqa: TDL101\n")
    command = ["check", "--isolated", "--no-cache", "--report-unused-noqa", "--format", "concise"]
    assert main([*command, "--select", "TDL3", str(path)]) == 0
    assert main([*command, "--ignore", "TDL101", str(path)]) == 0
    assert main([*command, str(path)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{path}:2:45: NOQA Unused `noqa` directive for TDL101: no finding here"
    ]
