"""The pre-commit hooks, run through real `pre-commit try-repo` on a throwaway copy of this repository.

pre-commit builds the hook's environment with pip from the hooks repository,
so this needs PyPI (for setuptools, libcst and flake8) and takes a while; one
environment serves both hooks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BAD = 'import torch\n\nstate = torch.load("model.pt")\n'
FIXED = 'import torch\n\nstate = torch.load("model.pt", map_location="cpu")\n'
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def _project_files() -> list[str]:
    """The working tree minus ignored files: what a clean clone of the next commit holds."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def hooks_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists():
        pytest.skip("needs the project's git checkout")
    repo = tmp_path_factory.mktemp("hooks")
    for name in _project_files():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "hooks")
    return repo


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def _try_repo(
    hooks_repo: Path, home: Path, project: Path, hook: str, name: str = "bad.py"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **GIT_ENV, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hooks_repo), hook, "--files", name],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_hooks_check_then_fix(hooks_repo: Path, pre_commit_home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "bad.py").write_text(BAD)
    _git(project, "init", "-q")
    _git(project, "add", "bad.py")

    check = _try_repo(hooks_repo, pre_commit_home, project, "torchdev-lint")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "TDL101" in check.stdout
    assert (project / "bad.py").read_text() == BAD

    fix = _try_repo(hooks_repo, pre_commit_home, project, "torchdev-fix")
    assert fix.returncode == 1, fix.stdout + fix.stderr  # pre-commit fails a hook that changed files
    assert "files were modified by this hook" in fix.stdout
    assert (project / "bad.py").read_text() == FIXED

    again = _try_repo(hooks_repo, pre_commit_home, project, "torchdev-lint")
    assert again.returncode == 0, again.stdout + again.stderr


def test_hooks_cover_notebooks(hooks_repo: Path, pre_commit_home: Path, tmp_path: Path) -> None:
    """`types_or: [python, pyi, jupyter]`: pre-commit hands notebooks to both hooks."""
    project = tmp_path / "project"
    project.mkdir()
    cell = {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": []}
    notebook = {
        "cells": [{**cell, "source": BAD.splitlines(keepends=True)}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = project / "bad.ipynb"
    path.write_text(json.dumps(notebook, indent=1) + "\n")
    _git(project, "init", "-q")
    _git(project, "add", "bad.ipynb")

    check = _try_repo(hooks_repo, pre_commit_home, project, "torchdev-lint", "bad.ipynb")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "bad.ipynb:cell 1:3:9: TDL101" in check.stdout

    fix = _try_repo(hooks_repo, pre_commit_home, project, "torchdev-fix", "bad.ipynb")
    assert fix.returncode == 1, fix.stdout + fix.stderr
    fixed = {**notebook, "cells": [{**cell, "source": FIXED.splitlines(keepends=True)}]}
    assert path.read_text() == json.dumps(fixed, indent=1) + "\n"
