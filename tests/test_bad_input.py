"""Bad input: one clear line on stderr naming the file, other files still processed, exit 2.

Fixed files keep their encoding, BOM, line endings and permissions, and are
written atomically.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cli_inputs import BAD, FIXED, errors, make_tree

from torchdev_lint.cli import fix_main, main
from torchdev_lint.files import write_atomic


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path)


def _check_other_files_processed(tree: Path, out: str) -> None:
    assert f"{tree / 'a_good.py'}:3:9: TDL101" in out
    assert f"{tree / 'z_good.py'}:3:9: TDL101" in out


def test_syntax_error(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tree / "m_broken.py"
    broken.write_text('import torch\nx = torch.load("a.pt"\n')
    code, out, err = run(capsys, "check", "--format", "concise", str(tree))
    assert code == 2
    _check_other_files_processed(tree, out)
    (line,) = errors(err)
    assert str(broken) in line and "syntax error at line 2" in line and "never closed" in line


def test_syntax_error_file_is_never_touched_by_fix(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tree / "m_broken.py"
    content = b'import torch\nx = torch.load("a.pt"\n'
    broken.write_bytes(content)
    code, _, err = run(capsys, "check", "--fix", str(tree))
    assert code == 2
    assert broken.read_bytes() == content
    assert (tree / "a_good.py").read_text() == FIXED
    assert (tree / "z_good.py").read_text() == FIXED
    assert len(errors(err)) == 1


def test_non_utf8_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latin = tree / "m_latin.py"
    latin.write_bytes(b'import torch\nname = "caf\xe9"\nx = torch.load(name)\n')
    code, out, err = run(capsys, "check", "--format", "concise", str(tree))
    assert code == 2
    _check_other_files_processed(tree, out)
    (line,) = errors(err)
    assert str(latin) in line and "decode" in line


def test_empty_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "m_empty.py").write_bytes(b"")
    (tree / "m_blank.py").write_bytes(b"\n\n")
    code, out, err = run(capsys, "check", "--format", "concise", str(tree))
    assert code == 1 and errors(err) == []
    _check_other_files_processed(tree, out)
    assert run(capsys, "check", str(tree / "m_empty.py"))[0] == 0


def test_empty_file_with_torch_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that passes the cheap text filter but holds only a comment parses fine."""
    (tmp_path / "c.py").write_text("# torch\n")
    assert run(capsys, "check", "--select", "ALL", str(tmp_path))[0] == 0


def test_missing_path(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tree / "nope.py"
    code, out, err = run(capsys, "check", "--format", "concise", str(missing), str(tree))
    assert code == 2
    _check_other_files_processed(tree, out)
    (line,) = errors(err)
    assert str(missing) in line and "no such file" in line


def test_nul_byte(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "m_nul.py").write_bytes(b"import torch\x00\n")
    code, out, err = run(capsys, "check", "--format", "concise", str(tree))
    assert code == 2
    _check_other_files_processed(tree, out)
    assert "m_nul.py" in errors(err)[0]


def test_read_only_file_under_fix(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tree / "m_locked.py"
    locked.write_text(BAD)
    locked.chmod(0o444)
    code, out, err = run(capsys, "check", "--fix", "--format", "concise", str(tree))
    assert code == 2
    (line,) = errors(err)
    assert str(locked) in line and "read-only" in line
    assert locked.read_text() == BAD
    assert stat.S_IMODE(locked.stat().st_mode) == 0o444
    assert (tree / "a_good.py").read_text() == FIXED
    assert (tree / "z_good.py").read_text() == FIXED
    # The finding in the file that could not be written is still reported.
    assert out.splitlines() == [f"{locked}:3:9: TDL101 " + out.split(" TDL101 ", 1)[1].splitlines()[0]]


def test_read_only_file_under_torchdev_fix(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tree / "m_locked.py"
    locked.write_text(BAD)
    locked.chmod(0o444)
    code = fix_main([str(tree)])
    _, err = capsys.readouterr()
    assert code == 2
    assert "Fixed 2 findings in 2 files; 1 remain" in err
    assert locked.read_text() == BAD


def test_read_only_file_is_fine_without_fix(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tree / "m_locked.py"
    locked.write_text(BAD)
    locked.chmod(0o444)
    assert run(capsys, "check", str(tree))[0] == 1


def test_diff_never_writes(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p: p.read_bytes() for p in tree.iterdir()}
    run(capsys, "check", "--diff", str(tree))
    assert {p: p.read_bytes() for p in tree.iterdir()} == before


@pytest.mark.parametrize(
    ("original", "fixed"),
    [
        pytest.param(
            b'# -*- coding: latin-1 -*-\nimport torch\nname = "caf\xe9"\nx = torch.load(name)\n',
            b'# -*- coding: latin-1 -*-\nimport torch\nname = "caf\xe9"\nx = torch.load(name, map_location="cpu")\n',
            id="latin-1-cookie",
        ),
        pytest.param(
            b'\xef\xbb\xbfimport torch\nname = "caf\xc3\xa9"\nx = torch.load(name)\n',
            b'\xef\xbb\xbfimport torch\nname = "caf\xc3\xa9"\nx = torch.load(name, map_location="cpu")\n',
            id="utf-8-bom",
        ),
        pytest.param(
            b"import torch\r\n\r\nx = torch.load(\r\n    'a.pt',\r\n)\r\n",
            b"import torch\r\n\r\nx = torch.load(\r\n    'a.pt',\r\n    map_location='cpu',\r\n)\r\n",
            id="crlf",
        ),
        pytest.param(
            b"import torch\nx = torch.load('a.pt')",
            b"import torch\nx = torch.load('a.pt', map_location='cpu')",
            id="no-final-newline",
        ),
    ],
)
def test_fix_keeps_encoding_bom_newlines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], original: bytes, fixed: bytes
) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(original)
    path.chmod(0o751)
    code, _, err = run(capsys, "check", "--fix", str(path))
    assert code == 0, err
    assert path.read_bytes() == fixed
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert os.listdir(tmp_path) == ["m.py"], "no temporary file left behind"
    # Fixing the fixed file changes nothing.
    assert run(capsys, "check", "--fix", str(path))[0] == 0
    assert path.read_bytes() == fixed


def test_atomic_write_cleans_up_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.py"
    path.write_text("old\n")

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(Exception, match="No space left on device"):
        write_atomic(str(path), b"new\n")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["m.py"]


def test_symlinked_directory_loop_terminates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text(BAD)
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    code, out, _ = run(capsys, "check", "--format", "concise", str(tmp_path))
    assert code == 1 and out.count("TDL101") == 1


@pytest.mark.parametrize("version", ["banana", "2.x", "", "two.six"])
def test_bad_target_torch_version_is_a_usage_error(
    tree: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["check", "--target-torch-version", version, str(tree)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"invalid torch version {version!r}: expected MAJOR.MINOR" in err


# Usage errors: one line naming the value and the form expected, exit 2, nothing checked ------------

OPTION_ERRORS = [
    (["--select", "TDL9"], "unknown rule selector 'TDL9': expected a rule code or prefix"),
    (["--select", "TDL1O1"], "did you mean 'TDL101'?"),
    (["--ignore", "XYZ"], "unknown rule selector 'XYZ'"),
    (["--extend-select", "TDL99"], "unknown rule selector 'TDL99'"),
    (["--jobs", "0"], "argument -j/--jobs: expected a number of processes (1 or more), got '0'"),
    (["-j", "many"], "argument -j/--jobs: expected a number of processes (1 or more), got 'many'"),
    (["--format", "xml"], "argument --format: invalid choice: 'xml' (choose from"),
    (["--target-torch-version", "2.x"], "invalid torch version '2.x': expected MAJOR.MINOR, e.g. 2.6"),
    (["--target-torch-version", "2"], "invalid torch version '2': expected MAJOR.MINOR"),
    (["--output-file", "{tmp}/missing/report.txt"], "--output-file '{tmp}/missing/report.txt': folder"),
    (["--output-file", "{tmp}"], "is a directory"),
    (["--config", "{tmp}/nowhere.toml"], "nowhere.toml: cannot read: No such file or directory"),
    (["--bogus"], "unrecognized arguments: --bogus"),
]


def _one_error_line(err: str, expected: str) -> None:
    assert "Traceback" not in err and "usage:" not in err
    assert err.count("\n") == 1, err
    assert expected in err and "error:" in err


@pytest.mark.parametrize(
    ("argv", "expected"), OPTION_ERRORS, ids=[" ".join(argv) for argv, _ in OPTION_ERRORS]
)
def test_bad_option_is_a_one_line_usage_error(
    tree: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    argv = [arg.replace("{tmp}", str(tree)) for arg in argv]
    try:
        code = main(["check", *argv, str(tree)])
    except SystemExit as stopped:  # argparse's own errors
        code = stopped.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    _one_error_line(err, expected.replace("{tmp}", str(tree)))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["rule", "TDL101", "--format", "html"],
            "torchdev-lint rule: error: argument --format: invalid choice",
        ),
        (["rule"], "torchdev-lint rule: error: the following arguments are required: RULE"),
        (["lint"], "torchdev-lint: error: argument command: invalid choice: 'lint'"),
    ],
)
def test_bad_command_line_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    _one_error_line(capsys.readouterr().err, expected)


CONFIG_ERRORS = [
    ('select = ["TDL9X"]', "select: unknown rule selector 'TDL9X': expected a rule code or prefix"),
    ('select = "TDL1"', 'select = "TDL1": expected a list of strings, e.g. ["TDL1", "TDL201"]'),
    ("ignore = [1]", "ignore = [1]: expected a list of strings"),
    ('extend-select = ["TDL1O1"]', "did you mean 'TDL101'?"),
    ('exclude = "build"', 'exclude = "build": expected a list of strings'),
    ("extend-exclude = true", "extend-exclude = true: expected a list of strings"),
    ('per-file-ignores = ["tests/*"]', 'per-file-ignores = ["tests/*"]: expected a table of glob = [codes]'),
    (
        'per-file-ignores = { "t/*" = "TDL301" }',
        "per-file-ignores 't/*' = \"TDL301\": expected a list of codes",
    ),
    ('per-file-ignores = { "t/*" = ["TDL3O1"] }', "per-file-ignores 't/*': unknown rule selector 'TDL3O1'"),
    ('target-torch-version = "banana"', "invalid torch version 'banana': expected MAJOR.MINOR"),
    (
        "target-torch-version = 2.10",
        'target-torch-version = 2.1: expected a quoted "MAJOR.MINOR", e.g. "2.6"',
    ),
    ('unsafe-fixes = "yes"', 'unsafe-fixes = "yes": expected true or false'),
    ("unsafe-fixes = 1", "unsafe-fixes = 1: expected true or false"),
    ('device-policy = "gpu"', "invalid device policy 'gpu': expected one of 'portable', 'cuda-only'"),
    ('selectt = ["TDL1"]', "unknown key 'selectt' (did you mean 'select'?)"),
    ("select = [", "invalid TOML"),
]


@pytest.mark.parametrize(("body", "expected"), CONFIG_ERRORS, ids=[body for body, _ in CONFIG_ERRORS])
def test_bad_config_value_is_a_one_line_usage_error(
    tree: Path, capsys: pytest.CaptureFixture[str], body: str, expected: str
) -> None:
    (tree / "pyproject.toml").write_text(f"[tool.torchdev-lint]\n{body}\n")
    code, out, err = run(capsys, "check", str(tree))
    assert code == 2 and out == ""
    _one_error_line(err, expected)
    assert str(tree / "pyproject.toml") in err


def test_unusable_cache_dir_is_a_warning(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tree / "not_a_folder"
    blocker.write_text("")
    code, out, err = run(
        capsys, "check", "--format", "concise", "--cache-dir", str(blocker / "cache"), str(tree)
    )
    assert code == 1
    _check_other_files_processed(tree, out)
    assert f"torchdev-lint: warning: cannot create or write the cache folder '{blocker / 'cache'}'" in err


# Nothing to check; a misspelt table -------------------------------------------------------------


@pytest.mark.parametrize("content", [{}, {"README.md": "# x\n", "data.json": "{}"}])
def test_no_python_files_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: dict[str, str]
) -> None:
    for name, text in content.items():
        (tmp_path / name).write_text(text)
    code, out, err = run(capsys, "check", str(tmp_path))
    assert (code, out) == (0, "")
    assert err == f"torchdev-lint: warning: no Python files found under {tmp_path}\n"


def test_misspelt_table_is_warned_about(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pyproject = tree / "pyproject.toml"
    pyproject.write_text('[tool.torchdev_lint]\nselect = ["TDL9X"]\n')
    code, out, err = run(capsys, "check", "--format", "concise", str(tree))
    assert code == 1  # the table is not read: its bad code is no error, the defaults apply
    _check_other_files_processed(tree, out)
    assert err.splitlines()[0] == (
        f"torchdev-lint: warning: {pyproject}: [tool.torchdev_lint] is ignored: "
        "the table is spelt [tool.torchdev-lint]"
    )
    code, _, err = run(capsys, "check", "--config", str(pyproject), str(tree))
    assert code == 2
    _one_error_line(err, "no [tool.torchdev-lint] table ([tool.torchdev_lint] is misspelt)")
