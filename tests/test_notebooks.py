"""Jupyter notebooks: checked as one program of their code cells, reported by cell, fixed in place.

Notebooks are made here with nbformat (as Jupyter writes them) or as JSON
text with another layout; what `--fix` writes is validated with nbformat and
compared byte for byte with what it should keep.
"""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

import jsonschema
import libcst as cst
import nbformat
import pytest
from cli_inputs import BAD, errors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdev_lint.cli import fix_main, main
from torchdev_lint.notebooks import Notebook
from torchdev_lint.rule import Fix, Rule
from torchdev_lint.runner import CheckOptions, process_file

SARIF_SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
LOAD = "`torch.load` without `map_location`"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", "--isolated", "--no-cache", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def notebook(*cells: str | tuple[str, str], outputs: bool = True) -> nbformat.NotebookNode:
    """A notebook of code cells (a `("markdown", text)` pair is a markdown cell), with outputs,
    execution counts and metadata that a fix must leave alone."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.4"}
    for count, cell in enumerate(cells, start=1):
        if isinstance(cell, tuple):
            nb.cells.append(nbformat.v4.new_markdown_cell(cell[1]))
            continue
        code = nbformat.v4.new_code_cell(cell, execution_count=count)
        code.metadata["tags"] = ["demo"]
        if outputs:
            code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"out {count}\n")]
        nb.cells.append(code)
    return nb


def write(path: Path, nb: nbformat.NotebookNode) -> bytes:
    nbformat.write(nb, str(path))
    return path.read_bytes()


# A model placed on CUDA in cell 3 and called in cell 6 with a CPU tensor made in cell 5.
CROSS = (
    "import torch\nimport torchvision",
    ("markdown", "# The model"),
    "model = torchvision.models.resnet18()\nmodel.cuda()\nmodel.eval()",
    ("markdown", "Some *text*"),
    "image = torch.randn(3, 224, 224)",
    "print(model(image.unsqueeze(0)))",
)


@pytest.fixture
def load_nb(tmp_path: Path) -> Path:
    """Findings in cells 3 and 5 (cell 2 is markdown); cell 4 holds magics."""
    path = tmp_path / "load.ipynb"
    write(
        path,
        notebook(
            "%matplotlib inline\nimport torch",
            ("markdown", "Load the weights"),
            "# weights\nstate = torch.load('model.pt')",
            "!pip install x\n%time y = 1",
            "if True:\n    other = torch.load('other.pt')",
        ),
    )
    return path


# Positions in every format ---------------------------------------------------------------------


def test_concise_and_text_name_the_cell(load_nb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--format", "concise", str(load_nb))
    assert code == 1
    assert [line.split(" TDL101 ")[0] for line in out.splitlines()] == [
        f"{load_nb}:cell 3:2:9:",
        f"{load_nb}:cell 5:2:13:",
    ]
    assert f"{load_nb}:cell 5:2:13: TDL101 {LOAD}" in out
    _, text, _ = run(capsys, "--show-fixes", str(load_nb))
    assert f"{load_nb}:cell 3:2:9: TDL101 [*] {LOAD}" in text
    assert "2 | state = torch.load('model.pt')\n  |         ^^^^^^^^^^^^^^^^^^^^^^\n" in text
    assert "  + state = torch.load('model.pt', map_location='cpu')" in text
    assert "2 |     other = torch.load('other.pt')" in text


def test_json_gives_the_cell_and_cell_relative_positions(
    load_nb: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(capsys, "--format", "json", str(load_nb))
    first, second = json.loads(out)
    assert (first["cell"], first["line"], first["column"], first["end_line"], first["end_column"]) == (
        3,
        2,
        9,
        2,
        31,
    )
    assert (second["cell"], second["line"], second["column"]) == (5, 2, 13)
    (edit,) = first["fix"]["edits"]
    assert edit == {
        "cell": 3,
        "line": 2,
        "column": 30,
        "end_line": 2,
        "end_column": 30,
        "content": ", map_location='cpu'",
    }


def test_github_and_sarif_give_the_cell_in_the_message(
    load_nb: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(load_nb.parent)
    _, out, _ = run(capsys, "--format", "github", load_nb.name)
    first = out.splitlines()[0]
    assert first.startswith("::error file=load.ipynb,title=TDL101 load-without-map-location::")
    assert first.endswith(
        f'::cell 3, line 2, column 9: TDL101 {LOAD} restores tensors to the device they were saved on; pass `map_location="cpu"` (or your device)'
    )
    _, out, _ = run(capsys, "--format", "sarif", load_nb.name)
    document = json.loads(out)
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(document)
    result = document["runs"][0]["results"][0]
    assert result["message"]["text"].startswith(f"cell 3, line 2, column 9: {LOAD}")
    assert result["properties"] == {"cell": 3, "line": 2, "column": 9, "endLine": 2, "endColumn": 31}
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "load.ipynb"


def test_cache_keeps_cell_positions(
    load_nb: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["check", "--isolated", "--cache-dir", str(tmp_path / "cache"), "--format", "json", str(load_nb)]
    main(argv)
    cold = capsys.readouterr().out
    main(argv)
    assert capsys.readouterr().out == cold
    assert '"cell": 5' in cold


# One program -------------------------------------------------------------------------------------


def test_cells_are_one_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The model of cell 3 is the model called in cell 6, as the same code in one file shows."""
    path = tmp_path / "cross.ipynb"
    write(path, notebook(*CROSS))
    script = tmp_path / "cross.py"
    script.write_text("\n".join(cell for cell in CROSS if isinstance(cell, str)) + "\n")
    _, out, _ = run(capsys, "--format", "json", str(path), str(script))
    found = {(d["path"].rsplit(".", 1)[1], d["code"]) for d in json.loads(out)}
    assert ("ipynb", "TDL302") in found and ("py", "TDL302") in found
    mismatch = next(d for d in json.loads(out) if d["code"] == "TDL302" and d["path"] == str(path))
    assert (mismatch["cell"], mismatch["line"], mismatch["column"]) == (6, 1, 7)


def test_a_hoisted_statement_stays_in_its_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fix inserting before a cell's first statement (TDL202 moves the module before the loop)
    writes into that cell, not the one above."""
    path = tmp_path / "loop.ipynb"
    write(
        path, notebook("import torch\nmodel = torch.nn.Linear(2, 2)", "for i in range(3):\n    model.cuda()")
    )
    assert main(["check", "--isolated", "--no-cache", "--select", "TDL202", "--fix", str(path)]) == 0
    cells = nbformat.read(str(path), 4).cells
    assert cells[0].source == "import torch\nmodel = torch.nn.Linear(2, 2)"
    assert cells[1].source.startswith("model.cuda()\nfor i in range(3):\n")


# Magics ------------------------------------------------------------------------------------------

MAGICS = (
    "%matplotlib inline\n%load_ext autoreload\nimport torch\n!pip install x\nfiles = !ls\nt = %timeit -o f()",
    "torch.load?\n?torch.save\ntorch.cuda??",
    "for i in range(2):\n    %time state = torch.load('a.pt')\n    !echo {i}",
    "%%bash\necho 'torch.load(\"x\")'\n  if true; then ls; fi",
    "%%writefile helper.py\nimport torch\nw = torch.load('w.pt')",
    "%%time\nstate = torch.load('b.pt')",
    "x = (1\n     % 2)\ntext = '''\n%not a magic\n!nor this\n'''\nratio = 3 % 2",
)


def test_magics_never_cause_errors_or_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "magics.ipynb"
    write(path, notebook(*MAGICS))
    code, out, err = run(capsys, "--format", "concise", str(path))
    assert code == 1, err
    # Only the %%time body is analysed as Python; magic lines, %%bash and %%writefile are not.
    assert [line.split(" TDL")[0] for line in out.splitlines()] == [f"{path}:cell 6:2:9:"]


def test_magics_are_never_altered_by_fixes(tmp_path: Path) -> None:
    path = tmp_path / "magics.ipynb"
    before = write(path, notebook(*MAGICS))
    assert main(["check", "--isolated", "--no-cache", "--fix", "--select", "TDL101", str(path)]) == 0
    cells = nbformat.read(str(path), 4).cells
    for number, source in enumerate(MAGICS):
        expected = source.replace("torch.load('b.pt')", "torch.load('b.pt', map_location='cpu')")
        assert cells[number].source == expected
    _only_fixed_lines_differ(before, path.read_bytes(), {"torch.load('b.pt')"})


def test_program_masks_magics_line_for_line() -> None:
    raw = nbformat.writes(notebook(*MAGICS)).encode()
    nb = Notebook("m.ipynb", raw)
    program = nb.program
    compile(program, "program", "exec")
    where = nb.positions(program)
    lines = program.splitlines()
    for number, text in enumerate(lines, start=1):
        cell, line = where.cell_line(number)
        if cell and f"{nb.tag}-magic" not in text:
            assert "".join(nb.data["cells"][cell - 1]["source"]).splitlines()[line - 1] == text
            assert where.program_line(cell, line) == number
    assert "%" not in "".join(line for line in lines if "pass  #" in line)
    assert nb.rebuild(program.encode()) == raw


# Fixing ------------------------------------------------------------------------------------------


def _only_fixed_lines_differ(before: bytes, after: bytes, fixed: set[str]) -> None:
    """The file changed only in source lines holding one of `fixed`, and is a valid notebook."""
    nbformat.validate(nbformat.reads(after.decode(), 4))
    diff = [
        line
        for line in difflib.unified_diff(before.decode().splitlines(), after.decode().splitlines(), n=0)
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]
    assert diff, "nothing changed"
    removed = [line for line in diff if line.startswith("-")]
    assert all(any(text in line for text in fixed) for line in removed), diff


def test_fix_rewrites_only_the_fixed_cells(load_nb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = load_nb.read_bytes()
    original = json.loads(before)
    assert fix_main(["--isolated", "--no-cache", str(load_nb)]) == 0
    capsys.readouterr()
    after = load_nb.read_bytes()
    _only_fixed_lines_differ(before, after, {"torch.load('model.pt')", "torch.load('other.pt')"})
    fixed = json.loads(after)
    assert fixed["metadata"] == original["metadata"]
    for number, (old, new) in enumerate(zip(original["cells"], fixed["cells"], strict=True), start=1):
        if number in (3, 5):
            assert new["source"] != old["source"]
            new = {**new, "source": old["source"]}
        assert new == old  # outputs, execution counts, ids, metadata
    assert fixed["cells"][2]["source"] == [
        "# weights\n",
        "state = torch.load('model.pt', map_location='cpu')",
    ]
    assert after.endswith(b"}\n") and after.count(b"\n") == before.count(b"\n")
    # A second run finds nothing to fix and writes nothing.
    assert main(["check", "--isolated", "--no-cache", "--fix", str(load_nb)]) == 0
    assert load_nb.read_bytes() == after


def test_fix_keeps_another_layout(tmp_path: Path) -> None:
    """Indentation 2, unsorted keys, non-ASCII escaped, a source stored as one string: all kept."""
    data = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"language_info": {"name": "python"}},
        "cells": [
            {
                "source": ["import torch\n", "# caf\u00e9 \u2603\n", "state = torch.load('m.pt')\n", "x = 1"],
                "cell_type": "code",
                "outputs": [],
                "metadata": {},
                "id": "a1",
                "execution_count": None,
            },
            {
                "cell_type": "code",
                "id": "b2",
                "metadata": {},
                "execution_count": 7,
                "outputs": [],
                "source": "other = torch.load('o.pt')\nprint('\u00e9')\n",
            },
        ],
    }
    path = tmp_path / "layout.ipynb"
    before = json.dumps(data, indent=2, ensure_ascii=True).encode()  # no final newline either
    path.write_bytes(before)
    assert main(["check", "--isolated", "--no-cache", "--fix", str(path)]) == 0
    after = path.read_bytes()
    data["cells"][0]["source"][2] = "state = torch.load('m.pt', map_location='cpu')\n"
    data["cells"][1]["source"] = "other = torch.load('o.pt', map_location='cpu')\nprint('\u00e9')\n"
    assert after == json.dumps(data, indent=2, ensure_ascii=True).encode()


def test_fix_fills_an_indented_list_from_a_compact_one(tmp_path: Path) -> None:
    """A one-line JSON file stays one line."""
    nb = notebook("import torch\nstate = torch.load('m.pt')")
    path = tmp_path / "compact.ipynb"
    path.write_text(json.dumps(nb))
    assert main(["check", "--isolated", "--no-cache", "--fix", str(path)]) == 0
    nb.cells[0].source = "import torch\nstate = torch.load('m.pt', map_location='cpu')"
    assert json.loads(path.read_text()) == json.loads(json.dumps(nb))
    assert "\n" not in path.read_text()


def test_diff_is_the_json_patch_of_fix(
    load_nb: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = load_nb.read_bytes()
    code, diff, _ = run(capsys, "--diff", str(load_nb))
    assert code == 1 and load_nb.read_bytes() == before
    assert "-    \"state = torch.load('model.pt')\"\n" in diff
    assert "+    \"state = torch.load('model.pt', map_location='cpu')\"\n" in diff
    copy = tmp_path / "copy.ipynb"
    copy.write_bytes(before)
    subprocess.run(["patch", "-s", str(copy)], input=diff.encode(), check=True)
    run(capsys, "--fix", str(load_nb))
    assert copy.read_bytes() == load_nb.read_bytes()


def test_noqa_in_a_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "noqa.ipynb"
    write(
        path, notebook("import torch\nstate = torch.load('a.pt')  # noqa: TDL101", "x = torch.load('b.pt')")
    )
    _, out, _ = run(capsys, "--format", "concise", str(path))
    assert [line.split(": TDL")[0] for line in out.splitlines()] == [f"{path}:cell 2:1:5"]


class _DropCellMarker(Rule):
    """Test rule: its fix removes the lines above a cell's first statement (its marker)."""

    code, name, message, fix_availability = "TDL901", "drop-marker", "test", "always"
    docs, triggers = "", ("",)

    def visit_Module(self, node: cst.Module) -> None:
        statement = next(s for s in node.body if "fix_me" in cst.Module([]).code_for_node(s))
        index = node.body.index(statement)
        previous = node.body[index - 1]
        self.report(statement, fix=Fix("safe", "drop", {previous: cst.RemoveFromParent()}))


class _IndentMagic(Rule):
    """Test rule: its fix wraps a loop (whose body holds a magic) in `if True:`."""

    code, name, message, fix_availability = "TDL902", "indent-magic", "test", "always"
    docs, triggers = "", ("",)

    def visit_For(self, node: cst.For) -> None:
        wrapped = cst.If(test=cst.Name("True"), body=cst.IndentedBlock([node]))
        self.report(node, fix=Fix("safe", "wrap", {node: wrapped}))


@pytest.mark.parametrize(
    ("rule", "cells", "reason"),
    [
        (_DropCellMarker, ("a = 1", "fix_me = 2"), "it would cross a cell boundary"),
        (_IndentMagic, ("for i in range(2):\n    %time f(i)",), "it would change an IPython magic"),
    ],
)
def test_fixes_across_cells_or_into_magics_are_refused(
    tmp_path: Path, rule: type[Rule], cells: tuple[str, ...], reason: str
) -> None:
    path = tmp_path / "refused.ipynb"
    before = write(path, notebook(*cells))
    report = process_file(str(path), CheckOptions(rules=(rule,), fix=True))
    assert report.error is None and report.fixed == 0
    (diagnostic,) = report.diagnostics
    assert diagnostic.fix is not None and diagnostic.fix.not_applied == reason
    assert path.read_bytes() == before
    check = process_file(str(path), CheckOptions(rules=(rule,)))
    assert check.diagnostics[0].fix is not None and check.diagnostics[0].fix.not_applied == reason


# Bad notebooks and file selection ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"cells": [', "not a valid notebook: invalid JSON: Expecting value: line 1 column 12"),
        (b"[1, 2]", "not a valid notebook: the JSON is not an object"),
        (b'{"worksheets": [], "nbformat": 3}', "not a valid notebook: nbformat 3 is not supported"),
        (b'{"cells": [{"cell_type": "code"}]}', "not a valid notebook: cell 1 has no source text"),
        (b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5, "extra": 1}', None),
        (b"\xff\xfe{}", "not a valid notebook: not UTF-8"),
    ],
)
def test_bad_notebook_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str | None
) -> None:
    (tmp_path / "a_good.py").write_text(BAD)
    bad = tmp_path / "m_bad.ipynb"
    bad.write_bytes(content)
    code, out, err = run(capsys, "--format", "concise", str(tmp_path))
    assert f"{tmp_path / 'a_good.py'}:3:9: TDL101" in out
    if reason is None:  # valid enough: nbformat allows extra top-level keys in relaxed mode
        assert code == 1 and errors(err) == []
        return
    assert code == 2
    (line,) = errors(err)
    assert line.startswith(f"torchdev-lint: error: {bad}: {reason}"), line
    assert bad.read_bytes() == content


def test_nbformat_schema_errors_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "schema.ipynb"
    nb = json.loads(nbformat.writes(notebook("import torch")))
    nb["cells"][0]["cell_type"] = "cod"
    path.write_text(json.dumps(nb))
    code, _, err = run(capsys, str(path))
    assert code == 2
    (line,) = errors(err)
    assert f"{path}: not a valid notebook: nbformat schema: at cells/0:" in line


def test_syntax_error_names_the_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "syntax.ipynb"
    write(path, notebook("import torch", ("markdown", "x"), "a = 1\nb = (2,\nc = torch.load('x')"))
    code, _, err = run(capsys, str(path))
    assert code == 2
    (line,) = errors(err)
    assert f"{path}: syntax error in cell 3 at line 2" in line


def test_other_languages_are_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = notebook("library(torch)\nx <- torch_load('a.pt')")
    nb.metadata["kernelspec"]["language"] = "R"
    nb.metadata["language_info"]["name"] = "R"
    path = tmp_path / "r.ipynb"
    write(path, nb)
    assert run(capsys, str(path))[0] == 0


def test_folders_include_notebooks_unless_configured_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nb").mkdir()
    write(tmp_path / "nb" / "a.ipynb", notebook("import torch\ntorch.load('a.pt')"))
    (tmp_path / "b.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    _, out, _ = run(capsys, "--format", "concise", ".")
    assert [line.split(":")[0] for line in out.splitlines()] == ["b.py", "nb/a.ipynb"]
    _, out, _ = run(capsys, "--format", "concise", "--extend-exclude", "nb", ".")
    assert [line.split(":")[0] for line in out.splitlines()] == ["b.py"]
    (tmp_path / "pyproject.toml").write_text("[tool.torchdev-lint]\ninclude-notebooks = false\n")
    main(["check", "--no-cache", "--format", "concise", "."])
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == ["b.py"]
    main(["check", "--no-cache", "--format", "concise", "nb/a.ipynb"])  # named: checked anyway
    assert capsys.readouterr().out.startswith("nb/a.ipynb:cell 1:2:1: TDL101")
    (tmp_path / "pyproject.toml").write_text('[tool.torchdev-lint]\ninclude-notebooks = "no"\n')
    assert main(["check", "--no-cache", "."]) == 2
    assert 'include-notebooks = "no": expected true or false' in capsys.readouterr().err


def test_positions_map_both_ways_after_an_insertion_at_the_top() -> None:
    """Lines a fix puts above the first cell's marker belong to that cell (as written back)."""
    nb = Notebook("n.ipynb", nbformat.writes(notebook(("markdown", "m"), "a = 1\nb = 2", "c = 3")).encode())
    program = "import os\n" + nb.program
    assert nb.cell_texts(program) == ["import os\na = 1\nb = 2", "c = 3"]
    where = nb.positions(program)
    cells = [where.cell_line(line) for line in range(1, 7)]
    assert cells == [(2, 1), (0, 0), (2, 2), (2, 3), (0, 0), (3, 1)]
    assert [where.program_line(cell, line) for cell, line in cells if cell] == [1, 3, 4, 6]


def test_a_coding_cookie_in_a_cell_does_not_change_the_encoding(tmp_path: Path) -> None:
    path = tmp_path / "cookie.ipynb"
    write(path, notebook("# -*- coding: latin-1 -*-\nimport torch\nx = torch.load('\u00e9\u2603.pt')"))
    assert main(["check", "--isolated", "--no-cache", "--fix", str(path)]) == 0
    source = nbformat.read(str(path), 4).cells[0].source
    assert source.endswith("x = torch.load('\u00e9\u2603.pt', map_location='cpu')")


# Properties ----------------------------------------------------------------------------------------

_POOL = [
    "import torch",
    "x = torch.ones(2)",
    "%matplotlib inline",
    "!pip install x",
    "files = !ls",
    "torch.load?",
    "?torch.save",
    "for i in range(2):",
    "    %time y = i",
    "    z = i % 2",
    "s = '''",
    "%inside a string",
    "'''",
    "t = (1,",
    "     % 2)",
    "# caf\u00e9 \u2603 comment",
    "",
    "    ",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cells=st.lists(
        st.tuples(
            st.sampled_from(["code", "code", "markdown"]),
            st.lists(st.sampled_from(_POOL), max_size=6),
            st.booleans(),  # trailing newline
            st.sampled_from(["", "%%time\n", "%%bash\n"]),
        ),
        max_size=5,
    ),
    edit=st.integers(min_value=0, max_value=50),
)
def test_round_trip_and_positions(cells: list[tuple[str, list[str], bool, str]], edit: int) -> None:
    """Any notebook: its program goes back unchanged, every cell line has one program line, and
    a changed line changes only its own cell's source in the file."""
    nb = nbformat.v4.new_notebook()
    for kind, lines, newline, magic in cells:
        text = magic + "\n".join(lines) + ("\n" if newline and lines else "")
        nb.cells.append(
            nbformat.v4.new_code_cell(text) if kind == "code" else nbformat.v4.new_markdown_cell(text)
        )
    raw = (nbformat.writes(nb) + "\n").encode()
    notebook_ = Notebook("p.ipynb", raw)
    program = notebook_.program
    assert notebook_.rebuild(program.encode()) == raw
    texts = ["".join(c["source"]) for c in notebook_.data["cells"] if c["cell_type"] == "code"]
    assert notebook_.cell_texts(program) == texts
    where = notebook_.positions(program)
    program_lines = program.splitlines()
    editable = []
    for number, text in enumerate(program_lines, start=1):
        cell, line = where.cell_line(number)
        if not cell:
            continue
        assert where.program_line(cell, line) == number
        source = "".join(notebook_.data["cells"][cell - 1]["source"])
        original = source.splitlines()[line - 1]
        if f"{notebook_.tag}-magic" in text:
            assert source.startswith("%%bash") or (
                original.lstrip()[:1] in ("%", "!", "?")
                or original.rstrip().endswith("?")
                or "= !" in original
            )
        else:
            assert text == original
            editable.append(number)
    if not editable:
        return
    number = editable[edit % len(editable)]
    changed = program_lines[:]
    changed[number - 1] += "  # fixed"
    after = notebook_.rebuild(("\n".join(changed) + "\n").encode())
    nbformat.validate(nbformat.reads(after.decode(), 4))
    cell, _ = where.cell_line(number)
    before_cells, after_cells = json.loads(raw)["cells"], json.loads(after)["cells"]
    assert [c for i, c in enumerate(after_cells) if i != cell - 1] == [
        c for i, c in enumerate(before_cells) if i != cell - 1
    ]
    assert "# fixed" in "".join(after_cells[cell - 1]["source"])
