"""The flake8 plugin reports what `torchdev-lint check --format concise` reports.

Real flake8 runs as a subprocess over the shipped fixtures and over every
rule's flagged examples; opt-in rules stay off under flake8's default
selection, and `torchdev-target-torch-version` from flake8's config reaches
the rules. In process, the plugin's findings-only check reports exactly what
`check` does on every rule's flagged examples. With the project cache `check` wrote, flake8 sees the facts other
files give (a CUDA gate in another module); without it, or for a dependency
edited since, each file is checked on its own.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest
from multifile import GATE, WARNS

import torchdev_lint.analysis.placement.device_variable
import torchdev_lint.config
import torchdev_lint.flake8_plugin
from torchdev_lint.analysis.syntax.quotes import QuoteStyle
from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.flake8_plugin import TorchDevLintPlugin
from torchdev_lint.rule import Invalid, Rule, all_rules

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


def _examples() -> list[tuple[type[Rule], Invalid]]:
    return [(rule, example) for rule in all_rules() for example in rule.invalid]


@pytest.mark.parametrize("rule", [r for r in all_rules() if r.invalid], ids=lambda rule: rule.code)
def test_plugin_findings_equal_checks_on_every_flagged_example(
    rule: type[Rule], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin checks for findings only (no fix built, nor what only a fix needs): every
    finding, its line, column and message, is the one `check` reports with its fixes. In
    process, so opt-in rules and examples with settings are covered too."""
    monkeypatch.setattr(TorchDevLintPlugin, "rules", (rule,))
    monkeypatch.setattr(TorchDevLintPlugin, "cache_directory", str(tmp_path))  # no summaries: alone
    for example in rule.invalid:
        settings = Settings.from_mapping(dict(example.settings))
        monkeypatch.setattr(TorchDevLintPlugin, "settings", settings)
        source = example.source
        expected = check_source("example.py", source, [rule], settings)
        plugin = TorchDevLintPlugin(ast.parse(source), "example.py", source.splitlines(keepends=True))
        found = [(line, column, message) for line, column, message, _ in plugin.run()]
        assert found == [(d.line, d.column - 1, f"{d.code} {d.message}") for d in expected.reported]
        assert [d.line for d in expected.reported] == list(example.lines)


def test_findings_only_builds_no_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """`fixes=False` reports what a full check reports, without fixes and without the analyses
    only fixes need: the module's quote style and a free name for a new device variable."""
    with_fixes = [(rule, e) for rule, e in _examples() if e.fixed is not None and not e.settings]
    expected = [check_source("example.py", e.source, [rule]) for rule, e in with_fixes]

    def fix_only(*args: object) -> None:
        raise AssertionError("analysis for a fix in a findings-only check")

    monkeypatch.setattr(QuoteStyle, "_scan", fix_only)
    monkeypatch.setattr(torchdev_lint.analysis.placement.device_variable, "_names_in_use", fix_only)
    for (rule, example), full in zip(with_fixes, expected, strict=True):
        found = check_source("example.py", example.source, [rule], fixes=False)
        assert all(d.fix is None for d in found.diagnostics) and all(f.fix is None for f in found.findings)
        assert [dataclasses.replace(d, fix=None) for d in full.diagnostics] == found.diagnostics
    assert {rule.code for rule, _ in with_fixes} >= {"TDL101", "TDL203", "TDL301", "TDL312", "TDL313"}


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
    assert [args for args, _ in manager.added] == [
        ("--torchdev-target-torch-version",),
        ("--torchdev-cache-dir",),
    ]
    assert all(kwargs["parse_from_config"] is True for _, kwargs in manager.added)

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


# Project facts from the cache `check` writes -----------------------------------------------

MAIN = """
    import torch
    import {helper}

    def main(args):
        {helper}.init(args)
        model = torch.nn.Linear(2, 2).cuda()
        return model
"""
CHECK_TDL301 = [*CHECK, "--select", "TDL301", "."]
FLAKE8_TDL301 = [*FLAKE8, "--select", "TDL301", "."]


def _gated_project(root: Path) -> None:
    files = {
        "setup.py": "",
        "utils.py": GATE,
        "warns.py": WARNS,
        "main.py": MAIN.format(helper="utils"),
        "other.py": MAIN.format(helper="warns"),
    }
    for name, text in files.items():
        (root / name).write_text(dedent(text))


def _flake8(root: Path, command: list[str] = FLAKE8_TDL301) -> list[str]:
    return [line.removeprefix("./") for line in _lines(command, root)]


def _where(lines: list[str]) -> list[str]:
    """`path:line:column: CODE` of each line."""
    return [" ".join(line.split()[:2]) for line in lines]


def test_flake8_with_the_project_cache_reports_what_check_does(tmp_path: Path) -> None:
    """After `torchdev-lint check` wrote its cache, flake8 sees the gate in utils.py: main.py is
    silent as under `check`, and other.py, whose helper only warns, is flagged in both."""
    _gated_project(tmp_path)
    expected = _lines(CHECK_TDL301, tmp_path)
    assert [line.split(":")[0] for line in expected] == ["other.py"]
    assert (tmp_path / ".torchdev_lint_cache" / "summaries").is_dir()
    assert _flake8(tmp_path) == expected
    # Also with the cache folder named in flake8's options, from elsewhere.
    (tmp_path / ".torchdev_lint_cache").rename(tmp_path / "cache")
    command = [*FLAKE8, "--select", "TDL301", "--torchdev-cache-dir", str(tmp_path / "cache"), "."]
    assert _flake8(tmp_path, command) == expected


def test_flake8_without_the_cache_or_with_a_stale_one_checks_each_file_alone(tmp_path: Path) -> None:
    """No cache, a dependency edited since `check` (its summary is not cached for its text: flake8
    does not parse it) or an unsaved buffer on stdin: the gate is not seen, as for a file alone."""
    _gated_project(tmp_path)
    alone = ["main.py:7:13: TDL301", "other.py:7:13: TDL301"]
    assert _where(_flake8(tmp_path)) == alone
    assert not (tmp_path / ".torchdev_lint_cache").exists()  # flake8 reads the cache, never creates it
    _lines(CHECK_TDL301, tmp_path)
    assert _where(_flake8(tmp_path)) == alone[1:]
    (tmp_path / "utils.py").write_text(dedent(GATE) + "# edited\n")
    assert _where(_flake8(tmp_path)) == alone
    _lines(CHECK_TDL301, tmp_path)  # the cache is up to date again
    buffer = (tmp_path / "main.py").read_text().replace("return model", "return None")
    stdin = [*FLAKE8, "--select", "TDL301", "--stdin-display-name", "main.py", "-"]
    result = subprocess.run(stdin, cwd=tmp_path, input=buffer, capture_output=True, text=True)
    assert _where(result.stdout.splitlines()) == alone[:1]
