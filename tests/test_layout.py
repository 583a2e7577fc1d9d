"""Every source file of the package reads in one sitting (issue 13: no file over 600 lines).

A file that grows past the limit is split by concern (ARCHITECTURE.md), not
trimmed by squeezing lines; this test names every file over it at once. A rule
module holds everything about its rule, its must-flag and must-not-flag examples
too (`invalid`, `valid`, `projects`): those are test data, read case by case, so
the lines they take do not count against the module.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torchdev_lint"
LIMIT = 600
_EXAMPLES = frozenset({"invalid", "valid", "projects"})


def _example_lines(tree: ast.Module) -> int:
    """Lines of the example tuples assigned in the body of a module's classes."""
    found = 0
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if (
                    isinstance(statement, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id in _EXAMPLES for t in statement.targets)
                    and statement.end_lineno is not None
                ):
                    found += statement.end_lineno - statement.lineno + 1
    return found


def _too_long(folder: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if path.parent.name == "rules":
            lines -= _example_lines(ast.parse(text))
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


def test_a_rule_modules_examples_do_not_count(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    rule = "class R:\n    code = 'X'\n    valid = (\n        'a',\n        'b',\n    )\n"
    (rules / "r.py").write_text(rule)
    (tmp_path / "other.py").write_text(rule)
    assert _too_long(tmp_path, 3) == [f"{tmp_path.name}/other.py: 6 lines"]
