"""`torchdev-lint verify`: counters, CUDA emulation, fixed vs wrongly fixed fixtures, sandbox.

CPU only. Fixture runs start fresh processes (about a second of `import torch`
each), so the end-to-end runs are shared between tests through module-scoped
fixtures and use `--min-time 0 --warmup 0`.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torchdev_lint.cli import build_parser  # noqa: E402
from torchdev_lint.verify import command  # noqa: E402
from torchdev_lint.verify.emulation import DeviceMode  # noqa: E402
from torchdev_lint.verify.session import (  # noqa: E402
    FixtureResult,
    RunResult,
    UsageError,
    choose_target,
    project_fixer,
    speedup,
)

HERE = Path(__file__).parent / "verify_fixtures"
PER_ITEM = str(HERE / "per_item_transfer.py")
LITERAL_CUDA = str(HERE / "literal_cuda.py")
ESCAPES = str(HERE / "escapes_sandbox.py")
UNREGISTERED = str(HERE / "unregistered_mean.py")
ACCUMULATED = str(HERE / "accumulated_loss.py")
NO_FIX = str(HERE / "no_fix.py")
FAST = ["--min-time", "0", "--warmup", "0"]


def verify(argv: Sequence[str], capsys: pytest.CaptureFixture[str], fixer: object = None) -> tuple[int, str]:
    args = build_parser().parse_args(["verify", *argv])
    status = command.run(args, fixer=fixer)
    return status, capsys.readouterr().out


def counted(program, emulate: bool = True) -> dict[str, int]:  # type: ignore[no-untyped-def]
    mode = DeviceMode(emulate=emulate)
    mode.counting = True
    with mode:
        program()
    return mode.counts.as_dict()


# -- counters on hand-written programs (in process, fast) ----------------------------


def test_per_item_moves_count_one_h2d_each_and_the_stacked_move_one() -> None:
    items = [torch.full((4,), float(i)) for i in range(100)]
    device = torch.device("cuda")

    def per_item() -> object:
        return torch.stack([x.to(device) for x in items])

    def stacked() -> object:
        return torch.stack(items).to(device)

    assert counted(per_item) == {"h2d": 100, "d2h": 0, "syncs": 0}
    assert counted(stacked) == {"h2d": 1, "d2h": 0, "syncs": 0}


def test_reads_back_to_the_host_count_as_d2h_and_sync() -> None:
    def program() -> None:
        x = torch.arange(6.0, device="cuda")  # created on the device: no copy
        x.sum().item()
        x.tolist()
        x.cpu()
        x.to("cpu", non_blocking=True)  # a copy, but the host does not wait
        torch.zeros(6).copy_(x)
        x.cuda()  # already there: nothing
        bool(x.max() > 3)

    assert counted(program) == {"h2d": 0, "d2h": 6, "syncs": 5}


def test_module_moves_count_each_parameter_once() -> None:
    def program() -> None:
        model = torch.nn.Linear(3, 2)
        for _ in range(5):
            model.to("cuda")  # only the first moves anything
        out = model(torch.ones(4, 3, device="cuda"))
        assert out.device == torch.device("cuda", 0) and out.is_cuda

    assert counted(program) == {"h2d": 2, "d2h": 0, "syncs": 0}


def test_checkpoint_save_and_load_to_cuda_count_one_copy_per_tensor(tmp_path: Path) -> None:
    mode = DeviceMode(emulate=True)
    save, load = mode.wrap_save(torch.save), mode.wrap_load(torch.load)
    mode.counting = True
    with mode:
        model = torch.nn.Linear(2, 2).to("cuda")  # 2 H2D
        save(model.state_dict(), tmp_path / "m.pt")  # 2 D2H, 2 syncs
        state = load(tmp_path / "m.pt", map_location="cuda", weights_only=True)  # 2 H2D
        assert state["weight"].is_cuda
        load(tmp_path / "m.pt", map_location="cpu", weights_only=True)  # nothing
    assert mode.counts.as_dict() == {"h2d": 4, "d2h": 2, "syncs": 2}


def test_emulated_tensors_report_cuda_and_refuse_numpy_like_cuda() -> None:
    def program() -> None:
        x = torch.tensor([1.0, 2.0], device="cuda")
        assert x.device.type == "cuda" and x.is_cuda
        assert x.cpu().device.type == "cpu"
        with pytest.raises(TypeError, match="cuda"):
            x.numpy()

    assert counted(program)["h2d"] == 1


def test_without_emulation_cpu_tensors_never_cross() -> None:
    def program() -> None:
        x = torch.ones(3).to("cpu")
        x.item() if x.numel() == 1 else x.tolist()

    assert counted(program, emulate=False) == {"h2d": 0, "d2h": 0, "syncs": 0}


def test_emulation_raises_cudas_device_mismatch_where_cuda_would() -> None:
    def program() -> None:
        model = torch.nn.Linear(3, 2).to("cuda")
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            model(torch.ones(4, 3))  # input left on the CPU
        on_device = torch.arange(5.0, device="cuda")
        with pytest.raises(RuntimeError, match="same device"):
            on_device + torch.ones(5)
        with pytest.raises(RuntimeError, match="same device"):
            torch.ones(5)[torch.tensor([0, 1], device="cuda")]  # CPU tensor, CUDA indices
        # What CUDA accepts: CPU scalars, CPU indices into a CUDA tensor, copies and shape helpers.
        on_device * torch.tensor(2.0)
        on_device[torch.tensor([0, 1])]
        on_device[:2] = torch.ones(2)
        on_device.view_as(torch.ones(5))
        model(torch.ones(4, 3).to("cuda")).sum().backward()

    counted(program)


def test_speedup_is_called_only_beyond_the_noise() -> None:
    def run(times: list[float]) -> RunResult:
        return RunResult(median_s=sorted(times)[len(times) // 2], times=sorted(times))

    noisy_before = run([1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.0])
    noisy_after = run([0.95, 1.25, 0.85, 1.05, 0.9, 1.15, 1.0])
    assert speedup(noisy_before, noisy_after, emulated=False).verdict == "no measurable change"
    fast = speedup(run([1.0, 1.02, 0.98, 1.01, 0.99]), run([0.5, 0.51, 0.49, 0.5, 0.52]), emulated=False)
    assert fast.verdict == "faster" and fast.ratio == pytest.approx(2.0)
    assert fast.low is not None and fast.high is not None and 1 < fast.low <= 2.0 <= fast.high
    slow = speedup(run([0.5, 0.51, 0.49, 0.5, 0.52]), run([1.0, 1.02, 0.98, 1.01, 0.99]), emulated=False)
    assert slow.verdict == "slower"
    assert (
        speedup(run([1.0, 1.0, 1.0]), run([0.5, 0.5, 0.5]), emulated=False).verdict == "no measurable change"
    )
    emulated = speedup(fast_before := run([1.0] * 5), run([0.5] * 5), emulated=True)
    assert emulated.ratio is None and emulated.verdict == "n/a (emulated)" and fast_before.items_per_s is None


def test_progress_is_one_line_per_fixture_on_a_terminal_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdev_lint.verify import session

    def fake_verify(paths, options, fixer, progress):  # type: ignore[no-untyped-def]
        progress("[1/1] fixtures/a.py: ok")
        result = FixtureResult(fixture="fixtures/a.py", codes=("TDL201",), match=True)
        return {"device_name": "cpu", "device": "cpu", "torch": "x", "timings_meaningful": True}, [result]

    monkeypatch.setattr(session, "verify", fake_verify)
    for tty in (False, True):
        monkeypatch.setattr(sys.stderr, "isatty", lambda tty=tty: tty)
        assert command.run(build_parser().parse_args(["verify", "fixtures"])) == 0
        assert capsys.readouterr().err == ("[1/1] fixtures/a.py: ok\n" if tty else "")


def test_device_choice() -> None:
    if not torch.cuda.is_available():
        assert choose_target("auto").emulated and choose_target("cuda:1").device == "cuda:1"
    assert choose_target("cpu").device == "cpu" and not choose_target("cpu").emulated
    with pytest.raises(UsageError):
        choose_target("tpu")


# -- end to end (child processes) ------------------------------------------------------


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    out = tmp_path_factory.mktemp("verify")
    args = build_parser().parse_args(
        [
            "verify",
            PER_ITEM,
            LITERAL_CUDA,
            NO_FIX,
            UNREGISTERED,
            ACCUMULATED,
            "--unsafe-fixes",  # TDL201's and TDL313's fixes are unsafe
            *FAST,
            "--json",
            str(out / "v.json"),
            "--plot",
            str(out / "v.png"),
        ]
    )
    stdout = io.StringIO()  # capsys is function scoped
    with contextlib.redirect_stdout(stdout):
        status = command.run(args)
    assert (out / "v.png").stat().st_size > 0
    return status, stdout.getvalue(), json.loads((out / "v.json").read_text())


def test_correct_fix_matches_and_removes_the_per_item_copies(fixed_run: tuple[int, str, dict]) -> None:
    status, table, document = fixed_run
    assert status == 0, table
    per_item = document["fixtures"][0]
    assert per_item["fixture"].endswith("per_item_transfer.py")
    assert per_item["codes"] == ["TDL201"] and per_item["match"] is True
    assert (per_item["before"]["h2d"], per_item["after"]["h2d"]) == (100, 1)
    assert per_item["before"]["items_per_s"] > 0 and per_item["changed"] is True
    assert "100 → 1" in table


def test_emulated_timings_give_no_speedup_verdict(fixed_run: tuple[int, str, dict]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a real GPU is present")
    _, table, document = fixed_run
    assert document["environment"]["timings_meaningful"] is False
    for fixture in document["fixtures"][:2]:
        assert fixture["speedup"] is None and fixture["speedup_verdict"] == "n/a (emulated)"
    assert re.search(r"per_item_transfer\.py .* n/a \(emulated\)", table)
    assert "± half the interquartile range" in table and "JSON spread: the whole interquartile range" in table


def test_unchanged_fixture_is_no_change_and_not_timed(fixed_run: tuple[int, str, dict]) -> None:
    status, table, document = fixed_run
    unchanged = document["fixtures"][2]
    assert unchanged["fixture"].endswith("no_fix.py")
    assert unchanged["changed"] is False and unchanged["after"] is None and unchanged["speedup"] is None
    assert unchanged["before"]["runs"] == 0 and unchanged["before"]["items_per_s"] is None
    assert re.search(r"no_fix\.py\s+TDL308\s+no change\s+-\s+-\s+no change\s", table)
    assert status == 0


def test_a_before_run_that_raises_is_the_bug_the_fix_removes(fixed_run: tuple[int, str, dict]) -> None:
    """TDL313's unfixed module fails with CUDA's mismatch error (emulated here); the fixed one runs."""
    if torch.cuda.is_available():
        pytest.skip("a real GPU is present")
    status, table, document = fixed_run
    assert status == 0, table
    unregistered = document["fixtures"][3]
    assert unregistered["before"]["raised"] == "RuntimeError" and unregistered["before_raised_expected"]
    assert re.search(r"unregistered_mean\.py\s+TDL313\s+fixed \(before raised\)", table)
    assert "unregistered_mean.py: before: raised RuntimeError (expected: the bug this fix removes)" in table
    assert "Expected all tensors to be on the same device" in table


def test_figures_a_fixture_records_are_reported_before_and_after(fixed_run: tuple[int, str, dict]) -> None:
    _, table, document = fixed_run
    accumulated = document["fixtures"][4]
    assert accumulated["before"]["figures"] == {"graph nodes": 31.0}  # 10 x (mul, sum, add) + the weight
    assert accumulated["after"]["figures"] == {"graph nodes": 0.0}
    assert "accumulated_loss.py: graph nodes: 31 → 0" in table


def test_k_selects_fixtures_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    status, table = verify([str(HERE), "-k", "no_f*", *FAST], capsys)
    assert status == 0 and "no_fix.py" in table
    assert "escapes_sandbox" not in table and "per_item" not in table
    assert verify([str(HERE), "-k", "nothing-matches"], capsys)[0] == 2


def test_wrong_fix_is_a_mismatch_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    def wrong_fixer(path: str, source: bytes, codes: Sequence[str], unsafe: bool) -> tuple[bytes, int]:
        fixed, applied = project_fixer(path, source, codes, unsafe)
        return fixed.replace(b"+ i for i", b"+ 2 * i for i"), applied

    status, table = verify([PER_ITEM, "--unsafe-fixes", *FAST], capsys, fixer=wrong_fixer)
    assert status == 1
    assert re.search(r"per_item_transfer\.py\s+TDL201\s+NO\s", table)
    assert "results differ after the fix" in table


def test_sandbox_refuses_network_and_writes_outside(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    escape = tmp_path / "escaped.txt"
    monkeypatch.setenv("TORCHDEV_TEST_ESCAPE_FILE", str(escape))
    status, table = verify([ESCAPES, *FAST], capsys)
    assert not escape.exists()
    assert status == 1
    assert f"blocked write to {escape}" in table
    assert "blocked network connect to ('127.0.0.1', 9)" in table


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert verify([str(tmp_path / "missing")], capsys)[0] == 2
    assert verify([str(tmp_path)], capsys)[0] == 2  # no fixtures there
    assert verify([PER_ITEM, "--device", "tpu"], capsys)[0] == 2


def test_without_torch_verify_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = command.importlib.util.find_spec
    monkeypatch.setattr(
        command.importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "torch" else real_find_spec(name, *rest),
    )
    args = build_parser().parse_args(["verify", PER_ITEM])
    assert command.run(args) == 2
    assert "verify needs torch: pip install 'torchdev-lint[verify]'" in capsys.readouterr().err


def test_fixtures_of_the_same_name_never_share_a_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run gets a fresh folder, so no run can read another's (or a stale) report.json."""
    from torchdev_lint.verify import session

    run_dirs: list[str] = []

    def fake_child(
        fixture_path: str, run_dir: str, *args: object, **kwargs: object
    ) -> tuple[session.RunResult, None]:
        assert not (Path(run_dir) / "report.json").exists()
        (Path(run_dir) / "report.json").write_text("{}")  # what a stale report would look like
        run_dirs.append(run_dir)
        return session.RunResult(), None

    monkeypatch.setattr(session, "_run_child", fake_child)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "same.py").write_text(Path(PER_ITEM).read_text())
    options = session.VerifyOptions(unsafe_fixes=True)  # TDL201's fix is unsafe; without it nothing changes
    session.verify([str(tmp_path / "a"), str(tmp_path / "b")], options, fixer=project_fixer)
    assert len(run_dirs) == 4 and len(set(run_dirs)) == 4


def test_a_real_gpu_run_initialises_cuda_before_reading_peak_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a real GPU the child resets the peak-memory counter before the counting run; PyTorch's
    caching allocator exists only after CUDA is initialised, so the child initialises it first
    (found on an H200: every run failed with "Invalid device argument ... did you call init?").
    CUDA is faked here: the order of the calls is what is checked."""
    from torchdev_lint.verify import child

    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "init", lambda: calls.append("init"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: calls.append("peak") or 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    for name in ("load", "save"):  # `child._patch` rebinds them: restored after the test
        monkeypatch.setattr(torch, name, getattr(torch, name))
        monkeypatch.setattr(torch.serialization, name, getattr(torch.serialization, name))
    fixture = tmp_path / "fixture.py"
    fixture.write_text("def main(device, n):\n    return n\n")
    spec = {"fixture": str(fixture), "device": "cuda", "emulate": False, "n": 3, "seed": 0}
    spec |= {"min_time": 0.0, "warmup": 0, "min_runs": 0, "max_runs": 1, "threads": 0}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    report = child.run(str(tmp_path))
    assert "error" not in report, report
    assert calls[:3] == ["init", "reset", "peak"]
