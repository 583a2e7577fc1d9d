"""The engine runs only the rules that can fire in a file (issue 16 item 14: the flake8 plugin's cost).

A rule none of whose `triggers` occurs in the text finds nothing there, so it is not run; the
text filter is per rule, not per file (before, a file naming `torch` ran every selected rule).
Triggers are matched however Python lets the code space them; project facts that can make a
rule fire without its trigger text (`fact_triggers`) run it whatever the text. That the
filtered check reports what the unfiltered one does on every example and fixture is
`tests/test_skip_filter.py`'s `test_all_rules_with_and_without_filter_agree`.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdev_lint.analysis.project.file_facts import FileFacts
from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source, could_match, matching_rules
from torchdev_lint.rule import Rule, all_rules, rules_by_code

RULES = rules_by_code()


class _Counting(Rule):
    """A rule that only counts the modules it is run on."""

    code = "TDL999"
    name = "counting"
    message = "counted"
    triggers = ("zz_marker",)
    docs = ""
    runs = 0

    def visit_Module(self, node: cst.Module) -> None:
        type(self).runs += 1


def test_a_rule_whose_triggers_do_not_occur_is_not_run() -> None:
    _Counting.runs = 0
    rules = [_Counting, RULES["TDL301"]]
    result = check_source("a.py", "import torch\nx = torch.zeros(2).cuda()\n", rules, Settings())
    assert _Counting.runs == 0
    assert [d.code for d in result.diagnostics] == ["TDL301"]
    check_source("b.py", "import torch\nzz_marker = torch.ones(1)\n", rules, Settings())
    assert _Counting.runs == 1
    check_source("c.py", "import torch\n", rules, Settings(), skip_filter=False)
    assert _Counting.runs == 2


@pytest.mark.parametrize(
    "text",
    [
        "x = batch.to (device)",
        "x = batch. to(device)",
        "x = (batch\n    .to\n    (device))",
        "x = batch.to \\\n    (device)",
    ],
)
def test_triggers_match_however_python_spaces_them(text: str) -> None:
    rule = RULES["TDL203"]  # triggers `.to(`, `.cuda(`
    assert could_match(text, [rule]) and could_match(text.encode(), [rule])
    assert matching_rules(text, all_rules()) == matching_rules(text.encode(), all_rules())
    assert rule in matching_rules(text, all_rules())


def test_spaced_call_is_still_flagged() -> None:
    source = 'import torch\n\nfor _ in range(2):\n    x = torch.zeros(8) .to ("cuda")\n'
    assert [d.code for d in check_source("a.py", source, [RULES["TDL203"]], Settings()).diagnostics] == [
        "TDL203"
    ]


def test_a_name_trigger_is_not_a_pattern() -> None:
    assert not could_match("data_loader = make(x)", [RULES["TDL204"]])  # `DataLoader` only as written


PINNED_PARAMETER = textwrap.dedent(
    """
    import torch

    def train_one_epoch(model, loader, device):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            model(x).sum().backward()
    """
)


def test_fact_triggers_run_a_rule_without_its_trigger_text() -> None:
    """TDL205 fires on a loader parameter every project call pins, in a file that never names
    `pin_memory`: its `fact_triggers` run it where those facts are."""
    rule = RULES["TDL205"]
    assert "pin_memory" not in PINNED_PARAMETER
    facts = FileFacts(pinned_loaders=frozenset({("train_one_epoch", "loader")}))
    found = check_source("engine.py", PINNED_PARAMETER, [rule], Settings(), project=facts).diagnostics
    assert [(d.code, d.line) for d in found] == [("TDL205", 6), ("TDL205", 6)]
    assert not check_source("engine.py", PINNED_PARAMETER, [rule], Settings()).diagnostics
    other = FileFacts(gating=frozenset({"init"}))  # facts, but not the ones that make it fire
    assert matching_rules(PINNED_PARAMETER, [rule], other) == []


def test_fact_triggers_name_fields_of_the_facts() -> None:
    for rule in all_rules():
        assert set(rule.fact_triggers) <= set(FileFacts._fields), rule.code


def test_a_file_with_facts_is_parsed_even_where_no_rule_runs() -> None:
    """As before the filter was per rule: a file with project facts gets its tree (and its
    parse errors) even where no selected rule can fire."""
    facts = FileFacts(gating=frozenset({"init"}))
    result = check_source("a.py", "x = 1\n", [RULES["TDL204"]], Settings(), project=facts)
    assert result.module is not None and not result.findings
    with pytest.raises(SourceError):
        check_source("b.py", "x = (\n", [RULES["TDL204"]], Settings(), project=facts)
    assert check_source("c.py", "x = (\n", [RULES["TDL204"]], Settings()).module is None
