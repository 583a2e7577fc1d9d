"""Fix edits, positions and `# noqa` share one notion of a line: Python's (`\\n`, `\\r\\n`, `\\r`)."""

from __future__ import annotations

import pytest

from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import Edit
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import add_edits, apply_fixes, tidy_for
from torchdev_lint.positions import LineIndex
from torchdev_lint.rule import Invalid, Rule, all_rules, rules_by_code


def apply_edits(text: str, edits: tuple[Edit, ...]) -> str:
    """Apply 1-based, end-exclusive edits to `text`, last first."""
    lines = LineIndex(text)
    for edit in sorted(edits, key=lambda e: (e.line, e.column), reverse=True):
        start = lines.offset((edit.line, edit.column - 1))
        end = lines.offset((edit.end_line, edit.end_column - 1))
        text = text[:start] + edit.content + text[end:]
    return text


def _examples() -> list[object]:
    return [
        pytest.param(rule, example, id=f"{rule.code}-{index}")
        for rule in all_rules()
        for index, example in enumerate(rule.invalid)
        if example.fixed is not None
    ]


@pytest.mark.parametrize(("rule", "example"), _examples())
def test_each_fix_edit_makes_exactly_the_fix(rule: type[Rule], example: Invalid) -> None:
    source = example.source
    result = check_source("example.py", source, [rule], Settings.from_mapping(dict(example.settings)))
    assert result.module is not None
    add_edits(result)
    for finding, diagnostic in zip(result.findings, result.diagnostics, strict=True):
        if finding.fix is None:
            continue
        assert diagnostic.fix is not None and diagnostic.fix.edits
        expected = apply_fixes(result.module, [finding.fix], tidy_for(result)).code
        assert apply_edits(source, diagnostic.fix.edits) == expected


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_edits_point_at_the_right_line_whatever_the_line_breaks(newline: str) -> None:
    source = newline.join(["import torch", "", "x = 1", "state = torch.load(p)", ""])
    result = check_source("example.py", source, [rules_by_code()["TDL101"]])
    add_edits(result)
    (diagnostic,) = result.diagnostics
    assert diagnostic.line == 4
    assert diagnostic.fix is not None
    assert all(edit.line == 4 for edit in diagnostic.fix.edits)
    fixed = apply_edits(source, diagnostic.fix.edits)
    assert fixed.split(newline)[3].startswith("state = torch.load(p, map_location=")


@pytest.mark.parametrize("separator", ["\x0c", "\u2028", "\x1c", "\x85"])
def test_noqa_applies_to_its_own_line_after_a_non_python_line_break(separator: str) -> None:
    """str.splitlines() breaks lines at these characters; Python's tokenizer does not."""
    source = f"import torch\nx = 1  # {separator} noqa: TDL101\nstate = torch.load(p)\n"
    code = rules_by_code()["TDL101"]
    (diagnostic,) = check_source("example.py", source, [code]).diagnostics
    assert diagnostic.line == 3 and not diagnostic.suppressed
    silenced = f"import torch\nx = '{separator}'; state = torch.load(p)  # noqa: TDL101\n"
    (diagnostic,) = check_source("example.py", silenced, [code]).diagnostics
    assert diagnostic.line == 2 and diagnostic.suppressed


def test_line_index_follows_python_line_breaks() -> None:
    lines = LineIndex("a\rb\r\nc\x0cd\u2028e\nf")
    assert [lines.line(n) for n in range(1, 5)] == ["a", "b", "c\x0cd\u2028e", "f"]
    assert lines.point(lines.offset((3, 2))) == (3, 2)
    assert lines.point(0) == (1, 0) and lines.point(2) == (2, 0)
