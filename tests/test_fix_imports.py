"""A fix that removes the last use of an imported name removes the import (issue 24).

TDL312 rewrites `autocast(...)` of `from torch.cuda.amp import autocast` into
`torch.amp.autocast("cuda", ...)`; ruff's F401 would then fire on the fixed
file. The fixer removes such imports after every round, for every rule
(`torchdev_lint/fix_imports.py`); a test rule (`legacy(...)` becomes
`modern.call(...)`) reaches the cases TDL312 cannot.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import nbformat
import pytest
from test_edits import apply_edits
from test_notebooks import notebook, write

from torchdev_lint.cli import main
from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import add_edits, fix_source
from torchdev_lint.rule import Fix, Rule, rules_by_code

TDL312 = rules_by_code()["TDL312"]


class LegacyCall(Rule):
    """For the tests: `legacy(...)`, however imported, becomes `modern.call()`."""

    code = "TDL999"
    name = "legacy-call"
    message = "Legacy call"
    fix_availability = "always"
    triggers = ("legacy",)
    docs = ""

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "legacy":
            new = cst.parse_expression("modern.call()")
            self.report(node, fix=Fix("safe", "Call modern", {node: new}))


def fixed(source: str, rule: type[Rule] = LegacyCall, path: str = "example.py", **settings: object) -> str:
    outcome = fix_source(path, textwrap.dedent(source).encode(), [rule], Settings(**settings))  # type: ignore[arg-type]
    again = fix_source(path, outcome.source, [rule], Settings(**settings))  # type: ignore[arg-type]
    assert again.source == outcome.source, "fixing twice must equal fixing once"
    compile(outcome.source, path, "exec")
    return outcome.source.decode()


def same(text: str) -> str:
    return textwrap.dedent(text)


def test_tdl312_removes_the_import_it_leaves_unused() -> None:
    source = """\
        import os

        import torch
        from torch.cuda.amp import autocast, GradScaler

        scaler = GradScaler()
        with autocast():
            pass
        """
    assert fixed(source, TDL312) == same("""\
        import os

        import torch

        scaler = torch.amp.GradScaler("cuda")
        with torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True):
            pass
        """)


def test_a_name_still_used_stays_and_layout_is_kept() -> None:
    source = """\
        import torch
        from torch.cuda.amp import (
            GradScaler,
            autocast,  # the old spelling
        )
        from torch.cuda.amp import (
            autocast as ac,
            GradScaler as GS,
        )

        with ac():
            pass
        scaler = GS()
        """
    # Target 2.1: GradScaler has no replacement yet; `autocast` has a comment on its line: kept.
    assert fixed(source, TDL312, target_torch_version=(2, 1)) == same("""\
        import torch
        from torch.cuda.amp import (
            GradScaler,
            autocast,  # the old spelling
        )
        from torch.cuda.amp import (
            GradScaler as GS,
        )

        with torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True):
            pass
        scaler = GS()
        """)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # Nested scopes, several names on one line, a block left empty, semicolons.
        (
            "from m import legacy, other\ndef f():\n    return legacy(), other\n",
            "from m import other\ndef f():\n    return modern.call(), other\n",
        ),
        # `spare` was unused before the fix: a re-export perhaps, not ours to judge.
        ("from m import spare, legacy\nlegacy()\n", "from m import spare\nmodern.call()\n"),
        ("from m import legacy, spare\nlegacy(spare)\n", "modern.call()\n"),  # both were used
        (
            "import torch\nif torch.cuda.is_available():\n    from m import legacy\n    legacy()\n",
            "import torch\nif torch.cuda.is_available():\n    modern.call()\n",
        ),
        ("if x:\n    from m import legacy\nlegacy()\n", "if x:\n    pass\nmodern.call()\n"),
        ("if x: from m import legacy\nlegacy()\n", "if x: pass\nmodern.call()\n"),
        ("import a; from m import legacy; b = 1\nlegacy()\n", "import a; b = 1\nmodern.call()\n"),
        ("import a; from m import legacy\nlegacy()\n", "import a\nmodern.call()\n"),
        ("def f():\n    from m import legacy\n    return legacy()\n", "def f():\n    return modern.call()\n"),
        # Comment lines above a removed import stay; blank lines meeting there count as before.
        (
            "import a\n\n# helpers\nfrom m import legacy\n\nlegacy()\n",
            "import a\n\n# helpers\n\nmodern.call()\n",
        ),
        ("import a\n\nfrom m import legacy\n\n\nlegacy()\n", "import a\n\n\nmodern.call()\n"),
        ("from m import legacy\n# last\n", None),  # unused before: untouched (no finding either)
    ],
)
def test_removal_keeps_the_layout(source: str, expected: str | None) -> None:
    assert fixed(source) == (source if expected is None else expected)


@pytest.mark.parametrize(
    "source",
    [
        # Exported by name, or looked up by name.
        'from m import legacy\n__all__ = ["legacy"]\nlegacy()\n',
        'from m import legacy\nhandler = globals()["legacy"]\nlegacy()\n',
        # `import x as x` marks a re-export.
        "from m import legacy as legacy\nlegacy()\n",
        # A feature probe: every import of a try that catches ImportError stays.
        "try:\n    from m import legacy\nexcept ImportError:\n    legacy = None\nlegacy()\n",
        "try:\n    from m import legacy\nexcept (AttributeError, ModuleNotFoundError):\n    pass\nlegacy()\n",
        # The comment on the import's line would go with it.
        "from m import legacy  # noqa: F401\nlegacy()\n",
        "from m import (  # helpers\n    legacy,\n)\nlegacy()\n",
        # `from __future__` imports are never removed.
        "from __future__ import annotations\nlegacy(annotations)\n",
    ],
)
def test_imports_that_stay(source: str) -> None:
    before_call = source[: source.rindex("legacy(")]
    assert fixed(source) == before_call + "modern.call()\n"


def test_import_a_b_stays_while_a_is_used() -> None:
    source = """\
        import torch.cuda.amp

        with torch.cuda.amp.autocast():
            pass
        """
    assert fixed(source, TDL312) == same("""\
        import torch.cuda.amp

        with torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True):
            pass
        """)


def test_a_use_the_fix_adds_is_imported() -> None:
    """TDL312 writes `torch.amp...` only where `torch` is bound: without `import torch` the finding
    has no fix, and the file stays as it is (nothing unbound is ever written)."""
    source = "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n"
    outcome = fix_source("example.py", source.encode(), [TDL312], Settings())
    assert outcome.source.decode() == source
    assert [d.code for d in outcome.reported] == ["TDL312"]
    assert outcome.reported[0].fix is None


@pytest.mark.parametrize("name", ["pkg/__init__.py", "stubs.pyi"])
def test_package_inits_and_stubs_keep_their_imports(name: str) -> None:
    """What a package's `__init__.py` or a stub imports is its interface."""
    assert fixed("from m import legacy\nlegacy()\n", path=name) == "from m import legacy\nmodern.call()\n"


def test_json_edits_of_a_fix_include_the_removal() -> None:
    """An editor applying a fix's edits gets what `--fix` writes."""
    source = "import torch\nfrom torch.cuda.amp import autocast\n\nwith autocast():\n    pass\n"
    result = check_source("example.py", source, [TDL312], Settings())
    add_edits(result)
    (diagnostic,) = result.diagnostics
    assert diagnostic.fix is not None
    after = apply_edits(source, diagnostic.fix.edits)
    assert after == fixed(source, TDL312)
    assert "torch.cuda.amp" not in after


def test_notebook_cells_lose_the_import_and_keep_their_boundaries(tmp_path: Path) -> None:
    """The program of a notebook's cells is one module: the import of cell 1 goes with the use in
    cell 3; a cell that held only the import is left empty, every other cell as it was."""
    path = tmp_path / "amp.ipynb"
    cells = notebook(
        "import torch\nfrom torch.cuda.amp import autocast, GradScaler",
        "from torch.cuda.amp import autocast as ac",
        ("markdown", "Train"),
        "scaler = GradScaler()\nwith autocast():\n    pass",
        "with ac():\n    y = 1",
    )
    write(path, cells)
    assert main(["check", "--isolated", "--no-cache", "--select", "TDL312", "--fix", str(path)]) == 0
    written = nbformat.read(str(path), 4)
    nbformat.validate(written)
    assert [cell.source for cell in written.cells] == [
        "import torch",
        "",
        "Train",
        'scaler = torch.amp.GradScaler("cuda")\n'
        'with torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True):\n    pass',
        'with torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=True):\n    y = 1',
    ]
    assert [cell.get("outputs") for cell in written.cells] == [cell.get("outputs") for cell in cells.cells]
