"""The project-wide analysis, first boundary: a gate in another file of the project.

A GPU-only program whose `utils.init_distributed_mode()` exits, raises or asserts
without CUDA (or joins an NCCL process group): every `.cuda()` after a call of it
cannot fail for want of a GPU, so TDL301/TDL311 stay silent there. Each project
here is a few files written into tmp_path; each silent case has a look-alike that
must still be flagged (the helper only warns, returns early, is called after the
move or in one branch only).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest
from multifile import file_name, findings, record_checks, write_files

from torchdev_lint.analysis.project.index import ProjectIndex
from torchdev_lint.analysis.project.project_facts import project_facts
from torchdev_lint.analysis.project.summaries import digest, summarize
from torchdev_lint.cache import ResultCache
from torchdev_lint.engine import parse

GATE = """
    import sys
    import torch

    def init_distributed_mode(args):
        if not torch.cuda.is_available():
            sys.exit("this program needs a GPU")
        torch.distributed.init_process_group(backend="nccl")
"""
# The same helper used so that the program may go on without CUDA.
WARNS = """
    import warnings
    import torch

    def init_distributed_mode(args):
        if not torch.cuda.is_available():
            warnings.warn("no GPU: running on the CPU")
"""
RETURNS = """
    import os
    import torch

    def init_distributed_mode(args):
        if "RANK" not in os.environ:
            print("Not using distributed mode")
            args.distributed = False
            return
        torch.cuda.set_device(args.gpu)
        torch.distributed.init_process_group(backend="nccl")
"""
MAIN = """
    import torch
    {imports}

    def main(args):
        {call}(args)
        model = torch.nn.Linear(2, 2).cuda()
        return model
"""


_write = write_files


def _main(imports: str, call: str) -> str:
    return dedent(MAIN).format(imports=imports, call=call)


def _findings(root: Path, *names: str, cache: ResultCache | None = None, jobs: int = 1) -> list[str]:
    """`path:line code` of each TDL301/TDL311 finding, checking `names` (all .py files if none)."""
    return findings(root, ("TDL301", "TDL311"), *names, cache=cache, jobs=jobs)


# The project index ---------------------------------------------------------


def test_root_is_the_nearest_project_marker(tmp_path: Path) -> None:
    _write(tmp_path, {"setup.cfg": "", "tools/train.py": "", "inner/pyproject.toml": "", "inner/a/b.py": ""})
    index = ProjectIndex()
    assert index.root(str(tmp_path / "tools/train.py")) == str(tmp_path)
    assert index.root(str(tmp_path / "inner/a/b.py")) == str(tmp_path / "inner")


def test_locate_packages_namespaces_src_and_scripts(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pyproject.toml": "",
            "src/pkg/__init__.py": "",
            "src/pkg/utils.py": "",
            "src/pkg/engine/__init__.py": "",
            "src/pkg/engine/loop.py": "",
            "src/pkg/ns/deep.py": "",  # a namespace folder (no __init__.py)
            "tools/train.py": "",
            "tools/helpers.py": "",
        },
    )
    index = ProjectIndex()
    loop = str(tmp_path / "src/pkg/engine/loop.py")
    utils = str(tmp_path / "src/pkg/utils.py")
    assert index.locate(loop, 0, "pkg.utils.init") == (utils, ("init",))
    assert index.locate(loop, 2, "utils.init") == (utils, ("init",))  # from ..utils import init
    assert index.locate(loop, 1, "") == (str(tmp_path / "src/pkg/engine/__init__.py"), ())
    assert index.locate(loop, 0, "pkg.ns.deep.f") == (str(tmp_path / "src/pkg/ns/deep.py"), ("f",))
    assert index.locate(loop, 0, "pkg.engine.run") == (str(tmp_path / "src/pkg/engine/__init__.py"), ("run",))
    train = str(tmp_path / "tools/train.py")
    assert index.locate(train, 0, "helpers.setup") == (str(tmp_path / "tools/helpers.py"), ("setup",))
    assert index.locate(train, 0, "torch.cuda.set_device") is None  # third-party stays opaque
    assert index.locate(train, 0, "pkg.missing.f") == (
        str(tmp_path / "src/pkg/__init__.py"),
        ("missing", "f"),
    )


# Summaries ------------------------------------------------------------------


def test_summary_is_plain_data_with_a_stable_hash() -> None:
    source = dedent(
        """
        import sys
        import torch
        from . import dist
        from .log import *

        def setup(args):
            dist.init(args)
            if not torch.cuda.is_available():
                raise SystemExit("GPU only")

        class Trainer:
            def prepare(self):
                self.setup_cuda()

            def setup_cuda(self):
                assert torch.cuda.is_available()

        def early(args):
            if args.cpu:
                return
            torch.cuda.set_device(0)

        def generator():
            torch.cuda.set_device(0)
            yield
        """
    )
    summary = summarize(parse("x.py", source), "x.py")
    assert summary["functions"] == {
        "setup": {"then": "gate", "calls": [["module", 1, "dist.init"]]},
        "Trainer.prepare": {"then": "gate", "calls": []},  # `self.setup_cuda()` gates in the file
        "Trainer.setup_cuda": {"then": "gate", "calls": []},
    }  # `early` returns before its gate and `generator` runs nothing when called: left out
    assert summary["sites"]["dist.init"] == ["module", 1, "dist.init"]
    assert summary["stars"] == [[1, "log"]]
    edited = source.replace('raise SystemExit("GPU only")', 'raise SystemExit("needs a GPU")')
    assert digest(summarize(parse("x.py", edited), "x.py")) == digest(summary)


# The boundary: silent after a gate in another file, flagged in look-alikes --------------


@pytest.mark.parametrize(
    ("files", "imports", "call"),
    [
        ({"utils.py": GATE}, "import utils", "utils.init_distributed_mode"),
        ({"utils.py": GATE}, "from utils import init_distributed_mode", "init_distributed_mode"),
        ({"utils.py": GATE}, "from utils import *", "init_distributed_mode"),
        ({"misc/utils.py": GATE}, "import misc.utils as u", "u.init_distributed_mode"),
    ],
    ids=["import-module", "from-import", "star-import", "import-as"],
)
def test_scripts_beside_each_other(tmp_path: Path, files: dict[str, str], imports: str, call: str) -> None:
    _write(tmp_path, {".git/HEAD": "", **files, "main.py": _main(imports, call)})
    assert _findings(tmp_path) == []
    assert _findings(tmp_path, "main.py") == []  # the helper's file need not be checked


@pytest.mark.parametrize(
    "imports,call",
    [
        ("from . import utils", "utils.init_distributed_mode"),
        ("from .utils import init_distributed_mode", "init_distributed_mode"),
        ("from .utils import init_distributed_mode as setup", "setup"),
        ("import pkg.utils as u", "u.init_distributed_mode"),
        ("import pkg.utils", "pkg.utils.init_distributed_mode"),
        ("from pkg import init_distributed_mode", "init_distributed_mode"),  # re-exported by __init__
    ],
)
def test_src_layout_package(tmp_path: Path, imports: str, call: str) -> None:
    _write(
        tmp_path,
        {
            "pyproject.toml": "",
            "src/pkg/__init__.py": "from .utils import *\n",
            "src/pkg/utils.py": "from .dist import init_distributed_mode\n",
            "src/pkg/dist.py": GATE,
            "src/pkg/train.py": _main(imports, call),
        },
    )
    assert _findings(tmp_path) == []


def test_gate_reached_through_a_chain_of_helpers(tmp_path: Path) -> None:
    """main → setup.prepare (no CUDA word of its own) → dist.init_distributed_mode (exits)."""
    _write(
        tmp_path,
        {
            "setup.py": "",
            "dist.py": GATE,
            "prepare.py": "import dist\n\ndef prepare(args):\n    args.seed = 0\n    dist.init_distributed_mode(args)\n",
            "main.py": _main("from prepare import prepare", "prepare"),
        },
    )
    assert _findings(tmp_path) == []


@pytest.mark.parametrize("helper", [WARNS, RETURNS], ids=["warns", "returns-early"])
def test_look_alike_helpers_do_not_silence(tmp_path: Path, helper: str) -> None:
    _write(
        tmp_path,
        {"setup.py": "", "utils.py": helper, "main.py": _main("import utils", "utils.init_distributed_mode")},
    )
    assert _findings(tmp_path) == ["main.py:7 TDL301"]


def test_gate_called_after_the_move_or_in_one_branch(tmp_path: Path) -> None:
    main = """
        import torch
        import utils

        def after(args):
            model = torch.nn.Linear(2, 2).cuda()
            utils.init_distributed_mode(args)

        def branch(args):
            if args.distributed:
                utils.init_distributed_mode(args)
            model = torch.nn.Linear(2, 2).cuda()

        def gated(args):
            utils.init_distributed_mode(args)
            model = torch.nn.Linear(2, 2).cuda()
    """
    _write(tmp_path, {"setup.py": "", "utils.py": GATE, "main.py": main})
    assert _findings(tmp_path) == ["main.py:6 TDL301", "main.py:12 TDL301"]


def test_recursion_across_files_proves_nothing(tmp_path: Path) -> None:
    a = "import b\nimport torch\n\ndef ping(n):\n    b.pong(n)\n    torch.cuda.set_device(0)\n"
    b = "import a\nimport torch\n\ndef pong(n):\n    a.ping(n - 1)\n    return torch.cuda.is_available()\n"
    _write(tmp_path, {"setup.py": "", "a.py": a, "b.py": b, "main.py": _main("import b", "b.pong")})
    facts = project_facts([str(tmp_path / n) for n in ("a.py", "b.py", "main.py")], parse)
    # ping gates (set_device after pong returns); pong calls ping first, so it gates too.
    assert facts.of(str(tmp_path / "main.py")) is not None
    assert _findings(tmp_path) == []
    loop = "import c\n\ndef spin(n):\n    c.spin(n)\n\ndef cuda():\n    raise RuntimeError('cuda')\n"
    _write(tmp_path, {"c.py": loop, "main.py": _main("import c", "c.spin")})
    assert _findings(tmp_path, "c.py", "main.py") == ["main.py:7 TDL301"]


def test_same_results_with_workers(tmp_path: Path) -> None:
    files = {"setup.py": "", "utils.py": GATE}
    for index in range(12):
        call = "utils.init_distributed_mode" if index % 2 else "print"
        files[f"script{index:02}.py"] = _main("import utils", call)
    _write(tmp_path, files)
    serial = _findings(tmp_path)
    assert serial == [f"script{i:02}.py:7 TDL301" for i in range(0, 12, 2)]
    assert _findings(tmp_path, jobs=2) == serial


# Cache: keyed on the facts a file uses, not on its dependencies' text ------------------


def test_cache_keeps_entries_when_no_fact_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = record_checks(monkeypatch, file_name)
    cache = ResultCache.open(str(tmp_path / ".cache"))
    project = tmp_path / "project"
    _write(
        project,
        {"setup.py": "", "utils.py": GATE, "main.py": _main("import utils", "utils.init_distributed_mode")},
    )
    assert _findings(project, cache=cache) == []
    assert sorted(checked) == ["main.py", "setup.py", "utils.py"]

    # A body edit that leaves init_distributed_mode gating: only utils.py is checked again.
    checked.clear()
    _write(
        project,
        {"utils.py": dedent(GATE).replace("this program needs a GPU", "a GPU is required") + "\nX = 1\n"},
    )
    assert _findings(project, cache=cache) == []
    assert checked == ["utils.py"]

    # An edit that makes it only warn: main.py is checked again, and flagged.
    checked.clear()
    _write(project, {"utils.py": WARNS})
    assert _findings(project, cache=cache) == ["main.py:7 TDL301"]
    assert sorted(checked) == ["main.py", "utils.py"]


def test_warm_cli_run_sees_a_changed_dependency(tmp_path: Path) -> None:
    """The CLI's whole-run cache answer recomputes the facts: editing a helper that is not
    checked (only main.py is) still changes main.py's result."""
    _write(
        tmp_path,
        {"setup.py": "", "utils.py": GATE, "main.py": _main("import utils", "utils.init_distributed_mode")},
    )
    command = [sys.executable, "-m", "torchdev_lint", "check", "--isolated", "--select", "TDL301"]
    command += ["--format", "concise", "--cache-dir", str(tmp_path / ".cache"), "main.py"]

    def run() -> str:
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True).stdout

    assert "TDL301" not in run()
    _write(tmp_path, {"utils.py": WARNS})
    assert "main.py:7:13: TDL301" in run()


# flake8 reads the project cache: tests/test_flake8.py


def test_same_file_helper_that_returns_early_does_not_gate(tmp_path: Path) -> None:
    """DETR's `init_distributed_mode` returns when not launched distributed, before its
    `set_device`: the program goes on without CUDA, in the same file as across files."""
    main = dedent(RETURNS) + dedent(
        """
        def main(args):
            init_distributed_mode(args)
            model = torch.nn.Linear(2, 2).cuda()
        """
    )
    _write(tmp_path, {"setup.py": "", "main.py": main})
    assert _findings(tmp_path) == ["main.py:15 TDL301"]
    _write(tmp_path, {"main.py": main.replace("        return\n", "        raise SystemExit\n")})
    assert _findings(tmp_path) == []


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("def f():\n    if not torch.cuda.is_available(): raise SystemExit\n", True),
        (
            "def f():\n    if not torch.cuda.is_available():\n        print(\n            'GPU only'\n        )\n        sys.exit(1)\n",
            True,
        ),
        (
            "def f():\n    if torch.cuda.is_available():\n        run()\n    else:\n        pytest.skip('no GPU')\n",
            True,
        ),
        ("def f():\n    assert torch.cuda.device_count() >= 2\n", True),
        ("def f(rank):\n    torch.cuda.set_device(rank)\n", True),
        ("def f():\n    if not dist.is_available():\n        raise RuntimeError\n", False),
        ("def f(x):\n    assert x.to('cpu').sum() > 0\n", False),
    ],
)
def test_only_text_that_can_hold_a_gate_is_parsed_first(text: str, parsed: bool) -> None:
    from torchdev_lint.analysis.project.pass_one_text import may_gate

    assert may_gate(text.encode()) is parsed


@pytest.mark.parametrize(
    "helper",
    [
        # CUDA is claimed only when no device is passed.
        "import torch\n\ndef to_gpu(x, device=None):\n    device = device or torch.cuda.current_device()\n    return x.to(device)\n",
        # Raises only for a distributed run: a CPU run that is not distributed goes on.
        "import torch\n\ndef to_gpu(args):\n    if args.distributed and not torch.cuda.is_available():\n        raise RuntimeError('NCCL needs GPUs')\n",
    ],
    ids=["claim-after-or", "and-condition"],
)
def test_conditional_claims_do_not_gate(tmp_path: Path, helper: str) -> None:
    _write(tmp_path, {"setup.py": "", "utils.py": helper, "main.py": _main("import utils", "utils.to_gpu")})
    assert _findings(tmp_path) == ["main.py:7 TDL301"]
