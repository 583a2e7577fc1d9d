"""`[tool.torchdev-lint]` in pyproject.toml: discovery, precedence, per-file ignores, errors, .gitignore."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from torchdev_lint.cli import main
from torchdev_lint.config import ConfigError, FileConfig, find_config, glob_matches, load_config

BAD = 'import torch\n\nstate = torch.load("model.pt")\n'
DP = "import torch\nnet = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n"


def codes(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[tuple[str, str]]]:
    code = main(["check", "--format", "json", *argv])
    out = capsys.readouterr().out
    return code, sorted((Path(d["path"]).name, d["code"]) for d in json.loads(out or "[]"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "src" / "pkg" / "model.py").write_text(BAD + DP)
    (tmp_path / "tests" / "train_model.py").write_text(BAD)
    return tmp_path


def write_config(root: Path, body: str) -> Path:
    path = root / "pyproject.toml"
    path.write_text(f'[project]\nname = "x"\n\n[tool.torchdev-lint]\n{body}')
    return path


def test_found_by_walking_up(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(project, 'ignore = ["TDL308"]\n')
    assert find_config([str(project / "src" / "pkg")]) == str(config)
    assert find_config([str(project / "src" / "pkg" / "model.py"), str(project / "tests")]) == str(config)
    assert codes(capsys, str(project / "src" / "pkg"))[1] == [("model.py", "TDL101")]


def test_pyproject_without_table_is_skipped(project: Path) -> None:
    outer = write_config(project, 'ignore = ["TDL308"]\n')
    (project / "src" / "pyproject.toml").write_text('[project]\nname = "inner"\n')
    assert find_config([str(project / "src")]) == str(outer)


def test_nearest_table_wins(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(project, 'ignore = ["TDL308"]\n')
    inner = write_config(project / "src", 'ignore = ["TDL101"]\n')
    assert find_config([str(project / "src" / "pkg")]) == str(inner)
    assert codes(capsys, str(project / "src"))[1] == [("model.py", "TDL308")]


def test_no_config_means_defaults(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    found = find_config([str(tmp_path)])
    assert found is None or not str(found).startswith(str(tmp_path))


def test_cli_overrides_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(project, 'select = ["TDL308"]\n')
    target = str(project / "src")
    assert codes(capsys, target)[1] == [("model.py", "TDL308")]
    assert codes(capsys, "--select", "TDL101", target)[1] == [("model.py", "TDL101")]
    assert codes(capsys, "--extend-select", "TDL101", target)[1] == [
        ("model.py", "TDL101"),
        ("model.py", "TDL308"),
    ]
    assert codes(capsys, "--ignore", "TDL308", target) == (0, [])
    assert codes(capsys, "--isolated", target)[1] == [("model.py", "TDL101"), ("model.py", "TDL308")]


def test_cli_select_replaces_file_ignore(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(project, 'ignore = ["TDL101"]\n')
    target = str(project / "tests")
    assert codes(capsys, target) == (0, [])
    assert codes(capsys, "--select", "TDL", target)[1] == [("train_model.py", "TDL101")]


def test_explicit_config(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("cfg")
    config = write_config(elsewhere, 'select = ["TDL308"]\n')
    assert main(["check", "--config", str(config), "--quiet", str(project / "tests")]) == 0
    empty = elsewhere / "empty.toml"
    empty.write_text("[tool.other]\n")
    assert main(["check", "--config", str(empty), str(project)]) == 2


def test_per_file_ignores(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(
        project,
        '[tool.torchdev-lint.per-file-ignores]\n"tests/*" = ["TDL1"]\n"model.py" = ["TDL308"]\n',
    )
    assert codes(capsys, str(project))[1] == [("model.py", "TDL101")]
    monkey_cwd = os.getcwd()
    try:
        os.chdir(project / "src")  # globs are relative to the config, not to the cwd
        assert codes(capsys, "..")[1] == [("model.py", "TDL101")]
    finally:
        os.chdir(monkey_cwd)


def test_per_file_ignores_skip_fixes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(project, '[tool.torchdev-lint.per-file-ignores]\n"tests/*" = ["TDL101"]\n')
    main(["check", "--fix", str(project)])
    capsys.readouterr()
    assert (project / "tests" / "train_model.py").read_text() == BAD
    assert 'map_location="cpu"' in (project / "src" / "pkg" / "model.py").read_text()


def test_exclude_and_extend_exclude(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "gen").mkdir()
    (project / "gen" / "out.py").write_text(BAD)
    write_config(project, 'exclude = ["gen"]\nextend-exclude = ["tests/*"]\n')
    assert codes(capsys, str(project))[1] == [("model.py", "TDL101"), ("model.py", "TDL308")]
    # --exclude replaces the file's exclude; extend-exclude still applies.
    assert sorted(n for n, _ in codes(capsys, "--exclude", "src", str(project))[1]) == ["out.py"]
    assert codes(capsys, "--extend-exclude", "src", str(project))[1] == []


def test_target_version_and_unsafe_fixes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(project, 'target-torch-version = "2.4"\nunsafe-fixes = true\n')
    loaded = load_config(str(config))
    assert loaded.target_torch_version == (2, 4) and loaded.unsafe_fixes is True
    write_config(project, "target-torch-version = 2.10\n")  # a TOML number: 2.10 reads as 2.1
    with pytest.raises(ConfigError, match='target-torch-version = 2.1: expected a quoted "MAJOR.MINOR"'):
        load_config(str(config))


HARDCODED = "import torch\n\ndef predict(model, batch):\n    return model.cuda()(batch.cuda())\n"


def test_device_policy_cuda_only_silences_cuda_rules(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "src" / "pkg" / "gpu.py").write_text(HARDCODED)
    config = write_config(project, 'select = ["TDL301"]\n')
    assert load_config(str(config)).device_policy is None
    assert codes(capsys, str(project))[1] == [("gpu.py", "TDL301")]
    write_config(project, 'select = ["TDL301"]\ndevice-policy = "portable"\n')
    assert codes(capsys, str(project))[1] == [("gpu.py", "TDL301")]
    write_config(project, 'select = ["TDL301"]\ndevice-policy = "cuda-only"\n')
    assert load_config(str(config)).device_policy == "cuda-only"
    assert codes(capsys, str(project)) == (0, [])


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('selct = ["TDL1"]\n', "unknown key 'selct' (did you mean 'select'?)"),
        ('extend_select = ["TDL1"]\n', "unknown key 'extend_select' (did you mean 'extend-select'?)"),
        ('select = ["TDL1O1"]\n', "select: unknown rule selector 'TDL1O1'"),
        ('ignore = ["XYZ"]\n', "ignore: unknown rule selector 'XYZ'"),
        ('select = "TDL1"\n', 'select = "TDL1": expected a list of strings'),
        ('target-torch-version = "two"\n', "invalid torch version 'two'"),
        ('unsafe-fixes = "yes"\n', 'unsafe-fixes = "yes": expected true or false'),
        ('device-policy = "cuda_only"\n', "device-policy: invalid device policy 'cuda_only'"),
        ("device-policy = true\n", "expected one of 'portable', 'cuda-only'"),
        ('[tool.torchdev-lint.per-file-ignores]\n"a.py" = ["TDL9X"]\n', "per-file-ignores 'a.py'"),
        ("select = [\n", "invalid TOML"),
    ],
)
def test_bad_config_is_a_clear_error(
    project: Path, capsys: pytest.CaptureFixture[str], body: str, expected: str
) -> None:
    config = write_config(project, body)
    with pytest.raises(ConfigError, match=None) as error:
        load_config(str(config))
    assert expected in str(error.value) and str(config) in str(error.value)
    assert main(["check", str(project)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and expected in err and err.count("\n") == 1


def test_did_you_mean_for_code_typo(project: Path) -> None:
    config = write_config(project, 'select = ["TDL1O1"]\n')
    with pytest.raises(ConfigError, match="did you mean 'TDL101'"):
        load_config(str(config))


def test_glob_matching() -> None:
    assert glob_matches("/r/tests/a.py", "tests/*", "/r")
    assert glob_matches("/r/src/tests/a.py", "tests", "/r")
    assert not glob_matches("/r/src/tests/a.py", "tests/*", "/r")
    assert glob_matches("/r/a_test.py", "*_test.py", "/r")
    assert not glob_matches("/r/a.py", "b.py", "/r")


def test_default_file_config() -> None:
    assert FileConfig().select is None and FileConfig().per_file_ignores == ()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_gitignore_is_respected(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _git(project, "init", "-q")
    (project / ".gitignore").write_text("tests/\n*_gen.py\n")
    (project / "src" / "pkg" / "model_gen.py").write_text(BAD)
    assert codes(capsys, str(project))[1] == [("model.py", "TDL101"), ("model.py", "TDL308")]
    assert [n for n, _ in codes(capsys, "--no-respect-gitignore", str(project))[1]] == [
        "model.py",
        "model.py",
        "model_gen.py",
        "train_model.py",
    ]
    # A file named explicitly is checked even when ignored.
    assert codes(capsys, str(project / "tests" / "train_model.py"))[1] == [("train_model.py", "TDL101")]


def test_gitignore_outside_a_repository_is_harmless(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".gitignore").write_text("*.py\n")
    (tmp_path / "m.py").write_text(BAD)
    assert codes(capsys, "--isolated", str(tmp_path))[1] == [("m.py", "TDL101")]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_ignored_folder_named_explicitly_is_checked(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _git(project, "init", "-q")
    (project / ".gitignore").write_text("src/\n")
    assert codes(capsys, str(project))[1] == [("train_model.py", "TDL101")]
    assert codes(capsys, str(project / "src" / "pkg"))[1] == [("model.py", "TDL101"), ("model.py", "TDL308")]
