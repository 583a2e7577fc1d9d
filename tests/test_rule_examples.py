"""Every rule's own examples, run as tests: adding a rule adds its tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import findings, write_files

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import fix_source
from torchdev_lint.rule import DOC_SECTIONS, Fix, Invalid, ProjectExample, Rule, Valid, all_rules


def _cases(kind: str) -> list[object]:
    params = []
    for rule in all_rules():
        for index, example in enumerate(getattr(rule, kind)):
            params.append(pytest.param(rule, example, id=f"{rule.code}-{kind}-{index}"))
    return params


def _sentence_start(message: str) -> bool:
    """Messages read as sentences: a capital letter, or code in backticks."""
    return message[:1].isupper() or message.startswith("`")


def _settings(example: Invalid | Valid) -> Settings:
    return Settings.from_mapping(dict(example.settings))


@pytest.mark.parametrize(("rule", "example"), _cases("invalid"))
def test_invalid_example_is_flagged_and_fixed(rule: type[Rule], example: Invalid) -> None:
    settings = _settings(example)
    source = example.source.encode()
    result = check_source("example.py", source, [rule], settings, skip_filter=False)
    assert [(d.code, d.line) for d in result.diagnostics] == [(rule.code, line) for line in example.lines]
    assert all(_sentence_start(d.message) for d in result.diagnostics), "a message starts with a capital"
    outcome = fix_source("example.py", source, [rule], settings, unsafe=True)
    expected = example.fixed_source if example.fixed_source is not None else example.source
    assert outcome.source.decode() == expected
    again = fix_source("example.py", outcome.source, [rule], settings, unsafe=True)
    assert again.source == outcome.source, "fixing twice must equal fixing once"
    if example.fixed_source is not None:
        compile(outcome.source, "fixed.py", "exec")
        assert all(d.fix is not None for d in result.diagnostics)


@pytest.mark.parametrize(("rule", "example"), _cases("invalid"))
def test_an_unsafe_fix_says_what_may_change(rule: type[Rule], example: Invalid) -> None:
    """Issue 24: an unsafe fix's message ends with `(unsafe: <what may change at this site>)`;
    a safe fix's message says nothing of the kind."""
    source = example.source.encode()
    result = check_source("example.py", source, [rule], _settings(example), skip_filter=False)
    for diagnostic in result.diagnostics:
        fix = diagnostic.fix
        if fix is None:
            continue
        does, unsafe, risk = fix.message.partition(" (unsafe: ")
        if fix.safety == "safe":
            assert "unsafe" not in fix.message, f"{rule.code} line {diagnostic.line}: {fix.message}"
            continue
        assert unsafe and does and "(unsafe" not in does, f"{rule.code} line {diagnostic.line}: {fix.message}"
        assert risk.endswith(")") and len(risk) > 20, f"{rule.code} line {diagnostic.line}: {fix.message}"


def test_every_rule_with_unsafe_fixes_shows_one_in_its_examples() -> None:
    """So that the test above sees every rule's unsafe fix at least once: a rule whose docs
    call its fix unsafe somewhere has an example that gets one."""
    missing = []
    for rule in all_rules():
        if rule.fix_availability == "never" or "unsafe" not in rule.docs.split("## Fix safety", 1)[1]:
            continue
        safeties = {
            diagnostic.fix.safety
            for example in rule.invalid
            for diagnostic in check_source(
                "example.py", example.source.encode(), [rule], _settings(example), skip_filter=False
            ).diagnostics
            if diagnostic.fix is not None
        }
        if "unsafe" not in safeties:
            missing.append(rule.code)
    assert missing == []


def test_the_fix_contract_asks_a_risk_of_unsafe_fixes_only() -> None:
    assert Fix("unsafe", "Do it", {}, "values change").reported_message == "Do it (unsafe: values change)"
    assert Fix("safe", "Do it", {}).reported_message == "Do it"
    assert Fix.judged("Do it", {}, None).safety == "safe"
    assert Fix.judged("Do it", {}, "values change").safety == "unsafe"
    for bad in (("unsafe", None), ("unsafe", " "), ("safe", "values change")):
        with pytest.raises(ValueError, match="risk"):
            Fix(bad[0], "Do it", {}, bad[1])  # type: ignore[arg-type]


@pytest.mark.parametrize(("rule", "example"), _cases("valid"))
def test_valid_example_is_silent(rule: type[Rule], example: Valid) -> None:
    result = check_source(
        "example.py", example.source.encode(), [rule], _settings(example), skip_filter=False
    )
    assert [(d.code, d.line) for d in result.diagnostics] == []


@pytest.mark.parametrize(("rule", "example"), _cases("projects"))
def test_project_example_is_flagged_where_it_says(
    tmp_path: Path, rule: type[Rule], example: ProjectExample
) -> None:
    write_files(tmp_path, example.sources)
    assert findings(tmp_path, [rule.code]) == [f"{where} {rule.code}" for where in example.findings]


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_is_documented_and_has_examples(rule: type[Rule]) -> None:
    docs = rule.documentation()
    for section in DOC_SECTIONS:
        assert f"## {section}" in docs, f"{rule.code} docs lack '{section}'"
    assert rule.invalid and rule.valid
    assert rule.code.startswith("TDL") and rule.name == rule.name.lower()
    camel_case = "".join(part.capitalize() for part in rule.name.split("-"))
    assert rule.__name__ == camel_case, "a rule class is named after its rule, in CamelCase"
    assert _sentence_start(rule.message), "a message starts with a capital"
    fixed = [example.fixed is not None for example in rule.invalid]
    assert (rule.fix_availability == "never") == (not any(fixed))
    if rule.fix_availability == "always":
        assert all(fixed), f"{rule.code} says a fix is always available but an example has none"


def test_codes_and_names_are_unique() -> None:
    rules = all_rules()
    assert len({r.code for r in rules}) == len(rules)
    assert len({r.name for r in rules}) == len(rules)
