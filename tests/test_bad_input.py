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
