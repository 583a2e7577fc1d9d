"""The result cache: hits, everything that invalidates an entry, corrupt entries, fix mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from multifile import record_checks

import torchdev_lint.cache
import torchdev_lint.config
import torchdev_lint.runner
from torchdev_lint.cache import ResultCache
from torchdev_lint.cli import main
from torchdev_lint.config import Settings, select_rules
from torchdev_lint.runner import CheckOptions, FileReport, process_file

BAD = 'import torch\n\nstate = torch.load("model.pt")\n'
FIXED = 'import torch\n\nstate = torch.load("model.pt", map_location="cpu")\n'


@pytest.fixture
def cache(tmp_path: Path) -> ResultCache:
    opened = ResultCache.open(str(tmp_path / "cache"))
    assert opened is not None
    return opened


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    return path


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the engine was asked to check (cache misses)."""
    return record_checks(monkeypatch)


def _options(cache: ResultCache, **changes: object) -> CheckOptions:
    fields: dict[str, object] = {"rules": tuple(select_rules()), "cache": cache, "with_edits": False}
    return CheckOptions(**{**fields, **changes})  # type: ignore[arg-type]


def _same(a: FileReport, b: FileReport) -> None:
    assert (a.path, a.diagnostics, a.source_lines, a.error) == (
        b.path,
        b.diagnostics,
        b.source_lines,
        b.error,
    )


def test_cache_folder_has_a_gitignore(cache: ResultCache) -> None:
    assert (Path(cache.directory) / ".gitignore").read_text().splitlines()[-1] == "*"


def test_hit_returns_the_same_report_without_checking(
    bad: Path, cache: ResultCache, checks: list[str]
) -> None:
    first = process_file(str(bad), _options(cache))
    second = process_file(str(bad), _options(cache))
    assert checks == [str(bad)]
    assert [d.code for d in first.diagnostics] == ["TDL101"]
    assert first.diagnostics[0].fix is not None
    _same(first, second)


def test_hit_with_edits_keeps_the_edits(bad: Path, cache: ResultCache, checks: list[str]) -> None:
    first = process_file(str(bad), _options(cache, with_edits=True))
    second = process_file(str(bad), _options(cache, with_edits=True))
    assert len(checks) == 1
    fix = second.diagnostics[0].fix
    assert fix is not None and fix.edits and fix.edits == first.diagnostics[0].fix.edits  # type: ignore[union-attr]


def test_content_change_invalidates(bad: Path, cache: ResultCache, checks: list[str]) -> None:
    process_file(str(bad), _options(cache))
    bad.write_text(FIXED)
    assert process_file(str(bad), _options(cache)).diagnostics == []
    assert len(checks) == 2


def test_version_change_invalidates(
    bad: Path, cache: ResultCache, checks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    process_file(str(bad), _options(cache))
    monkeypatch.setattr(torchdev_lint.cache, "tool_fingerprint", lambda: "another version")
    process_file(str(bad), _options(cache))
    assert len(checks) == 2


def test_libcst_version_change_invalidates(
    bad: Path, cache: ResultCache, checks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """LibCST decides what parses and how fixes are written: another version checks again."""
    from importlib.metadata import version

    assert torchdev_lint.cache.libcst_version() == version("libcst")  # found without importing it
    process_file(str(bad), _options(cache))
    process_file(str(bad), _options(cache))
    monkeypatch.setattr(torchdev_lint.cache, "libcst_version", lambda: "0.0.1")
    process_file(str(bad), _options(cache))
    assert len(checks) == 2


def test_dependencies_digest_is_part_of_the_key(bad: Path) -> None:
    """Facts a file takes from other files key its entry (cross-file summaries pass their digest)."""
    keys = {
        torchdev_lint.cache.entry_key(str(bad), bad.read_bytes(), ["TDL101"], Settings(), False, digest)
        for digest in ("", "a", "b")
    }
    assert len(keys) == 3


def test_selection_change_invalidates(bad: Path, cache: ResultCache, checks: list[str]) -> None:
    process_file(str(bad), _options(cache))
    report = process_file(
        str(bad), CheckOptions(rules=tuple(select_rules(["TDL2"])), cache=cache, with_edits=False)
    )
    assert report.diagnostics == [] and len(checks) == 2


def test_per_file_ignores_change_invalidates(bad: Path, cache: ResultCache, checks: list[str]) -> None:
    process_file(str(bad), _options(cache))
    ignores = (("bad.py", ("TDL101",)),)
    report = process_file(str(bad), _options(cache, per_file_ignores=ignores, root=str(bad.parent)))
    assert report.diagnostics == [] and len(checks) == 2


def test_settings_change_invalidates(bad: Path, cache: ResultCache, checks: list[str]) -> None:
    process_file(str(bad), _options(cache))
    process_file(str(bad), _options(cache, settings=Settings(target_torch_version=(2, 0))))
    assert len(checks) == 2


def test_edits_wanted_invalidates_an_entry_without_edits(
    bad: Path, cache: ResultCache, checks: list[str]
) -> None:
    process_file(str(bad), _options(cache))
    report = process_file(str(bad), _options(cache, with_edits=True))
    assert len(checks) == 2 and report.diagnostics[0].fix.edits  # type: ignore[union-attr]


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"diagnostics": [{"fix": 3}]}', b"\xff\xfe"])
def test_corrupt_entry_is_a_miss_and_is_rewritten(
    bad: Path, cache: ResultCache, checks: list[str], garbage: bytes
) -> None:
    first = process_file(str(bad), _options(cache))
    entries = [p for p in Path(cache.directory).rglob("*.json")]
    assert len(entries) == 1
    entries[0].write_bytes(garbage)
    again = process_file(str(bad), _options(cache))
    _same(first, again)
    assert len(checks) == 2
    _same(first, process_file(str(bad), _options(cache)))
    assert len(checks) == 2  # the rewritten entry is used


def test_unwritable_cache_folder_is_no_error(bad: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert ResultCache.open(str(blocker / "cache")) is None


def test_syntax_error_is_cached_too(tmp_path: Path, cache: ResultCache, checks: list[str]) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ntorch.load(\n")
    first = process_file(str(broken), _options(cache))
    second = process_file(str(broken), _options(cache))
    assert first.error and first.error == second.error and len(checks) == 1


def test_fix_never_trusts_the_cache_and_caches_the_fixed_file(
    bad: Path, cache: ResultCache, checks: list[str]
) -> None:
    options = _options(cache)
    # A stale entry claiming the file is clean must not stop the fix.
    codes = [r.code for r in options.rules]
    key = torchdev_lint.cache.entry_key(str(bad), bad.read_bytes(), codes, options.settings, False)
    cache.store(key, torchdev_lint.cache.CachedResult([], {}))
    fixed = process_file(str(bad), _options(cache, fix=True))
    assert fixed.fixed == 1 and bad.read_text() == FIXED
    checks.clear()
    assert process_file(str(bad), options).diagnostics == []
    assert checks == []  # answered from the entry the fix stored


def test_cli_cache_in_project_root_and_flags(
    tmp_path: Path, bad: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.torchdev-lint]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["check", "--no-cache", str(bad)]) == 1
    assert not (tmp_path / ".torchdev_lint_cache").exists()
    uncached = capsys.readouterr().out
    assert main(["check", str(bad)]) == 1
    first = capsys.readouterr().out
    assert (tmp_path / ".torchdev_lint_cache" / ".gitignore").is_file()
    assert main(["check", str(bad)]) == 1
    assert capsys.readouterr().out == first == uncached
    assert main(["check", "--cache-dir", str(tmp_path / "mine"), str(bad)]) == 1
    assert list((tmp_path / "mine").rglob("*.json"))


def test_cli_warm_output_equals_cold_in_every_format(
    tmp_path: Path, bad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in ("text", "concise", "json", "sarif", "github"):
        outputs = []
        for extra in (["--no-cache"], [], []):
            main(
                [
                    "check",
                    "--format",
                    fmt,
                    "--show-fixes",
                    "--cache-dir",
                    str(tmp_path / "c"),
                    *extra,
                    str(bad),
                ]
            )
            outputs.append(capsys.readouterr().out)
        assert outputs[0] == outputs[1] == outputs[2], fmt


WARM_RUN = """
import sys
from torchdev_lint.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m == "libcst" or m.startswith("torchdev_lint.rules."))
print("HEAVY", heavy, file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("fmt", ["text", "concise", "json", "github"])
def test_warm_run_imports_neither_libcst_nor_the_rules(tmp_path: Path, fmt: str) -> None:
    """A run the cache answers whole looks nothing up that needs LibCST: same output, no import."""
    import subprocess
    import sys

    (tmp_path / "pyproject.toml").write_text(
        '[tool.torchdev-lint]\nextend-select = ["TDL206"]\n\n'
        '[tool.torchdev-lint.per-file-ignores]\n"other.py" = ["TDL1"]\n'
    )
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "other.py").write_text(BAD + "x = torch.zeros(3).cuda()\n")
    (tmp_path / "clean.py").write_text("print('no torch here')\n")
    argv = [sys.executable, "-c", WARM_RUN, "check", "--format", fmt, str(tmp_path)]
    runs = [subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path) for _ in range(2)]
    (cold, warm) = runs
    assert cold.returncode == warm.returncode == 1, cold.stderr
    assert cold.stdout == warm.stdout and "TDL101" in cold.stdout and "TDL301" in cold.stdout
    assert "HEAVY []" not in cold.stderr  # the cold run did import them
    assert "HEAVY []" in warm.stderr, warm.stderr


def test_stale_catalog_costs_speed_not_results(
    tmp_path: Path, bad: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A catalog without a rule (one added since it was generated) makes the cache miss, never
    answer with results of another selection."""
    argv = ["check", "--format", "concise", "--cache-dir", str(tmp_path / "c"), str(bad)]
    assert main(argv) == 1
    expected = capsys.readouterr().out
    assert "TDL101" in expected
    stale = tuple(info for info in torchdev_lint.config.RULES if info.code != "TDL101")
    monkeypatch.setattr(torchdev_lint.config, "RULES", stale)
    asked: list[object] = []
    real = torchdev_lint.runner.process_files_with_facts

    def recording(*args: object, **kwargs: object) -> object:
        asked.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torchdev_lint.runner, "process_files_with_facts", recording)
    assert main(argv) == 1
    assert capsys.readouterr().out == expected and asked  # answered by checking, not from the cache
