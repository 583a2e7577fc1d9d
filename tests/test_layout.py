"""Every source file of the package reads in one sitting (issue 13: no file over 600 lines).

A file that grows past the limit is split by concern (ARCHITECTURE.md), not
trimmed by squeezing lines; this test names every file over it at once.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torchdev_lint"
LIMIT = 600


def _too_long(folder: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(folder.parent)}: {lines} lines")
    return found


def test_no_package_file_is_over_the_limit() -> None:
    assert _too_long(PACKAGE, LIMIT) == []


def test_the_check_names_a_file_over_the_limit(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "short.py").write_text("x = 1\n" * 3)
    (package / "long.py").write_text("x = 1\n" * 4)
    assert _too_long(package, 3) == ["pkg/long.py: 4 lines"]
