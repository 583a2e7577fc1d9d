"""The project-wide analysis, TDL101's boundary: a file another module saved from host memory.

`prepare.py` writes `torch.save({"f0_mean": float(m)}, f"{prefix}.f0_stat.pt")`
and `data.py` reads `torch.load(f"{manifest}.f0_stat.pt")`: the load cannot meet
a device this machine lacks, so TDL101 stays silent there. Paths match by shape
(the same string, f-string shape, project constant through imports, or
configuration key); each silent case has a look-alike that must still be
flagged (another file saves GPU tensors or a model's state dict to the same
path, or the path differs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import findings, write_files

from torchdev_lint.analysis.project.project_facts import project_facts
from torchdev_lint.analysis.provenance.load_facts import local_key
from torchdev_lint.analysis.provenance.saved_files import distinctive, path_shape
from torchdev_lint.analysis.syntax.scopes import Scope, collect_bindings
from torchdev_lint.cache import ResultCache
from torchdev_lint.engine import parse

STATS_WRITER = """
    import torch

    def dump_speaker_stats(speaker_stats, out_prefix):
        table = {name: {"mean": float(s.mean), "std": float(s.std)} for name, s in speaker_stats.items()}
        torch.save(table, f"{out_prefix}.pitch_stat.pt")
"""
STATS_READER = """
    import os
    import torch

    class PitchCodes:
        def __init__(self, manifest):
            if os.path.exists(f"{manifest}.pitch_stat.pt"):
                self.stats = torch.load(f"{manifest}.pitch_stat.pt")
"""
# The same writer, saving tensors that live where the model runs.
GPU_STATS_WRITER = """
    import torch

    def dump_speaker_stats(model, out_prefix):
        torch.save({"mean": model.mean.cuda()}, f"{out_prefix}.pitch_stat.pt")
"""
WEIGHTS_WRITER = """
    import torch

    def save(model, out_prefix):
        torch.save(model.cuda().state_dict(), f"{out_prefix}.pitch_stat.pt")
"""
NAMES = """
    LEXICON_FILE = "lexicon.pt"
    GRAPH_FILE = "graph.pt"
"""
LEXICON_WRITER = """
    import torch
    from names import LEXICON_FILE

    def prepare_lang(out_dir, lexicon):
        torch.save(lexicon.to_dense().cpu(), out_dir / LEXICON_FILE)
"""
LEXICON_READER = """
    import torch
    import names

    def read_lexicon(lang_dir):
        return torch.load(lang_dir / names.{constant})
"""


def _write(root: Path, files: dict[str, str]) -> None:
    (root / ".git").mkdir(parents=True, exist_ok=True)
    write_files(root, files)


def _findings(root: Path, *names: str, jobs: int = 1, cache: ResultCache | None = None) -> list[str]:
    """`path:line code` of each TDL101 finding, checking `names` (all .py files if none)."""
    return findings(root, ("TDL101",), *names, cache=cache, jobs=jobs)


def test_stats_saved_from_host_memory_elsewhere(tmp_path: Path) -> None:
    _write(tmp_path, {"prepare.py": STATS_WRITER, "data/codes.py": STATS_READER})
    assert _findings(tmp_path) == []
    assert _findings(tmp_path, "data/codes.py", "prepare.py", jobs=2) == []
    # A writer is known when checked, or imported by a checked file; this one is a script.
    assert _findings(tmp_path, "data/codes.py") == ["data/codes.py:8 TDL101"]


@pytest.mark.parametrize("writer", [GPU_STATS_WRITER, WEIGHTS_WRITER], ids=["gpu-tensors", "cuda-state-dict"])
def test_same_path_saved_from_the_gpu_is_flagged(tmp_path: Path, writer: str) -> None:
    _write(tmp_path, {"prepare.py": writer, "data/codes.py": STATS_READER})
    assert _findings(tmp_path) == ["data/codes.py:8 TDL101"]


def test_one_gpu_writer_among_host_writers_is_flagged(tmp_path: Path) -> None:
    files = {"prepare.py": STATS_WRITER, "export.py": WEIGHTS_WRITER, "data/codes.py": STATS_READER}
    _write(tmp_path, files)
    assert _findings(tmp_path) == ["data/codes.py:8 TDL101"]


def test_cache_sees_a_writer_that_moves_to_the_gpu(tmp_path: Path) -> None:
    cache = ResultCache.open(str(tmp_path / ".cache"))
    project = tmp_path / "project"
    _write(project, {"prepare.py": STATS_WRITER, "data/codes.py": STATS_READER})
    assert _findings(project, cache=cache) == []
    _write(project, {"prepare.py": GPU_STATS_WRITER})
    assert _findings(project, cache=cache) == ["data/codes.py:8 TDL101"]


def test_a_different_path_is_flagged(tmp_path: Path) -> None:
    reader = STATS_READER.replace(".pitch_stat.pt", ".pitch_codes.pt")
    _write(tmp_path, {"prepare.py": STATS_WRITER, "data/codes.py": reader})
    assert _findings(tmp_path) == ["data/codes.py:8 TDL101"]


@pytest.mark.parametrize(
    ("constant", "expected"), [("LEXICON_FILE", []), ("GRAPH_FILE", ["lexicon.py:6 TDL101"])]
)
def test_constant_resolved_through_imports(tmp_path: Path, constant: str, expected: list[str]) -> None:
    reader = LEXICON_READER.replace("{constant}", constant)
    _write(tmp_path, {"names.py": NAMES, "prepare.py": LEXICON_WRITER, "lexicon.py": reader})
    assert _findings(tmp_path) == expected


def test_same_string_and_configuration_key(tmp_path: Path) -> None:
    writer = """
        import torch

        def cache_features(feats, cfg):
            torch.save(feats.detach().cpu().numpy(), "features_cache.pt")
            torch.save({"mean": feats.mean().item()}, cfg.pitch_stats)
            torch.save(feats.detach().cpu(), cfg.output)
    """
    reader = """
        import torch

        def features():
            return torch.load("features_cache.pt")

        def stats(config):
            return torch.load(config.pitch_stats)

        def outputs(args):
            return torch.load(args.output)
    """
    _write(tmp_path, {"writer.py": writer, "reader.py": reader})
    # `output` is a generic path word: another program's `args.output` may hold anything.
    assert _findings(tmp_path) == ["reader.py:11 TDL101"]


def test_only_files_that_save_or_load_such_paths_are_read(tmp_path: Path) -> None:
    _write(tmp_path, {"prepare.py": STATS_WRITER, "data/codes.py": STATS_READER, "other.py": "x = 1\n"})
    paths = [str(tmp_path / n) for n in ("prepare.py", "data/codes.py", "other.py")]
    facts = project_facts(paths, parse)
    found = facts.of(paths[1])
    assert found is not None and found.host_saved == {local_key([None, ".pitch_stat.pt"])}
    assert facts.of(paths[0]) is None and facts.of(paths[2]) is None


@pytest.mark.parametrize(
    ("path", "shape", "usable"),
    [
        ('f"{d}/f0_{rank}_{n}.pt"', [None, "/f0_", None, "_", None, ".pt"], True),
        ('os.path.join(d, "L.pt")', [None, "/L.pt"], True),
        ('str(Path(d) / "L.pt")', [None, "/L.pt"], True),
        ('f"{d}/{name}.pt"', [None, "/", None, ".pt"], False),
        ("args.output", [["key", "output"]], False),
        ("cfg.f0_stats", [["key", "f0_stats"]], True),
        ("path", [None], False),
        ('os.path.join(out_dir, "model.pt")', [None, "/model.pt"], False),
        (
            "os.path.join(out_dir, WEIGHTS_NAME)",
            [None, "/", ["ref", "WEIGHTS_NAME", ["here", "WEIGHTS_NAME"]]],
            False,
        ),
        (
            "os.path.join(out_dir, LEXICON_FILE)",
            [None, "/", ["ref", "LEXICON_FILE", ["here", "LEXICON_FILE"]]],
            True,
        ),
    ],
)
def test_path_shapes(path: str, shape: list[object], usable: bool) -> None:
    header = 'import os\nfrom pathlib import Path\nWEIGHTS_NAME = "w.bin"\nLEXICON_FILE = "L.pt"\n'
    module = parse("x.py", f"{header}value = {path}\n")
    scope = Scope(module, "module", None)
    collect_bindings(scope, module.body)
    expression = module.body[-1].body[0].value  # type: ignore[attr-defined]
    found = path_shape(expression, scope)
    assert found == shape
    assert distinctive(found) is usable


# Datasets through the project: the base class lives in another module -----------------

BASE = """
    import torch.utils.data

    class ProjectDataset(torch.utils.data.Dataset):
        def collater(self, samples):
            raise NotImplementedError
"""
PACKAGE_INIT = "from .base import ProjectDataset\n"
PITCH_DATASET = """
    import torch
    {imports}

    class Middle({base}):
        pass

    class PitchDataset(Middle):
        def __init__(self, manifest, stats_path):
            self.stats = torch.load(stats_path)
"""


@pytest.mark.parametrize(
    ("imports", "base"),
    [
        ("from data.base import ProjectDataset", "ProjectDataset"),
        ("from data import ProjectDataset", "ProjectDataset"),  # re-exported by the package
        ("from . import base", "base.ProjectDataset"),
    ],
)
def test_dataset_base_class_in_another_module(tmp_path: Path, imports: str, base: str) -> None:
    dataset = PITCH_DATASET.replace("{imports}", imports).replace("{base}", base)
    _write(tmp_path, {"data/__init__.py": PACKAGE_INIT, "data/base.py": BASE, "data/pitch.py": dataset})
    assert _findings(tmp_path) == []
    assert _findings(tmp_path, "data/pitch.py") == []  # the base's module is found through the import


def test_project_class_that_is_no_dataset_is_flagged(tmp_path: Path) -> None:
    base = BASE.replace("torch.utils.data.Dataset", "object")
    dataset = PITCH_DATASET.replace("{imports}", "from data.base import ProjectDataset")
    dataset = dataset.replace("{base}", "ProjectDataset")
    _write(tmp_path, {"data/__init__.py": PACKAGE_INIT, "data/base.py": base, "data/pitch.py": dataset})
    assert _findings(tmp_path) == ["data/pitch.py:10 TDL101"]
