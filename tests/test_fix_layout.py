"""Fixes keep the file's layout (issue 24): pre-commit applies safe fixes unread.

No line gains trailing whitespace, a closing parenthesis stays on its line, and
where the project sets a line length (ruff, black, flake8), a call a fix makes
longer than it is wrapped as black and ruff format wrap it, which the tests
check by running `ruff format` over the result.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from fix_properties import check_fix_properties, trailing_whitespace
from hypothesis import given, settings
from hypothesis import strategies as st
from test_edits import apply_edits
from test_fuzz import RULES, torch_programs

from torchdev_lint import fix_wrap
from torchdev_lint.cli import main
from torchdev_lint.config import Settings, configured_line_length
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import add_edits, fix_source
from torchdev_lint.rule import Invalid, Rule, all_rules, rules_by_code

TDL101, TDL312 = rules_by_code()["TDL101"], rules_by_code()["TDL312"]


def fixed(source: str, limit: int | None, rules: list[type[Rule]] | None = None) -> str:
    settings = Settings(line_length=limit)
    data = textwrap.dedent(source).encode()
    outcome = fix_source("example.py", data, rules or [TDL101, TDL312], settings, unsafe=True)
    again = fix_source("example.py", outcome.source, rules or [TDL101, TDL312], settings, unsafe=True)
    assert again.source == outcome.source, "fixing twice must equal fixing once"
    assert not trailing_whitespace(data, outcome.source)
    return outcome.source.decode()


def ruff_formatted(text: str, limit: int) -> str:
    """`text` as `ruff format` writes it at this line length (the tests' formatter of reference)."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    done = subprocess.run(
        [ruff, "format", "--isolated", "--line-length", str(limit), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


# Wrapping ------------------------------------------------------------------------------------------

AMP = """\
    import torch
    from torch.cuda.amp import autocast


    class Net(torch.nn.Module):
        @autocast()
        def forward(self, x):
            with autocast(False, torch.float16):
                return x


    def load(model, path):
        model.load_state_dict(torch.load(path))
    """


def test_a_call_made_too_long_is_wrapped_as_ruff_format_wraps_it() -> None:
    result = fixed(AMP, 60)
    assert result == textwrap.dedent("""\
        import torch


        class Net(torch.nn.Module):
            @torch.amp.autocast(
                "cuda",
                dtype=torch.float16,
                cache_enabled=True,
            )
            def forward(self, x):
                with torch.amp.autocast(
                    "cuda",
                    enabled=False,
                    dtype=torch.float16,
                    cache_enabled=True,
                ):
                    return x


        def load(model, path):
            model.load_state_dict(
                torch.load(path, map_location="cpu"),
            )
        """)
    assert ruff_formatted(result, 60) == result


def test_without_a_line_length_nothing_is_wrapped() -> None:
    assert fixed("import torch\nwith torch.cuda.amp.autocast(False):\n    pass\n", None) == (
        'import torch\nwith torch.amp.autocast("cuda", enabled=False, dtype=torch.float16, cache_enabled=True):\n'
        "    pass\n"
    )


def test_an_argument_still_too_long_is_wrapped_too() -> None:
    source = (
        "import torch\n\n\ndef load(model, checkpoint):\n    model.load_state_dict(torch.load(checkpoint))\n"
    )
    result = fixed(source, 50)
    assert result == textwrap.dedent("""\
        import torch


        def load(model, checkpoint):
            model.load_state_dict(
                torch.load(
                    checkpoint,
                    map_location="cpu",
                ),
            )
        """)
    assert ruff_formatted(result, 50) == result


@pytest.mark.parametrize(
    "line",
    [
        # Where black would split elsewhere, or a split is not clean: applied, not wrapped.
        "state = torch.load(path)['model']",
        "state = [torch.load(p) for p in paths]",
        "state = torch.load(path).to(device)",
        "s = f(torch.load(p)); t = 2",
        "print(f'{torch.cuda.amp.GradScaler()}')",
        "if a: s = torch.cuda.amp.GradScaler(2)",
        "state = (torch.load(path))",
        "xs = [\n    torch.load(p) for p in ps\n]",
        "ys = f(\n    g, t, torch.load(path),\n)",
        # Already longer than the limit before the fix: the project does not keep this line to it.
        "model.load_state_dict(torch.load(path_to_the_checkpoint))",
    ],
)
def test_calls_that_are_not_wrapped(line: str) -> None:
    source = f"import torch\n{line}\n"
    result = fixed(source, 40)
    assert result != source and result.count("\n") == source.count("\n"), result


@pytest.mark.parametrize(
    ("call", "fluent"),
    [
        ("x[i].f().g(a)", True),
        ("x.f().g().h(a)", True),
        ("x.f().g(a)", False),
        ("torch.amp.autocast(a)", False),
    ],
)
def test_ruffs_fluent_chains_are_left_to_ruff(call: str, fluent: bool) -> None:
    """`x[i].pin_memory().to(d, non_blocking=True)`: ruff lays such chains out a link per line."""
    expression = cst.parse_expression(call)
    assert isinstance(expression, cst.Call)
    assert fix_wrap._fluent(expression) is fluent


def test_the_edits_of_a_fix_wrap_as_the_fixer_does() -> None:
    source = "import torch\nwith torch.cuda.amp.autocast(False):\n    pass\n"
    result = check_source("example.py", source, [TDL312], Settings(line_length=50))
    add_edits(result)
    (diagnostic,) = result.diagnostics
    assert diagnostic.fix is not None
    assert apply_edits(source, diagnostic.fix.edits) == fixed(source, 50)


# The project's line length ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"pyproject.toml": "[tool.ruff]\nline-length = 100\n"}, 100),
        ({"pyproject.toml": "[tool.black]\nline-length = 79\n\n[tool.ruff]\nline-length = 100\n"}, 79),
        ({"setup.cfg": "[flake8]\nmax-line-length = 120\n"}, 120),
        ({".flake8": "[flake8]\nmax_line_length = 99\n"}, 99),
        ({"tox.ini": "[tox]\nenvlist = py\n"}, None),
        # ruff reads ruff.toml before pyproject.toml in one folder.
        ({"ruff.toml": "line-length = 70\n", "pyproject.toml": "[tool.ruff]\nline-length = 100\n"}, 70),
        # The nearest folder with ruff settings wins, even without a line length (ruff's default).
        ({"pyproject.toml": "[tool.ruff]\nline-length = 100\n", "src/pyproject.toml": "[tool.ruff]\n"}, None),
        ({"pyproject.toml": "[tool.ruff]\nline-length = 100\n", "src/pyproject.toml": "[project]\n"}, 100),
        # Another tool's broken file or value is its own to report: skipped.
        ({"pyproject.toml": "[tool.ruff\n", "setup.cfg": "[flake8]\nmax-line-length = 90\n"}, 90),
        ({"pyproject.toml": '[tool.black]\nline-length = "long"\n'}, None),
        ({}, None),
    ],
)
def test_configured_line_length(tmp_path: Path, files: dict[str, str], expected: int | None) -> None:
    for name, text in files.items():
        path = tmp_path / "project" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    start = tmp_path / "project" / "src"
    start.mkdir(parents=True, exist_ok=True)
    assert configured_line_length(str(start)) == expected


@pytest.mark.parametrize("config", [False, True])
def test_check_fix_keeps_to_the_projects_line_length(tmp_path: Path, config: bool) -> None:
    """From the checked files' project, or from the folder of `--config`; not with `--isolated`."""
    project = tmp_path / "settings" if config else tmp_path
    project.mkdir(exist_ok=True)
    (project / "pyproject.toml").write_text("[tool.torchdev-lint]\n\n[tool.ruff]\nline-length = 60\n")
    source = (
        "import torch\n\n\ndef run(x):\n    with torch.cuda.amp.autocast(enabled=False):\n        return x\n"
    )
    path = tmp_path / "train.py"
    path.write_text(source)
    assert main(["check", "--no-cache", "--isolated", "--fix", str(path)]) == 0
    assert path.read_text().count("\n") == source.count("\n")  # --isolated: no line length
    path.write_text(source)
    given = ["--config", str(project / "pyproject.toml")] if config else []
    assert main(["check", "--no-cache", *given, "--fix", str(path)]) == 0
    assert path.read_text() == ruff_formatted(path.read_text(), 60)
    assert max(len(line) for line in path.read_text().splitlines()) <= 60


def test_the_language_server_keeps_to_the_line_length_of_the_documents_project(tmp_path: Path) -> None:
    """Read again when a file it comes from changes."""
    from torchdev_lint.server.project import Projects

    document = tmp_path / "src" / "train.py"
    document.parent.mkdir()
    projects = Projects()
    assert projects.for_path(str(document)).settings.line_length is None
    (tmp_path / "setup.cfg").write_text("[flake8]\nmax-line-length = 80\n")
    assert projects.for_path(str(document)).settings.line_length == 80
    (tmp_path / "src" / "ruff.toml").write_text("line-length = 72\n")
    assert projects.for_path(str(document)).settings.line_length == 72


# No trailing whitespace, `)` where it was ------------------------------------------------------

LAYOUTS = [
    "({})",
    "(\n    {}\n)",
    "(\n    {},\n)",
    "({},\n)",
    "(  # note\n    {}\n)",
    "(\n    {}  # note\n)",
    "(\n    {},  # note\n)",
    "(\n    {},\n    # closing note\n)",
    "(\n\n    {}\n)",
    "({}\n )",
]


ARGUMENTS = {
    "torch.load": ("p", "p, weights_only=True"),
    "torch.cuda.amp.GradScaler": ("1.0", "1.0, enabled=use"),
    "torch.cuda.amp.autocast": ("True", "enabled=use, dtype=dt"),
}


@pytest.mark.parametrize("call", list(ARGUMENTS))
@given(layout=st.sampled_from(LAYOUTS), index=st.integers(0, 1))
@settings(max_examples=30, deadline=None, derandomize=True, database=None)
def test_added_arguments_keep_the_layout(call: str, layout: str, index: int) -> None:
    """Arguments a fix adds (`map_location=`, `"cuda"`) go where the call's layout puts them."""
    source = f"import torch\nstate = {call}{layout.format(ARGUMENTS[call][index])}\n"
    result = fixed(source, None, [TDL101, TDL312])
    assert result != source
    closers = [line.strip() for line in source.splitlines() if line.strip().startswith(")")]
    assert [line.strip() for line in result.splitlines() if line.strip().startswith(")")] == closers
    assert "# note" not in source or result.count("# note") == 1


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # A replacement keeps the parentheses around what it replaces, and their lines.
        (
            "def steps(device):\n    return (\n        torch.zeros(3).to(device)\n    )\n",
            "def steps(device):\n    return (\n        torch.zeros(3, device=device)\n    )\n",
        ),
        # A rewritten call keeps the line breaks of its arguments.
        (
            "buf = torch.cuda.FloatTensor(\n    4, 16\n)\n",
            'buf = torch.empty(\n    4, 16, dtype=torch.float32, device="cuda"\n)\n',
        ),
        (
            "x = x.type(\n    torch.cuda.HalfTensor\n)\n",
            'x = x.to(\n    "cuda",\n    torch.float16\n)\n',
        ),
        (
            "y = y.type(\n    torch.FloatTensor,\n    non_blocking=True,\n)\n",
            'y = y.to(\n    "cpu",\n    torch.float32,\n    non_blocking=True,\n)\n',
        ),
    ],
)
def test_rewritten_calls_keep_their_lines(source: str, expected: str) -> None:
    rules = [rules_by_code()["TDL203"], rules_by_code()["TDL307"]]
    assert fixed("import torch\n" + source, None, rules) == "import torch\n" + expected


@given(program=torch_programs(), limit=st.integers(30, 120))
@settings(max_examples=40, deadline=None, derandomize=True, database=None)
def test_fixed_files_gain_no_trailing_whitespace_at_any_line_length(program: str, limit: int) -> None:
    """The fixer-level property (it holds in every fuzz test too: `check_fix_properties`)."""
    outcome = check_fix_properties("fuzz.py", program.encode(), RULES, Settings(line_length=limit))
    assert not outcome.problems, f"{program}\n" + "\n".join(outcome.problems)


def _fixed_examples() -> list[object]:
    return [
        pytest.param(example, id=f"{rule.code}-{index}")
        for rule in all_rules()
        for index, example in enumerate(rule.invalid)
        if example.fixed is not None
    ]


@pytest.mark.parametrize("example", _fixed_examples())
def test_no_rule_example_fixes_into_trailing_whitespace(example: Invalid) -> None:
    assert example.fixed_source is not None
    assert not trailing_whitespace(example.source.encode(), example.fixed_source.encode())
