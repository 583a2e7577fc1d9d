"""The project-wide analysis, TDL101: a package's re-export of a third-party module, and what
a load of a host-saved file yields.

`graphs/build.py` writes `G.pt`, `G_disambig.pt` and `Ginv.pt` from k2 FSAs built from text
(CPU FSAs); it names k2 through its package (`from . import k2`, the package's `__init__` doing
`import k2` in a `try`). `graphs/decoder.py` reads them back, and writes `Ginv.pt` itself from
what it loaded from `G.pt`: host data too (a second-order fact). So TDL101 stays silent on the
three loads; each silent case has a look-alike that must still be flagged.
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
from multifile import findings, record_checks, write_files

from torchdev_lint.analysis.provenance.load_facts import may_be_same_file
from torchdev_lint.cache import ResultCache
from torchdev_lint.engine import check_source
from torchdev_lint.rules.tdl101_load_without_map_location import LoadWithoutMapLocation

PACKAGE = """
    try:
        import k2
    except ImportError as error:
        raise ImportError("graphs needs k2: pip install k2") from error
"""
BUILD = """
    from pathlib import Path

    import torch

    from . import k2

    def to_fsa(entries, closed=False):
        lines = [f"0 1 {word} {token} 0.0" for word, token in entries]
        if closed:
            lines.append("1")
        fsa = k2.Fsa.from_str("\\n".join(lines), acceptor=False)
        return fsa

    def build(graph_dir, entries):
        out = Path(graph_dir)
        G = to_fsa(entries)
        G_disambig = to_fsa(entries, closed=True)
        G_inv = k2.arc_sort(G.invert())
        torch.save(G.as_dict(), out / "G.pt")
        torch.save(G_disambig.as_dict(), out / "G_disambig.pt")
        torch.save(G_inv.as_dict(), out / "Ginv.pt")
"""
DECODER = """
    import torch

    from . import k2

    class Decoder:
        def __init__(self, graph_dir):
            self.graph_dir = graph_dir
            G = k2.Fsa.from_dict(torch.load(graph_dir / "G.pt"))
            if (graph_dir / "Ginv.pt").is_file():
                G_inv = k2.Fsa.from_dict(torch.load(graph_dir / "Ginv.pt"))
            else:
                G_inv = k2.arc_sort(G.invert())
                torch.save(G_inv.as_dict(), graph_dir / "Ginv.pt")
            self.G, self.G_inv = G, G_inv

        def disambig(self):
            return k2.Fsa.from_dict(torch.load(self.graph_dir / "G_disambig.pt"))
"""
G, GINV, DISAMBIG = "graphs/decoder.py:9 TDL101", "graphs/decoder.py:11 TDL101", "graphs/decoder.py:18 TDL101"
ALL = [G, GINV, DISAMBIG]


def _write(root: Path, package: str = PACKAGE, build: str = BUILD, decoder: str = DECODER) -> None:
    (root / ".git").mkdir(parents=True, exist_ok=True)
    files = {"graphs/__init__.py": package, "graphs/build.py": build, "graphs/decoder.py": decoder}
    write_files(root, files)


def _findings(root: Path, *names: str, jobs: int = 1, cache: ResultCache | None = None) -> list[str]:
    return findings(root, ("TDL101",), *names, cache=cache, jobs=jobs)


def test_fsas_of_a_reexported_k2_and_what_their_loads_yield(tmp_path: Path) -> None:
    _write(tmp_path)
    assert _findings(tmp_path) == []
    assert _findings(tmp_path, jobs=2) == []


@pytest.mark.parametrize(
    ("package", "imported", "expected"),
    [
        (PACKAGE, "from . import k2", []),
        (PACKAGE.replace("import k2\n", "import k2 as fsa\n"), "from . import fsa as k2", []),
        (PACKAGE, "from graphs import k2", []),
        # the package binds another `k2`: a project module, or whatever a call returns
        ("from . import fake as k2\n", "from . import k2", ALL),
        ("k2 = load_plugin('k2')\n", "from . import k2", ALL),
    ],
    ids=["same-name", "renamed", "absolute", "project-module", "assigned"],
)
def test_the_package_must_import_the_module(
    tmp_path: Path, package: str, imported: str, expected: list[str]
) -> None:
    build, decoder = (text.replace("from . import k2", imported) for text in (BUILD, DECODER))
    _write(tmp_path, package=package, build=build, decoder=decoder)
    write_files(tmp_path, {"graphs/fake.py": "def arc_sort(fsa):\n    return fsa.to('cuda')\n"})
    assert _findings(tmp_path) == expected


EXPORT = """
    import torch

    def export(fsa, folder):
        torch.save(fsa.cuda().as_dict(), folder / "G_disambig.pt")
"""


@pytest.mark.parametrize(
    ("file", "change", "expected"),
    [
        # the inverse the decoder writes is moved first: its load is flagged, the others not
        ("graphs/decoder.py", ("arc_sort(G.invert())", "arc_sort(G.invert().to('cuda'))"), [GINV]),
        # `G.pt` written from the GPU: the decoder's `Ginv.pt`, made from it, is not host data either
        ("graphs/build.py", ("torch.save(G.as_dict()", "torch.save(G.to('cuda').as_dict()"), [G, GINV]),
        # another file writes the disambiguation graph from the GPU to a folder it is given
        ("export.py", ("", ""), [DISAMBIG]),
    ],
    ids=["inverse-moved", "source-moved", "another-writer"],
)
def test_second_order_facts_need_every_writer(
    tmp_path: Path, file: str, change: tuple[str, str], expected: list[str]
) -> None:
    _write(tmp_path)
    text = {"graphs/decoder.py": DECODER, "graphs/build.py": BUILD, "export.py": EXPORT}[file]
    assert change[0] in text
    write_files(tmp_path, {file: text.replace(*change)})
    assert _findings(tmp_path) == expected


def test_recursion_proves_nothing(tmp_path: Path) -> None:
    """A file saved only from what loading it yields: nothing says what was in it first."""
    refresh = """
        import torch

        from . import k2

        def refresh(graph_dir):
            fsa = k2.arc_sort(k2.Fsa.from_dict(torch.load(graph_dir / "lattice_cache.pt")))
            torch.save(fsa.as_dict(), graph_dir / "lattice_cache.pt")
    """
    _write(tmp_path)
    write_files(tmp_path, {"graphs/refresh.py": refresh})
    assert _findings(tmp_path) == ["graphs/refresh.py:7 TDL101"]


def test_a_file_alone_knows_nothing_of_the_package() -> None:
    """Without the project's facts (flake8 without a cache, one file), `k2` may be anything."""
    diagnostics = check_source("graphs/decoder.py", dedent(DECODER), [LoadWithoutMapLocation]).diagnostics
    assert [d.line for d in diagnostics] == [9, 11, 18]


def test_cache_sees_the_package_stop_importing_k2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ResultCache.open(str(tmp_path / ".cache"))
    project = tmp_path / "project"
    _write(project)
    assert _findings(project, cache=cache) == []
    checked = record_checks(monkeypatch, lambda path: Path(path).name)
    assert _findings(project, cache=cache) == []
    assert checked == []  # a warm run checks nothing
    _write(project, package="k2 = None\n")
    assert _findings(project, cache=cache) == ALL
    assert _findings(project, cache=cache, jobs=2) == ALL


@pytest.mark.parametrize(
    ("load", "save", "same"),
    [
        ([None, "/G.pt"], [None, "/G.pt"], True),
        ([("key", "graph_dir"), "/G.pt"], [None, "/G.pt"], True),  # an unknown folder may be any
        ([("ref", "consts.py:DIR"), "/G.pt"], [None, "/G.pt"], True),
        ([None, "/G.pt"], [None, "/G_disambig.pt"], False),
        ([("key", "graph_dir"), "/G.pt"], [("key", "out_dir"), "/G.pt"], False),
        # text alone could make these equal ("x/f0_1.f0_stat.pt"): other files by their shapes
        ([None, "/f0_", None, "_", None, ".pt"], [None, ".f0_stat.pt"], False),
        (["out/", None, "/G.pt"], [None, "/G.pt"], False),
    ],
)
def test_path_shapes_that_may_name_the_same_file(load: list[object], save: list[object], same: bool) -> None:
    assert may_be_same_file(tuple(load), tuple(save)) is same
    assert may_be_same_file(tuple(save), tuple(load)) is same
