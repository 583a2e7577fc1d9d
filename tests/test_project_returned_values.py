"""The project-wide analysis, TDL101's return values: a file saved from what project functions return.

`preprocess.py` fills a dict item by item with `pitch_of(path)`, which returns what
`pkg/features.py`'s `extract_pitch` returns, `torch.from_numpy(...)`, and saves it; `data.py`
reads the file back: host data written by the project, so TDL101 stays silent there. Each
silent case has a look-alike that must still be flagged (the function returns a CUDA tensor,
something unknown, or only calls itself). Also a Dataset base class a package re-exports with
`from .module import *` (the loads of a dataset's files are host data, `dataset_bases`).
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
from multifile import findings, write_files

from torchdev_lint.analysis.project.summaries import summarize
from torchdev_lint.cache import ResultCache
from torchdev_lint.engine import check_source, parse
from torchdev_lint.rules.tdl101_load_without_map_location import LoadWithoutMapLocation

FEATURES = """
    import numpy as np
    import torch

    def extract_pitch(path):
        pitch = yaapt(np.load(path))
        pitch = torch.from_numpy(pitch.astype(np.float32))
        return pitch
"""
PREPROCESS = """
    import torch
    from pkg.features import extract_pitch

    def pitch_of(path):
        try:
            pitch = extract_pitch(path)
        except ValueError:
            pitch = None
        return pitch

    def main(paths, out_dir, rank, shards):
        table = {}
        for path in paths:
            value = pitch_of(path)
            table[path] = value
        print(f"{len(table)} utterances")
        torch.save(table, f"{out_dir}/pitch_{rank}_{shards}.pt")
"""
READER = """
    import torch

    def load_pitch(pitch_dir, shards):
        found = {}
        for rank in range(shards):
            found.update(torch.load(f"{pitch_dir}/pitch_{rank}_{shards}.pt"))
        return found
"""
FLAGGED = ["data.py:7 TDL101"]


def _write(root: Path, features: str = FEATURES, preprocess: str = PREPROCESS) -> None:
    (root / ".git").mkdir(parents=True, exist_ok=True)
    files = {"pkg/__init__.py": "", "pkg/features.py": features, "preprocess.py": preprocess}
    write_files(root, {**files, "data.py": READER})


def _findings(root: Path, *names: str, jobs: int = 1, cache: ResultCache | None = None) -> list[str]:
    return findings(root, ("TDL101",), *names, cache=cache, jobs=jobs)


def test_dict_filled_from_a_function_returning_host_data_in_another_file(tmp_path: Path) -> None:
    _write(tmp_path)
    assert _findings(tmp_path) == []
    assert _findings(tmp_path, jobs=2) == []
    # The writer is read because a checked file imports it (its callee's module too).
    assert _findings(tmp_path, "data.py", "preprocess.py") == []


@pytest.mark.parametrize(
    "returned",
    [
        "torch.from_numpy(pitch).cuda()",  # moved to the GPU
        "model(torch.from_numpy(pitch))",  # what a model returns: where the model is
        "extract_pitch(path)",  # only itself: recursion proves nothing
        "torch.from_numpy(pitch).to(device)",
    ],
)
def test_a_function_returning_other_data_is_flagged(tmp_path: Path, returned: str) -> None:
    features = FEATURES.replace(
        "pitch = torch.from_numpy(pitch.astype(np.float32))\n        return pitch", f"return {returned}"
    )
    assert features != FEATURES
    _write(tmp_path, features=features)
    assert _findings(tmp_path) == FLAGGED


@pytest.mark.parametrize(
    "change",
    [
        ("table[path] = value", "table[path] = value.cuda()"),  # an item moved before the store
        ("print(f", "table.update(extra)\n        print(f"),  # filled by something else too
        ("print(f", "fill(table)\n        print(f"),  # handed to a function that may fill it
        ("    return pitch\n", "    return pitch.cuda()\n"),
    ],
)
def test_a_dict_filled_with_other_data_is_flagged(tmp_path: Path, change: tuple[str, str]) -> None:
    preprocess = PREPROCESS.replace(*change)
    assert preprocess != PREPROCESS
    _write(tmp_path, preprocess=preprocess)
    assert _findings(tmp_path) == FLAGGED


def test_cache_sees_a_callee_that_starts_returning_gpu_tensors(tmp_path: Path) -> None:
    cache = ResultCache.open(str(tmp_path / ".cache"))
    project = tmp_path / "project"
    _write(project)
    assert _findings(project, cache=cache) == []
    _write(project, features=FEATURES.replace("return pitch", "return pitch.cuda()"))
    assert _findings(project, cache=cache) == FLAGGED


LEXICON_WRITER = """
    import k2
    import torch

    def lexicon_to_fst(lexicon):
        arcs = "\\n".join(" ".join(map(str, arc)) for arc in lexicon)
        fsa = k2.Fsa.from_str(arcs, acceptor=False)
        return fsa

    def prepare_lang(lexicon, out_dir):
        L = lexicon_to_fst(lexicon)
        L_inv = k2.arc_sort(L.invert())
        torch.save(L.as_dict(), out_dir / "L.pt")
        torch.save(L_inv.as_dict(), out_dir / "Linv.pt")
"""
LEXICON_READER = """
    import k2
    import torch

    class Lexicon:
        def __init__(self, lang_dir):
            self.L = k2.Fsa.from_dict(torch.load(lang_dir / "L.pt"))
            self.L_inv = k2.Fsa.from_dict(torch.load(lang_dir / "Linv.pt"))
"""


BOTH = ["lexicon.py:7 TDL101", "lexicon.py:8 TDL101"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("", ""), []),
        (("return fsa", 'return fsa.to("cuda")'), BOTH),
        (("k2.arc_sort(L.invert())", "k2.arc_sort(L.invert().to(device))"), ["lexicon.py:8 TDL101"]),
        # an FSA made from a dict of tensors is where the tensors are: here, not known
        (("k2.Fsa.from_str(arcs, acceptor=False)", "k2.Fsa.from_dict(lexicon.tensors())"), BOTH),
    ],
    ids=["from-text", "moved-to-cuda", "inverse-moved", "from-dict"],
)
def test_k2_fsas_built_from_text(tmp_path: Path, change: tuple[str, str], expected: list[str]) -> None:
    (tmp_path / ".git").mkdir()
    write_files(tmp_path, {"prepare_lang.py": LEXICON_WRITER.replace(*change), "lexicon.py": LEXICON_READER})
    assert _findings(tmp_path) == expected


def test_returns_summary() -> None:
    source = """
import functools
import numpy as np
import torch
from .io import read_table

def host(path):
    return torch.from_numpy(np.load(path))

def through(path):
    if path is None:
        return None
    return read_table(path)

def unknown(model, x):
    return model(x)

def generator(paths):
    for path in paths:
        yield host(path)
    return host(paths[0])

async def coroutine(path):
    return host(path)

@functools.lru_cache
def cached(path):
    return host(path)

@register
def registered(path):
    return host(path)

class Table:
    @staticmethod
    def rows(path):
        rows = []
        for line in open(path):
            rows.append(int(line))
        return rows

    def tensor(self, path):
        return torch.tensor(self.rows(path))
"""
    returns = summarize(parse("pkg/table.py", source), "pkg/table.py")["returns"]
    assert returns == {
        "host": [],
        "through": [["module", 1, "io.read_table"]],
        "cached": [["here", "host"]],
        "Table.rows": [],
        "Table.tensor": [["here", "Table.rows"]],
    }


# A Dataset base re-exported by a package's `from .module import *` ---------------------------

DATASET_BASE = """
    from typing import TypeVar

    from torch.utils.data.dataset import Dataset

    T_co = TypeVar("T_co", covariant=True)

    class DownloadableDataset(Dataset[T_co]):
        pass
"""
FEATURE_DATASET = """
    import torch
    from data import DownloadableDataset

    class FeatureDataset(DownloadableDataset):
        def load(self, path):
            self.features = torch.load(path / "features.pth")
"""


@pytest.mark.parametrize(
    ("package", "expected"),
    [
        ("from .utils import *\nfrom .downloadable import *\n", []),
        ("from .utils import *\n", ["data/features.py:7 TDL101"]),  # defined in none of them
    ],
)
def test_dataset_base_through_a_star_reexport(tmp_path: Path, package: str, expected: list[str]) -> None:
    (tmp_path / ".git").mkdir()
    files = {"data/__init__.py": package, "data/utils.py": "def helper():\n    pass\n"}
    files |= {"data/downloadable.py": DATASET_BASE, "data/features.py": FEATURE_DATASET}
    write_files(tmp_path, files)
    assert _findings(tmp_path) == expected


# A dict filled item by item with `.cpu()` values and a counter the class keeps (one file) -----

STREAMING_LDA = """
    import os

    import torch

    class StreamingLDA:
        def __init__(self, device):
            self.device = device
            self.num_updates = 0

        def fit(self, x):
            self.num_updates += 1
            self.count = x.shape[0]

        def save_model(self, save_path):
            d = dict()
            d["muK"] = self.muK.cpu()
            d["num_updates"] = self.num_updates
            torch.save(d, os.path.join(save_path, "slda.pth"))

        def load_model(self, save_path):
            d = torch.load(os.path.join(save_path, "slda.pth"))
            self.muK = d["muK"].to(self.device)
            self.num_updates = d["num_updates"]
"""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("", ""), []),
        (('d["muK"] = self.muK.cpu()', 'd["muK"] = self.muK'), [22]),  # an item not moved
        (("self.num_updates += 1", "self.num_updates += torch.ones(1)"), [22]),  # not a number
        (("self.num_updates += 1", "self.num_updates, _ = stats(x)"), [22]),  # unpacked: unknown
        (('self.num_updates = d["num_updates"]', 'self.num_updates = d["muK"]'), [22]),  # another item
    ],
    ids=["host", "item-not-moved", "counter-tensor", "counter-unpacked", "other-item"],
)
def test_dict_of_moved_tensors_and_a_counter(change: tuple[str, str], expected: list[int]) -> None:
    source = dedent(STREAMING_LDA).replace(*change)
    diagnostics = check_source("slda.py", source, [LoadWithoutMapLocation]).diagnostics
    assert [d.line for d in diagnostics] == expected


# Counters a class saves on their own, each to its own file (one file) -----------------------

EPISODE_RUNNER = """
    import os

    import torch

    class EpisodeRunner:
        def __init__(self, envs_per_step=8):
            self.envs_per_step = envs_per_step
            self.episodes = 0

        def step(self):
            self.episodes += 1
            frames = self.episodes * self.envs_per_step
            self.frames = -frames

        def dump(self, out):
            torch.save(self.episodes, os.path.join(out, "episodes.pt"))
            torch.save(self.frames, os.path.join(out, "frames.pt"))

        def restore(self, out):
            self.episodes = torch.load(os.path.join(out, "episodes.pt"))
            self.frames = torch.load(os.path.join(out, "frames.pt"))
"""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("", ""), []),
        (("self.episodes += 1", "self.episodes += torch.ones(1)"), [21, 22]),  # not a number
        (("envs_per_step=8", "envs_per_step"), [22]),  # a parameter of any type
        (("frames = self.episodes", "frames = self.log(self.episodes)"), [22]),  # a call of unknown result
    ],
    ids=["host", "tensor", "parameter-without-default", "unknown-call"],
)
def test_counters_saved_on_their_own(change: tuple[str, str], expected: list[int]) -> None:
    source = dedent(EPISODE_RUNNER).replace(*change)
    diagnostics = check_source("runner.py", source, [LoadWithoutMapLocation]).diagnostics
    assert [d.line for d in diagnostics] == expected
