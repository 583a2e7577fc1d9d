"""A collective helper in a project whose process groups are all NCCL's (issue 23): `if
dist.is_initialized(): n = torch.tensor(k).cuda()` in a model file runs only with a group, and every
group the project's scripts start uses NCCL (by default: `kwargs.get("backend", "nccl")`), so the
`.cuda()` cannot meet a machine without CUDA. A start with another backend, a file pass 1 cannot
parse that names `init_process_group`, or a check of the model's folder alone keeps the finding."""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import findings, write_files

from torchdev_lint.cache import ResultCache

_HELPER = """
import torch
import torch.distributed as dist

def mean_over_ranks(y):
    if dist.is_initialized():
        n = torch.tensor(y.size(0)).cuda()
        dist.all_reduce(n)
        return y.sum(0) / n
    return y.mean(0)
"""
_TRAIN = """
import os
import torch.distributed as dist

def main(**kwargs):
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        dist.init_process_group(backend=BACKEND, init_method="env://")
"""
_FOUND = ["model/stats.py:7 TDL301"]


@pytest.mark.parametrize(
    "backend", ['kwargs.get("backend", "nccl")', 'getattr(kwargs["args"], "dist_backend", "nccl")', '"nccl"']
)
def test_a_helper_under_an_initialised_group_of_an_nccl_project_is_cuda_only(
    tmp_path: Path, backend: str
) -> None:
    write_files(tmp_path, {"model/stats.py": _HELPER, "train.py": _TRAIN.replace("BACKEND", backend)})
    assert findings(tmp_path, ["TDL301"]) == []
    assert findings(tmp_path, ["TDL301"], jobs=2) == []


@pytest.mark.parametrize("backend", ['kwargs.get("backend")', '"gloo"', 'kwargs.get("backend", "gloo")'])
def test_another_or_an_unknown_backend_keeps_the_finding(tmp_path: Path, backend: str) -> None:
    write_files(tmp_path, {"model/stats.py": _HELPER, "train.py": _TRAIN.replace("BACKEND", backend)})
    assert findings(tmp_path, ["TDL301"]) == _FOUND


def test_one_start_with_another_backend_among_nccl_ones_keeps_the_finding(tmp_path: Path) -> None:
    files = {
        "model/stats.py": _HELPER,
        "train.py": _TRAIN.replace("BACKEND", '"nccl"'),
        "evaluate_cpu.py": _TRAIN.replace("BACKEND", '"gloo"'),
    }
    write_files(tmp_path, files)
    assert findings(tmp_path, ["TDL301"]) == _FOUND


def test_an_unparsable_file_naming_a_group_start_keeps_the_finding(tmp_path: Path) -> None:
    broken = "import torch.distributed as dist\ndist.init_process_group(backend='gloo'\n"
    write_files(tmp_path, {"model/stats.py": _HELPER, "train.py": _TRAIN.replace("BACKEND", '"nccl"')})
    (tmp_path / "evaluate_cpu.py").write_text(broken)
    assert findings(tmp_path, ["TDL301"], "model/stats.py", "train.py", "evaluate_cpu.py") == _FOUND


def test_the_model_folder_checked_alone_keeps_the_finding(tmp_path: Path) -> None:
    write_files(tmp_path, {"model/stats.py": _HELPER, "train.py": _TRAIN.replace("BACKEND", '"nccl"')})
    assert findings(tmp_path, ["TDL301"], "model/stats.py") == _FOUND


def test_a_file_starting_groups_of_its_own_is_judged_by_them(tmp_path: Path) -> None:
    own_gloo = _HELPER + "\ndef setup():\n    dist.init_process_group('gloo')\n"
    write_files(tmp_path, {"model/stats.py": own_gloo, "train.py": _TRAIN.replace("BACKEND", '"nccl"')})
    assert findings(tmp_path, ["TDL301"]) == _FOUND


def test_a_cached_finding_comes_back_when_a_script_changes_its_backend(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_files(project, {"model/stats.py": _HELPER, "train.py": _TRAIN.replace("BACKEND", '"nccl"')})
    cache = ResultCache(str(tmp_path / "cache"))
    assert findings(project, ["TDL301"], cache=cache) == []
    (project / "train.py").write_text((project / "train.py").read_text().replace('"nccl"', '"gloo"'))
    assert findings(project, ["TDL301"], cache=cache) == _FOUND


_DIST_UTILS = """
import torch.distributed as dist

def in_group():
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return True

def replicas():
    return dist.get_world_size() if in_group() else 1
"""
_METER = """
import torch
import torch.distributed as dist
from proj.utils import dist_utils

class Meter:
    def synchronize(self):
        if not dist_utils.in_group():
            return
        self.shared = torch.tensor([self.count, self.total], device="cuda")

def total(x):
    if dist_utils.replicas() > 1:
        x = x.cuda()
    return x
"""
_METER_FOUND = ["proj/model/meter.py:10 TDL301", "proj/model/meter.py:14 TDL301"]
_PACKAGE = {"proj/__init__.py": "", "proj/utils/__init__.py": "", "proj/model/__init__.py": ""}


def test_group_tests_imported_from_another_module_of_an_nccl_project(tmp_path: Path) -> None:
    files = {
        **_PACKAGE,
        "proj/utils/dist_utils.py": _DIST_UTILS,
        "proj/model/meter.py": _METER,
        "train.py": _TRAIN.replace("BACKEND", '"nccl"'),
    }
    write_files(tmp_path, files)
    assert findings(tmp_path, ["TDL301"]) == []
    assert (
        findings(tmp_path, ["TDL301"], "proj/model/meter.py", "train.py") == []
    )  # the helpers' module read too
    assert findings(tmp_path, ["TDL301"], "proj/model/meter.py") == _METER_FOUND  # no group start seen


def test_an_imported_helper_that_does_not_test_the_group_keeps_the_findings(tmp_path: Path) -> None:
    always = _DIST_UTILS.replace("(dist.is_available() and dist.is_initialized())", "dist.is_available()")
    files = {
        **_PACKAGE,
        "proj/utils/dist_utils.py": always,
        "proj/model/meter.py": _METER,
        "train.py": _TRAIN.replace("BACKEND", '"nccl"'),
    }
    write_files(tmp_path, files)
    assert findings(tmp_path, ["TDL301"]) == _METER_FOUND


_SETUP = """
import torch
import torch.distributed as dist

def setup():
    if torch.cuda.is_available():
        backend = "nccl"
    else:
        raise NotImplementedError("no CPU training")
        backend = "gloo"
    dist.init_process_group(backend=backend)
"""
_NORMS = """
import torch
import torch.distributed as dist

def total(norms):
    if norms:
        found = torch.stack(norms).sum()
    else:
        found = torch.zeros((), device="cuda")
    dist.all_reduce(found)
    return found
"""


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (_SETUP, []),  # the "gloo" after the raise is dead code
        (
            _SETUP.replace('        backend = "gloo"\n', "").replace("raise", 'backend = "gloo"  #'),
            ["norms.py:9 TDL301"],
        ),
    ],
    ids=["dead-gloo", "live-gloo"],
)
def test_a_backend_assigned_after_a_raise_is_dead(tmp_path: Path, setup: str, expected: list[str]) -> None:
    write_files(tmp_path, {"setup.py": setup, "norms.py": _NORMS})
    assert findings(tmp_path, ["TDL301"]) == expected
