"""The rule catalog says what the rules say, so runs the cache answers need not import them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchdev_lint import catalog
from torchdev_lint.config import select_codes, select_rules
from torchdev_lint.rule import all_rules

ROOT = Path(__file__).resolve().parents[1]


def test_catalog_matches_the_rules() -> None:
    """If this fails, run `python scripts/gen_catalog.py` and commit torchdev_lint/catalog.py."""
    facts = [(r.code, r.name, r.default_enabled, r.fix_availability, r.__module__) for r in all_rules()]
    table = [
        (i.code, i.name, i.default_enabled, i.fix_availability, f"torchdev_lint.rules.{i.module}")
        for i in catalog.RULES
    ]
    assert table == facts
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_catalog.py"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.code)
def test_page_from_source_is_the_documentation(rule: type) -> None:
    info = catalog.find(rule.code)
    assert info is not None and catalog.find(rule.name) == info
    assert catalog.page_from_source(info) == rule.documentation()


@pytest.mark.parametrize(
    ("select", "ignore", "extend"),
    [(None, [], []), (["ALL"], [], []), (["TDL2"], ["TDL203"], ["TDL311"]), (["TDL1"], [], ["TDL206"])],
)
def test_selection_by_catalog_equals_selection_by_rules(
    select: list[str] | None, ignore: list[str], extend: list[str]
) -> None:
    assert select_codes(select, ignore, extend) == [r.code for r in select_rules(select, ignore, extend)]


def test_light_modules_import_no_libcst() -> None:
    """The CLI, configuration, cache and report modules load without LibCST (and the rules)."""
    script = (
        "import sys\n"
        "import torchdev_lint.cli, torchdev_lint.rule, torchdev_lint.cache, torchdev_lint.report\n"
        "heavy = sorted(m for m in sys.modules if m == 'libcst' or m.startswith('torchdev_lint.rules.'))\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
