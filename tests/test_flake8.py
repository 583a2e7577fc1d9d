"""The flake8 plugin reports what `torchdev-lint check --format concise` reports.

Real flake8 runs as a subprocess over the shipped fixtures and over every
rule's flagged examples; opt-in rules stay off under flake8's default
selection, and `torchdev-target-torch-version` from flake8's config reaches
the rules.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import torchdev_lint.config
import torchdev_lint.flake8_plugin
from torchdev_lint.config import Settings
from torchdev_lint.flake8_plugin import TorchDevLintPlugin
from torchdev_lint.rule import all_rules

ROOT = Path(__file__).resolve().parents[1]
FLAKE8 = [sys.executable, "-m", "flake8", "--isolated"]
CHECK = [sys.executable, "-m", "torchdev_lint", "check", "--isolated", "--format", "concise"]


def _lines(command: list[str], cwd: Path) -> list[str]:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return sorted(result.stdout.splitlines())


def _write_examples(folder: Path) -> None:
    for rule in all_rules():
        for index, example in enumerate(rule.invalid):
            if not example.settings:
                (folder / f"{rule.code.lower()}_{index}.py").write_text(example.source)


def test_fixtures_match_cli() -> None:
    fixtures = ROOT / "fixtures"
    if not any(fixtures.glob("*.py")):
        pytest.skip("no fixtures yet")
    expected = _lines([*CHECK, "--select", "TDL", "fixtures"], ROOT)
    assert _lines([*FLAKE8, "--select", "TDL", "fixtures"], ROOT) == expected


def test_examples_match_cli(tmp_path: Path) -> None:
    _write_examples(tmp_path)
    expected = _lines([*CHECK, "--select", "TDL", "."], tmp_path)
    assert expected, "every default rule's examples are flagged"
    flake8 = [line.removeprefix("./") for line in _lines([*FLAKE8, "--select", "TDL", "."], tmp_path)]
    assert sorted(flake8) == expected


def test_examples_match_cli_with_default_selection(tmp_path: Path) -> None:
    _write_examples(tmp_path)
    expected = _lines([*CHECK, "."], tmp_path)
    flake8 = _lines([*FLAKE8, "--select", "TDL", "."], tmp_path)
    opt_in = {rule.code for rule in all_rules() if not rule.default_enabled}
    assert not [line for line in expected if line.split()[1] in opt_in]
    assert not [line for line in flake8 if line.split()[1] in opt_in]


def test_opt_in_rules_need_explicit_selection(tmp_path: Path) -> None:
    opt_in = [rule for rule in all_rules() if not rule.default_enabled and rule.invalid]
    if not opt_in:
        pytest.skip("no opt-in rule yet")
    for rule in opt_in:
        example = tmp_path / f"{rule.code.lower()}.py"
        example.write_text(rule.invalid[0].source)
        default = _lines([*FLAKE8, str(example)], tmp_path)
        assert not any(f" {rule.code} " in line for line in default)
        for flag in ("--extend-select", "--select"):
            chosen = _lines([*FLAKE8, flag, rule.code, str(example)], tmp_path)
            assert any(f" {rule.code} " in line for line in chosen), (flag, rule.code)


def test_noqa_is_honoured_by_flake8(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        'import torch\na = torch.load("a.pt")\nb = torch.load("b.pt")  # noqa: TDL1\n'
    )
    assert [line.split(":")[1] for line in _lines([*FLAKE8, "--select", "TDL", "m.py"], tmp_path)] == ["2"]
    assert [line.split(":")[1] for line in _lines([*CHECK, "m.py"], tmp_path)] == ["2"]


@pytest.mark.parametrize(
    "comment",
    ["# noqa: tdl1", "# noqa: Tdl101", "# noqa:TDL101", "#noqa: TDL101 , TDL2", "# NOQA: tdl", "# noqa"],
)
def test_noqa_spellings_agree_between_flake8_and_check(tmp_path: Path, comment: str) -> None:
    (tmp_path / "m.py").write_text(
        f'import torch\na = torch.load("a.pt")\nb = torch.load("b.pt")  {comment}\n'
    )
    assert [line.split(":")[1] for line in _lines([*FLAKE8, "--select", "TDL", "m.py"], tmp_path)] == ["2"]
    assert [line.split(":")[1] for line in _lines([*CHECK, "m.py"], tmp_path)] == ["2"]


def test_flake8_disable_noqa_shows_suppressed_findings(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('import torch\nb = torch.load("b.pt")  # noqa: tdl1\n')
    lines = _lines([*FLAKE8, "--select", "TDL", "--disable-noqa", "m.py"], tmp_path)
    assert [line.split(":")[1] for line in lines] == ["2"]


class _Options:
    def __init__(self) -> None:
        self.added: list[tuple[tuple[object, ...], dict[str, object]]] = []
        self.ignored: list[str] = []

    def add_option(self, *args: object, **kwargs: object) -> None:
        self.added.append((args, kwargs))

    def extend_default_ignore(self, codes: list[str]) -> None:
        self.ignored.extend(codes)


def test_plugin_protocol_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from test_cli import EvalCall

    rules = (*all_rules(), EvalCall)
    for module in (torchdev_lint.config, torchdev_lint.flake8_plugin):
        monkeypatch.setattr(module, "all_rules", lambda: rules)
    manager = _Options()
    TorchDevLintPlugin.add_options(manager)
    assert "TDL998" in manager.ignored and "TDL101" not in manager.ignored
    ((args, kwargs),) = manager.added
    assert args == ("--torchdev-target-torch-version",) and kwargs["parse_from_config"] is True

    def chosen(select: list[str] | None, extend: list[str]) -> set[str]:
        namespace = argparse.Namespace(
            select=select, extend_select=extend, torchdev_target_torch_version="2.4"
        )
        monkeypatch.setattr(TorchDevLintPlugin, "rules", None)
        TorchDevLintPlugin.parse_options(namespace)
        assert TorchDevLintPlugin.settings == Settings(target_torch_version=(2, 4))
        return {rule.code for rule in TorchDevLintPlugin.rules or ()}

    defaults = {rule.code for rule in all_rules() if rule.default_enabled}
    assert chosen(None, []) == defaults
    assert chosen(["TDL"], []) == defaults
    assert chosen(["E", "F"], []) == set()
    assert chosen(["TDL998"], []) == {"TDL998"}
    assert chosen(None, ["TDL998"]) == defaults | {"TDL998"}
    monkeypatch.setattr(TorchDevLintPlugin, "settings", Settings())


def test_target_torch_version_from_flake8_config(tmp_path: Path) -> None:
    """`torchdev-target-torch-version` in setup.cfg changes what version-dependent rules report."""
    cases = [
        (rule, example)
        for rule in all_rules()
        for example in rule.invalid
        if "target_torch_version" in example.settings
    ]
    (tmp_path / "m.py").write_text("import torch\n\nprint(torch)\n")
    (tmp_path / "setup.cfg").write_text("[flake8]\ntorchdev-target-torch-version = 2.4\n")
    flake8 = [sys.executable, "-m", "flake8"]
    assert subprocess.run([*flake8, "m.py"], cwd=tmp_path, capture_output=True).returncode == 0
    (tmp_path / "setup.cfg").write_text("[flake8]\ntorchdev-target-torch-version = two\n")
    bad = subprocess.run([*flake8, "m.py"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode != 0 and "two" in bad.stdout + bad.stderr
    for rule, example in cases:
        version = str(example.settings["target_torch_version"])
        (tmp_path / "setup.cfg").write_text(f"[flake8]\ntorchdev-target-torch-version = {version}\n")
        (tmp_path / "m.py").write_text(example.source)
        out = _lines([*flake8, "--select", rule.code, "m.py"], tmp_path)
        assert [int(line.split(":")[1]) for line in out] == list(example.lines), rule.code
        cli = _lines([*CHECK, "--select", rule.code, "--target-torch-version", version, "m.py"], tmp_path)
        assert out == cli
