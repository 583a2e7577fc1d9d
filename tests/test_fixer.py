"""The fixer's guarantees: a grammar and comment guard, follow-ups counted apart, conflicts not
dropped silently, a defined safe-then-unsafe order, `--diff` equal to `--fix`, and summaries that add up.

Stand-in rules with deliberately bad fixes exercise the guard: real rules must
produce valid code themselves (the fuzz tests and `fix_properties` treat any
refusal by the guard as a rule bug).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

import torchdev_lint.cli
import torchdev_lint.config
import torchdev_lint.rule
from torchdev_lint.cli import fix_main, main
from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import fix_source, with_follow_ups
from torchdev_lint.grammar import Survey, guard_problem, requires_python_floor
from torchdev_lint.rule import Fix, Rule, all_rules

DOCS = "## What it does\nx\n## Why it matters\nx\n## Example\nx\n## Use instead\nx\n## Fix safety\nx\n"


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    tight = cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )
    return cst.Arg(value, keyword=cst.Name(name), equal=tight)


def _call_to(node: cst.Call, name: str) -> bool:
    return isinstance(node.func, cst.Name) and node.func.value == name


class QuoteInFString(Rule):
    """Adds `k="v"` to `g(...)` with double quotes wherever it is: wrong inside f"..." before 3.12."""

    code, name, message, docs = "TDL990", "test-quote", "test: g without k", DOCS
    fix_availability = "always"
    triggers = ("g(",)

    def visit_Call(self, node: cst.Call) -> None:
        if not _call_to(node, "g") or any(arg.keyword is not None for arg in node.args):
            return
        keyword = _keyword("k", cst.SimpleString('"v"'))
        new = node.with_changes(args=[*node.args, keyword])
        self.report(node, fix=Fix("safe", "add k", {node: new}))


class DropsComment(Rule):
    """Replaces `h(...)` by `h()`, dropping whatever comment sits between the parentheses."""

    code, name, message, docs = "TDL991", "test-comment", "test: h with arguments", DOCS
    fix_availability = "always"
    triggers = ("h(",)

    def visit_Call(self, node: cst.Call) -> None:
        if _call_to(node, "h") and node.args:
            self.report(node, fix=Fix("safe", "drop arguments", {node: cst.Call(cst.Name("h"))}))


class Rename(Rule):
    """`a()` becomes `b()`: gives rise to a `BToC` finding (a follow-up)."""

    code, name, message, docs = "TDL992", "test-a-to-b", "test: a()", DOCS
    fix_availability = "always"
    triggers = ("a(", "b(")

    def visit_Call(self, node: cst.Call) -> None:
        if _call_to(node, "a"):
            self.report(node, fix=Fix("safe", "call b", {node.func: cst.Name("b")}))


class BToC(Rule):
    code, name, message, docs = "TDL993", "test-b-to-c", "test: b()", DOCS
    fix_availability = "always"
    triggers = ("a(", "b(")

    def visit_Call(self, node: cst.Call) -> None:
        if _call_to(node, "b"):
            self.report(node, fix=Fix("safe", "call c", {node.func: cst.Name("c")}))


def _keyword_adder(code: str, keyword: str, safety: str) -> type[Rule]:
    """A rule adding `keyword=1` to calls of `m`: two of them touch one expression."""

    class AddKeyword(Rule):
        name, message, docs = f"test-{keyword}", f"test: m without {keyword}", DOCS
        fix_availability = "always"
        triggers = ("m(",)

        def visit_Call(self, node: cst.Call) -> None:
            if _call_to(node, "m") and not any(
                a.keyword is not None and a.keyword.value == keyword for a in node.args
            ):
                new = node.with_changes(args=[*node.args, _keyword(keyword, cst.Integer("1"))])
                risk = "test: m behaves otherwise" if safety == "unsafe" else None
                self.report(node, fix=Fix(safety, f"add {keyword}", {node: new}, risk))  # type: ignore[arg-type]

    AddKeyword.code = code
    return AddKeyword


class EmptyCallToOther(Rule):
    """Unsafe: `m()` (no arguments) becomes `n()`; conflicts with the safe keyword adder."""

    code, name, message, docs = "TDL994", "test-m-to-n", "test: m()", DOCS
    fix_availability = "always"
    triggers = ("m(",)

    def visit_Call(self, node: cst.Call) -> None:
        if _call_to(node, "m") and not node.args:
            self.report(
                node, fix=Fix("unsafe", "call n", {node: cst.Call(cst.Name("n"))}, "test: n is not m")
            )


ADD_X = _keyword_adder("TDL995", "x", "safe")
ADD_Y = _keyword_adder("TDL996", "y", "safe")
UNSAFE_ADD_Z = _keyword_adder("TDL997", "z", "unsafe")
STAND_INS = (QuoteInFString, DropsComment, Rename, BToC, EmptyCallToOther, ADD_X, ADD_Y, UNSAFE_ADD_Z)


def _fix(source: str, rules: tuple[type[Rule], ...], **options: object) -> tuple[str, object]:
    outcome = fix_source("m.py", source.encode(), rules, Settings(), **options)  # type: ignore[arg-type]
    return outcome.source.decode(), outcome


# The grammar guard ---------------------------------------------------------------------------

# (f-string, valid before Python 3.12): the constructs PEP 701 allowed, and near misses that were always valid.
FSTRINGS = [
    ('f"{x["a"]}"', False),
    ("f'{x['a']}'", False),
    ('f"{x:{"a"}}"', False),
    ("f'{f\"{f'{x}'}\"}'", False),
    ('f"{x\n}"', False),
    ("f\"{chr(92) + '\\n'}\"", False),
    ('f"""{x # note\n}"""', False),
    ("f\"{'#'}\"", True),
    ('f"""{x\n}"""', True),
    ('f"""{x["a"]}"""', True),
    ("f'{x[\"a\"]}'", True),
    ('f"{x!r:>{width}}"', True),
    ('f"{x:\\n}"', True),
    ('f"{x = !r:>10}"', True),
    ("f'''{f\"{x}\"}'''", True),
    ('rf"{x}\\"a"', True),
]


@pytest.mark.parametrize(("text", "valid"), FSTRINGS)
def test_pre_312_fstrings_are_detected_on_any_interpreter(text: str, valid: bool) -> None:
    module = cst.parse_module(f"y = {text}\n")
    assert (not Survey(module, (3, 10)).too_new) is valid
    assert not Survey(module, (3, 12)).too_new
    if sys.version_info < (3, 12):  # the interpreter itself agrees
        try:
            compile(module.code, "m.py", "exec")
        except SyntaxError:
            assert not valid
        else:
            assert valid


def test_other_new_syntax_is_detected() -> None:
    source = "try:\n    pass\nexcept* E:\n    pass\ny = a[*b]\ntype X = int\n"
    too_new = Survey(cst.parse_module(source), (3, 10)).too_new
    assert len(too_new) == 3
    assert not Survey(cst.parse_module(source), (3, 12)).too_new


def test_guard_is_relative_to_what_the_file_already_uses() -> None:
    before = cst.parse_module('y = f"{x["a"]}"\nz = 1\n')
    after = cst.parse_module('y = f"{x["a"]}"\nz = 2\n')
    assert guard_problem(Survey(before, (3, 10)), after, (3, 10)) is None


@pytest.mark.parametrize(
    ("specifier", "floor"),
    [(">=3.8", (3, 8)), (">=3.9, <4", (3, 9)), ("~=3.11", (3, 11)), ("==3.12.*", (3, 12)), (">3.10", (3, 10)),
     ("<4", None), ("", None)],
)  # fmt: skip
def test_requires_python_floor(specifier: str, floor: tuple[int, int] | None) -> None:
    assert requires_python_floor(specifier) == floor


def test_fix_breaking_old_grammar_is_refused_and_others_apply() -> None:
    source = 'g(1)\nprint(f"{g(2)}")\n'
    fixed, outcome = _fix(source, (QuoteInFString,))
    assert fixed == 'g(1, k="v")\nprint(f"{g(2)}")\n'
    (remaining,) = outcome.reported  # type: ignore[attr-defined]
    assert remaining.line == 2 and remaining.fix is not None
    assert remaining.fix.not_applied.startswith("the fixed code would not parse on Python 3.10: ")
    assert "quote" in remaining.fix.not_applied


@pytest.mark.skipif(sys.version_info < (3, 12), reason="nested same quotes need Python 3.12 to compile")
def test_newer_oldest_python_allows_newer_grammar() -> None:
    fixed, _ = _fix('print(f"{g(2)}")\n', (QuoteInFString,), oldest_python=(3, 12))
    assert fixed == 'print(f"{g(2, k="v")}")\n'


def test_file_left_as_it_was_when_no_fix_is_valid() -> None:
    source = 'print(f"{g(2)}")\n'
    fixed, outcome = _fix(source, (QuoteInFString,))
    assert fixed == source and outcome.applied == 0  # type: ignore[attr-defined]


def test_fix_dropping_a_comment_is_refused() -> None:
    source = "h(\n    1,  # keep me\n)\nh(2)\n"
    fixed, outcome = _fix(source, (DropsComment,))
    assert fixed == "h(\n    1,  # keep me\n)\nh()\n"
    (remaining,) = outcome.reported  # type: ignore[attr-defined]
    assert remaining.fix.not_applied == "the fix would drop the comment '# keep me'"


def test_refusal_is_reported_in_text_json_and_fixer_summary(
    tmp_path: Path, stand_ins: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.py"
    source = 'g(1)\nprint(f"{g(2)}")\n'
    path.write_text(source)
    code = main(
        ["check", "--isolated", "--no-cache", "--select", "TDL990", "--fix", "--format", "json", str(path)]
    )
    (item,) = json.loads(capsys.readouterr().out)
    assert code == 1 and item["fix"]["not_applied"].startswith("the fixed code would not parse")
    path.write_text(source)
    assert main(["check", "--isolated", "--no-cache", "--select", "TDL990", "--diff", str(path)]) == 1
    out, err = capsys.readouterr()
    assert '+g(1, k="v")' in out and "fix not applied: the fixed code would not parse" in err
    assert path.read_text() == source
    assert fix_main(["--isolated", "--no-cache", "--select", "TDL990", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "[*]" not in out and "(fix not applied: the fixed code would not parse on Python 3.10" in out
    assert err.endswith(
        "Fixed 1 finding in 1 file; 1 remains (1 of them with a fix not applied: see above)\n"
    )


def test_requires_python_of_the_configured_project_is_the_floor(
    tmp_path: Path, stand_ins: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nrequires-python = ">=3.12"\n[tool.torchdev-lint]\nselect = ["TDL990"]\n'
    )
    path = tmp_path / "m.py"
    path.write_text('print(f"{g(2)}")\n')
    fix_main(["--no-cache", str(path)])
    _, err = capsys.readouterr()
    if sys.version_info >= (3, 12):
        assert path.read_text() == 'print(f"{g(2, k="v")}")\n'
    else:  # the interpreter running the tool cannot compile it either: still refused
        assert "Fixed 0 findings" in err and "does not compile" in err or "not applied" in err


# Follow-ups, conflicts and order -------------------------------------------------------------


def test_follow_ups_are_counted_apart() -> None:
    fixed, outcome = _fix("a()\nb()\n", (Rename, BToC))
    assert fixed == "c()\nc()\n"
    assert (outcome.applied, outcome.follow_ups) == (3, 1)  # type: ignore[attr-defined]


def test_check_lists_follow_ups_with_their_edits() -> None:
    result = check_source("m.py", "a()\nb()\n", (Rename, BToC), Settings())
    first, second = with_follow_ups(result, (Rename, BToC), Settings())
    assert first.code == "TDL992" and first.fix is not None
    (follow_up,) = first.fix.follow_ups
    assert (follow_up.code, follow_up.line, follow_up.column) == ("TDL993", 1, 1)
    assert follow_up.fix is not None and [e.content for e in follow_up.fix.edits] == ["c"]
    assert second.fix is not None and second.fix.follow_ups == ()


def test_conflicting_fixes_apply_in_later_rounds() -> None:
    fixed, outcome = _fix("m()\n", (ADD_X, ADD_Y))
    assert fixed == "m(x=1, y=1)\n"
    assert (outcome.applied, outcome.follow_ups) == (2, 0)  # type: ignore[attr-defined]


def test_conflict_left_unresolved_is_reported() -> None:
    _, outcome = _fix("m()\n", (ADD_X, ADD_Y), max_rounds=1)
    (remaining,) = outcome.reported  # type: ignore[attr-defined]
    assert remaining.code == "TDL996" and remaining.fix.not_applied == "conflicts with TDL995 at 1:1"


def test_safe_then_unsafe_in_two_runs_equals_both_at_once() -> None:
    rules = (EmptyCallToOther, ADD_X, UNSAFE_ADD_Z)
    at_once, _ = _fix("m()\nm(q=2)\n", rules, unsafe=True)
    safe, _ = _fix("m()\nm(q=2)\n", rules)
    in_two, _ = _fix(safe, rules, unsafe=True)
    assert safe == "m(x=1)\nm(q=2, x=1)\n"
    assert at_once == in_two == "m(x=1, z=1)\nm(q=2, x=1, z=1)\n"


# CLI: --diff equals --fix, summaries ----------------------------------------------------------


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = (*all_rules(), *STAND_INS)
    for module in (torchdev_lint.rule, torchdev_lint.config, torchdev_lint.cli):
        monkeypatch.setattr(module, "all_rules", lambda: rules)


PROJECT = {
    "pinned.py": (
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        'device = torch.device("cuda")\nloader = DataLoader(dataset, batch_size=4)\n'
        "for x, y in loader:\n    x = x.to(device)\n    y = y.to(device)\n    model(x, y)\n"
    ),
    "crlf.py": 'import torch\r\n\r\nstate = torch.load("a.pt")\r\nother = torch.load("b.pt")',
    "calls.py": 'a()\nb()\ng(1)\nprint(f"{g(2)}")\nm()\n',
}


def _write(folder: Path) -> None:
    folder.mkdir()
    for name, text in PROJECT.items():
        (folder / name).write_bytes(text.encode())


@pytest.mark.parametrize("unsafe", [(), ("--unsafe-fixes",)])
def test_diff_is_exactly_what_fix_writes(
    tmp_path: Path, stand_ins: None, capsys: pytest.CaptureFixture[str], unsafe: tuple[str, ...]
) -> None:
    _write(tmp_path / "diffed")
    _write(tmp_path / "fixed")
    argv = ["check", "--isolated", "--no-cache", "--select", "ALL", *unsafe]
    main([*argv, "--diff", str(tmp_path / "diffed")])
    diff = capsys.readouterr().out
    main([*argv, "--fix", str(tmp_path / "fixed")])
    capsys.readouterr()
    patch = subprocess.run(
        ["patch", "-p1", "--binary", "-s", "-d", str(tmp_path / "diffed")],
        input=diff.replace(f"a/{tmp_path / 'diffed'}/", "a/")
        .replace(f"b/{tmp_path / 'diffed'}/", "b/")
        .encode(),
        capture_output=True,
    )
    assert patch.returncode == 0, patch.stdout + patch.stderr
    for name in PROJECT:
        assert (tmp_path / "diffed" / name).read_bytes() == (tmp_path / "fixed" / name).read_bytes(), name
        assert (tmp_path / "fixed" / name).read_bytes() != PROJECT[name].encode(), name


def test_fixer_summary_counts_follow_ups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pinned.py"
    path.write_text(PROJECT["pinned.py"])
    main(["check", "--isolated", "--no-cache", "--select", "TDL204,TDL205", str(path)])
    assert "[*] 1 fixable with --fix." in capsys.readouterr().err
    assert fix_main(["--isolated", "--no-cache", "--select", "TDL204,TDL205", str(path)]) == 0
    assert (
        capsys.readouterr().err
        == "Fixed 3 findings (2 of them follow-ups of other fixes) in 1 file; 0 remain\n"
    )
    assert path.read_text().count("non_blocking=True") == 2


def test_show_fixes_and_json_show_follow_ups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pinned.py"
    path.write_text(PROJECT["pinned.py"])
    main(["check", "--isolated", "--no-cache", "--select", "TDL204,TDL205", "--show-fixes", str(path)])
    out = capsys.readouterr().out
    assert "then, after this fix, TDL205 at 7:9:" in out and "'x.to(device, non_blocking=True)'" in out
    main(["check", "--isolated", "--no-cache", "--select", "TDL204,TDL205", "--format", "json", str(path)])
    (item,) = json.loads(capsys.readouterr().out)
    follow_ups = item["fix"]["follow_ups"]
    assert [(f["code"], f["line"]) for f in follow_ups] == [("TDL205", 7), ("TDL205", 8)]
    assert follow_ups[0]["fix"]["edits"][0]["content"] == "x.to(device, non_blocking=True)"


def test_marker_and_summary_follow_the_unsafe_setting(
    tmp_path: Path, stand_ins: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.py"
    path.write_text("m()\nm(x=1)\n")
    argv = ["check", "--isolated", "--no-cache", "--select", "TDL994,TDL995,TDL997", str(path)]
    main(argv)
    out, err = capsys.readouterr()
    assert out.count("[*]") == 1 and "TDL995 [*] test: m without x" in out
    assert err == "Found 4 findings.\n[*] 1 fixable with --fix (3 more with --unsafe-fixes).\n"
    main([*argv, "--unsafe-fixes"])
    out, err = capsys.readouterr()
    assert out.count("[*]") == 4 and err == "Found 4 findings.\n[*] 4 fixable with --fix.\n"


def test_statistics_prints_only_counts(
    tmp_path: Path, stand_ins: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.py"
    path.write_text("m()\nm(x=1)\n")
    main(["check", "--isolated", "--no-cache", "--select", "TDL994,TDL995,TDL997", "--statistics", str(path)])
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "2\tTDL997\t[ ] test-z",
        "1\tTDL994\t[ ] test-m-to-n",
        "1\tTDL995\t[*] test-x",
    ]
    assert err.startswith("Found 4 findings.")


def test_singular_and_plural(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.py"
    path.write_text('import torch\nx = torch.load("a.pt")\n')
    main(["check", "--isolated", "--no-cache", "--fix", str(path)])
    assert capsys.readouterr().err == "Fixed 1 finding.\nAll checks passed!\n"
    path.write_text('import torch\nx = torch.load("a.pt")\ny = torch.load("b.pt")\n')
    main(["check", "--isolated", "--no-cache", str(path)])
    assert capsys.readouterr().err == "Found 2 findings.\n[*] 2 fixable with --fix.\n"
