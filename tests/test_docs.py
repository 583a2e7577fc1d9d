"""Generated docs (README rules table, docs/rules/*.md) match the rule modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from project_scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_docs.py"


def test_generated_docs_are_fresh() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, (
        "generated docs are stale; run `python scripts/gen_docs.py`\n" + result.stderr
    )


def test_every_rule_has_a_page_and_a_row() -> None:
    from torchdev_lint.rule import all_rules

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for rule in all_rules():
        assert (ROOT / "docs" / "rules" / f"{rule.code}.md").is_file()
        assert f"| [{rule.code}](docs/rules/{rule.code}.md) | `{rule.name}` |" in readme


def test_check_detects_staleness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = load_script("gen_docs")
    (tmp_path / "docs" / "rules").mkdir(parents=True)
    (tmp_path / "README.md").write_text(f"# x\n\n{gen.START}\nold\n{gen.END}\n\nafter\n")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "README", tmp_path / "README.md")
    monkeypatch.setattr(gen, "RULES_DIR", tmp_path / "docs" / "rules")
    (tmp_path / "docs" / "rules" / "TDL000.md").write_text("gone\n")
    problems = gen.stale()
    assert "README.md" in problems and "docs/rules/TDL000.md" in problems
    assert "docs/rules/TDL101.md" in problems
    gen.write()
    assert gen.stale() == []
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# x\n") and readme.endswith("\n\nafter\n") and "old" not in readme
    assert not (tmp_path / "docs" / "rules" / "TDL000.md").exists()


def test_readme_test_command_matches_ci() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python -m pytest -q" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -q" in ci


def test_readme_documents_every_check_option() -> None:
    from torchdev_lint.cli import build_parser

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    parser = build_parser()
    check = parser._subparsers._group_actions[0].choices["check"]  # type: ignore[union-attr]
    for action in check._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag not in ("--help",):
                assert flag in readme, f"README does not mention {flag}"


def test_every_message_says_what_is_wrong_and_what_to_do() -> None:
    from torchdev_lint.rule import all_rules

    for rule in all_rules():
        assert "\n" not in rule.message and rule.message.strip() == rule.message, rule.code
        wrong, _, todo = rule.message.partition("; ")
        assert wrong and todo, f"{rule.code}: message should read '<what is wrong>; <what to do>'"


def _yaml_blocks(text: str) -> list[object]:
    import re

    import yaml

    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]


def test_pre_commit_hooks_and_readme_block() -> None:
    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    by_id = {hook["id"]: hook for hook in hooks}
    assert set(by_id) == {"torchdev-lint", "torchdev-fix"}
    for hook in hooks:
        assert hook["language"] == "python" and hook["types_or"] == ["python", "pyi", "jupyter"]
    assert by_id["torchdev-lint"]["entry"] == "torchdev-lint check"
    assert by_id["torchdev-fix"]["entry"] == "torchdev-fix"
    blocks = _yaml_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    config = next(b for b in blocks if isinstance(b, dict) and "repos" in b)
    used = {hook["id"] for repo in config["repos"] for hook in repo["hooks"]}
    assert used == set(by_id)
    workflow = next(b for b in blocks if isinstance(b, dict) and "jobs" in b)
    steps = workflow["jobs"]["lint"]["steps"]
    assert any("--format sarif" in step.get("run", "") for step in steps)
    assert any(step.get("uses", "").startswith("github/codeql-action/upload-sarif") for step in steps)
