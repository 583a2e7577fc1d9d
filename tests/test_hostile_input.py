"""Hostile and odd input not covered by test_bad_input.py: one clear error line naming the file,
the other files still processed, exit code 0 clean / 1 findings / 2 a file could not be read,
parsed or written; never a traceback.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
from cli_inputs import BAD, FIXED, errors, make_tree

from torchdev_lint.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", "--no-cache", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path)


def assert_one_error_others_processed(tree: Path, out: str, err: str, bad: Path, words: str) -> None:
    (line,) = errors(err)
    assert str(bad) in line and words in line, line
    assert f"{tree / 'a_good.py'}:3:9: TDL101" in out
    assert f"{tree / 'z_good.py'}:3:9: TDL101" in out


@pytest.mark.parametrize(
    ("name", "text"),
    [
        pytest.param(
            "m_parens.py", "import torch\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n", id="parens-5000"
        ),
        pytest.param("m_lists.py", "import torch\nx = " + "[" * 3000 + "]" * 3000 + "\n", id="lists-3000"),
        pytest.param("m_sum.py", "import torch\nx = " + "+".join(["1"] * 100_000) + "\n", id="sum-100000"),
        pytest.param("m_unary.py", "import torch\nx = " + "-" * 20_000 + "1\n", id="unary-20000"),
        pytest.param("m_attr.py", "import torch\nx = torch" + ".a" * 10_000 + "\n", id="attribute-10000"),
    ],
)
def test_too_deeply_nested_is_an_error_not_a_crash(
    tree: Path, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    """LibCST's native parser dies (SIGSEGV) on such input; it must be refused cleanly first."""
    bad = tree / name
    bad.write_text(text)
    code, out, err = run(capsys, "--format", "concise", str(tree))
    assert code == 2
    assert_one_error_others_processed(tree, out, err, bad, "too deeply nested")
    assert run(capsys, "--fix", str(tree))[0] == 2
    assert bad.read_text() == text and (tree / "a_good.py").read_text() == FIXED


def test_nested_but_valid_python_is_fixed_or_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deep code that Python itself accepts: fixed, or one clear error if LibCST cannot cope."""
    path = tmp_path / "deep.py"
    path.write_text(BAD + "y = " + "-" * 900 + "torch.load('b')\nz = " + "(" * 150 + "1" + ")" * 150 + "\n")
    code, _, err = run(capsys, "--fix", str(path))
    assert code in (0, 2)
    if code == 2:
        assert "too deeply nested" in errors(err)[0]


def test_large_generated_file_is_memory_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.py"
    blocks = [f"def f{i}(x):\n    y = torch.zeros(3)\n    return x + y  # {i}\n\n\n" for i in range(10_000)]
    path.write_text("import torch\n\n" + "".join(blocks) + BAD)
    assert len(path.read_text().splitlines()) >= 50_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, out, _ = run(capsys, "--fix", "--format", "concise", str(path))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert code == 0, out
    assert path.read_text().endswith(FIXED.splitlines()[-1] + "\n")
    assert grown_mib < 2048, grown_mib


@pytest.mark.parametrize(
    ("original", "fixed"),
    [
        pytest.param(
            b"import torch\r\nx = 1\ny = torch.load('a.pt')\r\nz = 2\n",
            b"import torch\r\nx = 1\ny = torch.load('a.pt', map_location='cpu')\r\nz = 2\n",
            id="mixed-line-endings",
        ),
        pytest.param(
            b"import torch\nif True:\n\tfor i in range(2):\n\t\tx = torch.load(\n\t\t\t'a.pt')\n",
            b"import torch\nif True:\n\tfor i in range(2):\n\t\tx = torch.load(\n\t\t\t'a.pt', map_location='cpu')\n",
            id="tabs",
        ),
        pytest.param(
            b"# vim: set fileencoding=latin-1 :\nimport torch\n# \xe9t\xe9\nx = torch.load('\xe0.pt')\n",
            b"# vim: set fileencoding=latin-1 :\nimport torch\n# \xe9t\xe9\nx = torch.load('\xe0.pt', map_location='cpu')\n",
            id="latin-1-vim-cookie",
        ),
    ],
)
def test_fix_keeps_odd_layouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], original: bytes, fixed: bytes
) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(original)
    code, _, err = run(capsys, "--fix", str(path))
    assert code == 0, err
    assert path.read_bytes() == fixed
    assert run(capsys, "--fix", str(path))[0] == 0 and path.read_bytes() == fixed


@pytest.mark.parametrize(
    "original",
    [b"import torch\rx = torch.load('a.pt')\r", b"import torch\n\x0cx = torch.load('a.pt')\n"],
    ids=["old-mac-cr", "form-feed"],
)
def test_file_libcst_cannot_reproduce_is_not_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], original: bytes
) -> None:
    """LibCST loses a final lone CR and form feeds: such files are refused, never half-rewritten."""
    path = tmp_path / "m.py"
    path.write_bytes(original)
    code, _, err = run(capsys, "--fix", str(path))
    (line,) = errors(err)
    assert code == 2 and str(path) in line and "cannot fix" in line
    assert path.read_bytes() == original
    assert run(capsys, str(path))[0] == 1  # checking still reports the finding


def test_file_vanishing_between_listing_and_reading(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ghost = tree / "m_ghost.py"
    ghost.write_text(BAD)
    import torchdev_lint.files as files

    discover = files.discover

    def discover_then_delete(*args: object, **kwargs: object) -> object:
        found = discover(*args, **kwargs)  # type: ignore[arg-type]
        ghost.unlink()
        return found

    monkeypatch.setattr("torchdev_lint.cli.discover", discover_then_delete)
    code, out, err = run(capsys, "--format", "concise", str(tree))
    assert code == 2
    assert_one_error_others_processed(tree, out, err, ghost, "vanished")


def test_unreadable_file(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """chmod 000 does not stop root, so opening fails through a patched os.open instead."""
    locked = tree / "m_locked.py"
    locked.write_text(BAD)
    real = os.open

    def os_open(path: str, flags: int, *args: int, **kwargs: object) -> int:
        if os.fspath(path).endswith(locked.name):
            raise PermissionError(13, "Permission denied", path)
        return real(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", os_open)
    code, out, err = run(capsys, "--format", "concise", str(tree))
    assert code == 2
    assert_one_error_others_processed(tree, out, err, locked, "Permission denied")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_among_sources_is_not_read(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO named like a source file would block a reader forever; the walk must not hang on it."""
    os.mkfifo(tree / "m_pipe.py")
    code, out, err = run(capsys, "--format", "concise", str(tree))
    assert code == 2
    assert_one_error_others_processed(tree, out, err, tree / "m_pipe.py", "not a regular file")


@pytest.mark.parametrize("name", ["with space.py", "caf\u00e9 \u5b66\u4e60.py", "-dash.py"])
def test_odd_path_names(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    folder = tmp_path / "dir with sp\u00e4ce"
    folder.mkdir()
    path = folder / name
    path.write_text(BAD)
    code, out, _ = run(capsys, "--format", "concise", str(tmp_path))
    assert code == 1 and f"{path}:3:9: TDL101" in out
    assert run(capsys, "--fix", "--", str(path))[0] == 0
    assert path.read_text() == FIXED


def test_non_python_file_named_explicitly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Named explicitly, any file is checked (as flake8 does); found by a walk, only .py/.pyi are."""
    script = tmp_path / "train"
    script.write_text(BAD)
    notes = tmp_path / "notes.txt"
    notes.write_text("torch.load is nice, ( unbalanced\n")
    code, out, err = run(capsys, "--format", "concise", str(script))
    assert code == 1 and f"{script}:3:9: TDL101" in out
    code, out, err = run(capsys, "--format", "concise", str(tmp_path))
    assert code == 0 and out == "" and errors(err) == []
    code, _, err = run(capsys, "--format", "concise", str(notes))
    (line,) = errors(err)
    assert code == 2 and str(notes) in line and "syntax error" in line
