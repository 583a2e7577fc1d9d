"""`check --add-noqa`: a directive for every finding, where Python allows a comment and where it
silences the finding; afterwards `check` (and flake8) report nothing and a second run adds nothing."""

from __future__ import annotations

import codecs
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchdev_lint.cli import fix_main, main
from torchdev_lint.noqa import LineEdit, apply_edits, noqa_edits

# One rule whose findings here are beyond doubt, so that other rules' precision work cannot change them.
CHECK = ["check", "--isolated", "--no-cache", "--select", "TDL101"]


def _add(text: str, findings: list[tuple[int, str]]) -> str:
    return apply_edits(text, noqa_edits(text, findings))


@pytest.mark.parametrize(
    ("before", "findings", "after"),
    [
        pytest.param("x = f()\n", [(1, "TDL101")], "x = f()  # noqa: TDL101\n", id="own line"),
        pytest.param("x = f()   \n", [(1, "TDL101")], "x = f()  # noqa: TDL101\n", id="trailing spaces"),
        pytest.param(
            "x = f()\n",
            [(1, "TDL301"), (1, "TDL101")],
            "x = f()  # noqa: TDL101, TDL301\n",
            id="codes sorted",
        ),
        pytest.param(
            "x = f()  # noqa: E501\n",
            [(1, "TDL101")],
            "x = f()  # noqa: E501, TDL101\n",
            id="merge other tool",
        ),
        pytest.param(
            "x = f()  # noqa: TDL301,E501 - why\n",
            [(1, "TDL101")],
            "x = f()  # noqa: E501, TDL101, TDL301 - why\n",
            id="merge keeps the reason",
        ),
        pytest.param(
            "x = f()  # keep me\n",
            [(1, "TDL101")],
            "x = f()  # keep me  # noqa: TDL101\n",
            id="other comment",
        ),
        pytest.param(
            "x = f()  # type: ignore[x]  # noqa:E501\n",
            [(1, "TDL101")],
            "x = f()  # type: ignore[x]  # noqa:E501, TDL101\n",
            id="directive after another comment",
        ),
        pytest.param(
            "x = f(\n    a,\n)\n",
            [(1, "TDL101")],
            "x = f(  # noqa: TDL101\n    a,\n)\n",
            id="call first line",
        ),
        pytest.param(
            "x = f(\n    a.cuda(),\n)\n",
            [(2, "TDL301")],
            "x = f(\n    a.cuda(),  # noqa: TDL301\n)\n",
            id="call inner",
        ),
        pytest.param(
            'x = f("""\nabc\n""", 1)\n',
            [(1, "TDL101")],
            'x = f("""\nabc\n""", 1)  # noqa: TDL101\n',
            id="multi-line string",
        ),
        pytest.param(
            'x = f(\n    """\nabc""", g(\n    1))\n',
            [(2, "TDL101")],
            'x = f(\n    """\nabc""", g(\n    1))  # noqa: TDL101\n',
            id="string inside a call: the statement's last line",
        ),
        pytest.param(
            "x = 1 + \\\n    f()\n", [(1, "TDL101")], "x = 1 + \\\n    f()  # noqa: TDL101\n", id="backslash"
        ),
        pytest.param(
            "x = f() + \\\n    1 + \\\n    2  # noqa: E501\n",
            [(1, "TDL101"), (2, "TDL301")],
            "x = f() + \\\n    1 + \\\n    2  # noqa: E501, TDL101, TDL301\n",
            id="backslashes into an existing directive",
        ),
        pytest.param(
            "if f(1) and \\\n        g():\n    pass\n",
            [(1, "TDL101")],
            "if f(1) and \\\n        g():  # noqa: TDL101\n    pass\n",
            id="compound statement header",
        ),
        pytest.param("x = f()", [(1, "TDL101")], "x = f()  # noqa: TDL101", id="no newline at the end"),
        pytest.param(
            "x = f()\r\ny = g(\r\n  '''\r\n''')\r\n",
            [(1, "TDL101"), (3, "TDL102")],
            "x = f()  # noqa: TDL101\r\ny = g(\r\n  '''\r\n''')  # noqa: TDL102\r\n",
            id="crlf",
        ),
        pytest.param(
            "x = f()\ry = g()\r", [(2, "TDL101")], "x = f()\ry = g()  # noqa: TDL101\r", id="cr only"
        ),
        pytest.param(
            "x = '\x0c\u2028'; y = f()\nz = 1\n",
            [(1, "TDL101")],
            "x = '\x0c\u2028'; y = f()  # noqa: TDL101\nz = 1\n",
            id="form feed and U+2028 are not line breaks",
        ),
    ],
)
def test_placement(before: str, findings: list[tuple[int, str]], after: str) -> None:
    assert _add(before, findings) == after
    compile(after, "<after>", "exec")
    assert noqa_edits(after, findings) == []  # idempotent


def test_edits_are_line_edits_a_notebook_can_apply() -> None:
    assert noqa_edits("x = f()  # why\n", [(1, "TDL101")]) == [LineEdit(1, 14, 14, "  # noqa: TDL101")]


SOURCE = """\
import torch

state = torch.load("a.pt")
model = torch.load(
    "b.pt",
)
text = torch.load(\"\"\"
c.pt\"\"\")
x = 1 + \\
    torch.load("e.pt")
y = torch.load("d.pt")  # noqa: E501
"""


def _check(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main([*CHECK, "--format", "concise", *map(str, paths)])
    return code, capsys.readouterr().out


def test_add_noqa_then_check_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second, clean = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    first.write_text(SOURCE)
    second.write_text('import torch\nm = torch.load("m.pt")\n')
    clean.write_text("import torch\n")
    assert _check([tmp_path], capsys)[0] == 1
    assert main([*CHECK, "--add-noqa", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "Added 6 noqa directives to 2 files.\n"
    assert first.read_text() == SOURCE.replace('"a.pt")', '"a.pt")  # noqa: TDL101').replace(
        "torch.load(\n", "torch.load(  # noqa: TDL101\n"
    ).replace('c.pt""")', 'c.pt""")  # noqa: TDL101').replace('"e.pt")', '"e.pt")  # noqa: TDL101').replace(
        "# noqa: E501", "# noqa: E501, TDL101"
    )
    assert second.read_text() == 'import torch\nm = torch.load("m.pt")  # noqa: TDL101\n'
    assert clean.read_text() == "import torch\n"
    assert _check([tmp_path], capsys) == (0, "")
    before = {p: p.read_bytes() for p in (first, second, clean)}
    assert main([*CHECK, "--add-noqa", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "Added 0 noqa directives to 0 files.\n"
    assert {p: p.read_bytes() for p in before} == before


def test_flake8_agrees_after_add_noqa(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text(SOURCE)
    assert main(["check", "--isolated", "--no-cache", "--add-noqa", str(tmp_path)]) == 0
    result = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select", "TDL", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert (result.returncode, result.stdout) == (0, "")


def test_singular_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text('import torch\nm = torch.load("m.pt")\n')
    assert main([*CHECK, "--add-noqa", str(path)]) == 0
    assert capsys.readouterr().err == "Added 1 noqa directive to 1 file.\n"
    assert main([*CHECK, "--add-noqa", "--quiet", str(path)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("prefix", "encoding", "newline"),
    [
        (codecs.BOM_UTF8, "utf-8", "\n"),
        (b"# -*- coding: latin-1 -*-\n", "latin-1", "\n"),
        (b"", "utf-8", "\r\n"),
        (b"", "utf-8", "\r"),
    ],
)
def test_bytes_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefix: bytes, encoding: str, newline: str
) -> None:
    path = tmp_path / "m.py"
    body = 'import torch\nname = "café"\nm = torch.load(\n    "m.pt")\n'
    path.write_bytes(prefix + body.replace("\n", newline).encode(encoding))
    assert main([*CHECK, "--add-noqa", str(path)]) == 0
    expected = body.replace("torch.load(\n", "torch.load(  # noqa: TDL101\n")
    assert path.read_bytes() == prefix + expected.replace("\n", newline).encode(encoding)
    capsys.readouterr()
    assert _check([path], capsys) == (0, "")


def test_add_noqa_is_exclusive_with_fixing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text('import torch\nm = torch.load("m.pt")\n')
    for other in ("--fix", "--diff", "--report-unused-noqa"):
        assert main([*CHECK, "--add-noqa", other, str(path)]) == 2
        err = capsys.readouterr().err
        assert err == f"torchdev-lint: error: --add-noqa cannot be combined with {other}\n"
    assert fix_main(["--isolated", "--add-noqa", str(path)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert path.read_text() == 'import torch\nm = torch.load("m.pt")\n'


def test_unreadable_files_are_errors_and_the_rest_is_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, broken = tmp_path / "good.py", tmp_path / "broken.py"
    good.write_text('import torch\nm = torch.load("m.pt")\n')
    broken.write_text("import torch\nm = torch.load(\n")
    assert main([*CHECK, "--add-noqa", str(tmp_path), str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "Added 1 noqa directive to 1 file."
    assert any("broken.py" in line and "syntax error" in line for line in err)
    assert any("missing.py" in line for line in err)
    assert "# noqa: TDL101" in good.read_text()
    assert broken.read_text() == "import torch\nm = torch.load(\n"


def test_read_only_file_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text('import torch\nm = torch.load("m.pt")\n')
    path.chmod(0o444)
    assert main([*CHECK, "--add-noqa", str(path)]) == 2
    assert "read-only" in capsys.readouterr().err
    assert path.read_text() == 'import torch\nm = torch.load("m.pt")\n'


def test_written_atomically_with_permissions_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchdev_lint.noqa_files

    written: list[str] = []
    real = torchdev_lint.noqa_files.write_atomic

    def spy(path: str, data: bytes) -> None:
        written.append(path)
        real(path, data)

    monkeypatch.setattr(torchdev_lint.noqa_files, "write_atomic", spy)
    path = tmp_path / "m.py"
    path.write_text('import torch\nm = torch.load("m.pt")\n')
    path.chmod(0o640)
    assert main([*CHECK, "--add-noqa", "-j", "1", str(tmp_path)]) == 0
    assert written == [str(path)]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]  # no temporary file left


def test_notebook_cells_get_directives_and_nothing_else_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nbformat = pytest.importorskip("nbformat")
    cells = [
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": ["# Title"]},
        {
            "cell_type": "code",
            "execution_count": 1,
            "id": "b",
            "metadata": {},
            "outputs": [],
            "source": ["%matplotlib inline\n", "import torch\n", 'state = torch.load("a.pt")'],
        },
        {
            "cell_type": "code",
            "execution_count": 2,
            "id": "c",
            "metadata": {"tags": ["x"]},
            "outputs": [{"name": "stdout", "output_type": "stream", "text": ["hi\n"]}],
            "source": ["x = torch.load(\n", '    "b.pt",\n', ")  # noqa: E501\n", "print('hi')"],
        },
    ]
    document = {
        "cells": cells,
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "n.ipynb"
    original = json.dumps(document, indent=1) + "\n"
    path.write_text(original)
    assert main([*CHECK, "--add-noqa", str(path)]) == 0
    assert capsys.readouterr().err == "Added 2 noqa directives to 1 file.\n"
    expected = original.replace('torch.load(\\"a.pt\\")"', 'torch.load(\\"a.pt\\")  # noqa: TDL101"').replace(
        '"x = torch.load(\\n"', '"x = torch.load(  # noqa: TDL101\\n"'
    )
    assert path.read_text() == expected
    nbformat.validate(nbformat.read(str(path), as_version=4))
    assert _check([path], capsys) == (0, "")


def test_every_rule_example_is_silenced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torchdev_lint.rule import all_rules

    for rule in all_rules():
        for index, example in enumerate(rule.invalid):
            if not example.settings:
                (tmp_path / f"{rule.code.lower()}_{index}.py").write_text(example.source)
    command = ["check", "--isolated", "--no-cache", "--select", "ALL"]
    assert main([*command, "--format", "concise", str(tmp_path)]) == 1
    capsys.readouterr()
    assert main([*command, "--add-noqa", str(tmp_path)]) == 0
    assert not capsys.readouterr().err.startswith("Added 0 ")
    for path in tmp_path.iterdir():
        compile(path.read_bytes(), str(path), "exec")
    assert main([*command, "--format", "concise", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""
    assert main([*command, "--add-noqa", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "Added 0 noqa directives to 0 files.\n"
    flake8 = [sys.executable, "-m", "flake8", "--isolated", "--select", "TDL", "."]
    result = subprocess.run(flake8, cwd=tmp_path, capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "")


def test_files_the_cache_knows_clean_are_not_checked_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchdev_lint.noqa_files

    checked: list[str] = []
    real = torchdev_lint.noqa_files.check_source

    def spy(path: str, *args: Any, **kwargs: Any) -> Any:
        checked.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(torchdev_lint.noqa_files, "check_source", spy)
    (tmp_path / "clean.py").write_text("import torch\nx = torch.zeros(1)\n")
    (tmp_path / "dirty.py").write_text('import torch\nm = torch.load("m.pt")\n')
    command = ["check", "--isolated", "--select", "TDL101", "-j", "1", "--cache-dir", str(tmp_path / "cache")]
    assert main([*command, str(tmp_path / "clean.py"), str(tmp_path / "dirty.py")]) == 1
    assert main([*command, "--add-noqa", str(tmp_path / "clean.py"), str(tmp_path / "dirty.py")]) == 0
    assert checked == ["dirty.py"]
    assert main([*command, "--add-noqa", str(tmp_path / "clean.py"), str(tmp_path / "dirty.py")]) == 0
    assert checked == ["dirty.py", "dirty.py"]  # its new content was never checked by `check`
    assert main([*command, "--add-noqa", str(tmp_path / "clean.py"), str(tmp_path / "dirty.py")]) == 0
    assert checked == ["dirty.py", "dirty.py"]  # found clean above, and cached
    capsys.readouterr()
