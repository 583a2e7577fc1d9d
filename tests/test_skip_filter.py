"""Each rule's `triggers` are a necessary condition: the text filter never skips a file with a finding.

Every rule runs alone (so another rule's trigger cannot hide a missing one)
and all together, over every rule's examples, the shipped fixtures and the
test fixtures, with and without the filter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_module, check_source, could_match, parse
from torchdev_lint.rule import all_rules

ROOT = Path(__file__).resolve().parents[1]


def _corpus() -> list[tuple[str, str, Settings]]:
    """(name, source, settings) of every example and fixture."""
    found: list[tuple[str, str, Settings]] = []
    for rule in all_rules():
        for index, example in enumerate((*rule.invalid, *rule.valid)):
            settings = Settings.from_mapping(dict(example.settings))
            found.append((f"{rule.code}[{index}]", example.source, settings))
    for folder in ("fixtures", "tests/verify_fixtures"):
        for path in sorted((ROOT / folder).glob("*.py")):
            found.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"), Settings()))
    return found


CORPUS = _corpus()


def test_the_corpus_has_findings_for_every_rule() -> None:
    flagged = {
        d.code
        for name, source, settings in CORPUS
        for d in check_source(name, source, all_rules(), settings, skip_filter=False).diagnostics
    }
    assert flagged == {rule.code for rule in all_rules()}


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.code)
def test_triggers_are_necessary(rule: type) -> None:
    for name, source, settings in CORPUS:
        try:
            module = parse(name, source)
        except SourceError:
            continue
        found = check_module(name, module, [rule], settings).diagnostics
        if found:
            assert could_match(source, [rule]), f"{rule.code} fires in {name} without any of {rule.triggers}"


def test_all_rules_with_and_without_filter_agree() -> None:
    rules = all_rules()
    for name, source, settings in CORPUS:
        filtered = check_source(name, source, rules, settings).diagnostics
        unfiltered = check_source(name, source, rules, settings, skip_filter=False)
        assert filtered == unfiltered.diagnostics, name
