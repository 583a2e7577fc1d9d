"""Verifying fixtures: lint, fix into a temp folder, run both versions, compare, measure.

Imports torch (for `torch.load` and comparisons) but never runs fixture code in
this process: every run happens in a fresh child process (see `child.py`).
"""

from __future__ import annotations

import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

import torchdev_lint
from torchdev_lint.config import Settings, select_rules
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source
from torchdev_lint.files import read_source
from torchdev_lint.fixes import fix_source
from torchdev_lint.rule import rules_by_code
from torchdev_lint.verify.sandbox import BLOCKED_LOG, ENV_ROOT, write_shim

# (path, source, codes, unsafe) -> (fixed source, number of fixes applied)
Fixer = Callable[[str, bytes, Sequence[str], bool], tuple[bytes, int]]


class UsageError(Exception):
    """Bad options or paths: exit status 2."""


@dataclass(frozen=True)
class Options:
    device: str = "auto"
    unsafe_fixes: bool = False
    rtol: float = 0.0
    atol: float = 0.0
    min_time: float = 0.2
    warmup: int = 1
    min_runs: int = 3
    max_runs: int = 1000
    seed: int = 0
    n: int | None = None
    timeout: float = 300.0
    threads: int = 1  # CPU threads per run; 0 keeps torch's default


@dataclass(frozen=True)
class Target:
    """Where fixtures run: the device main() receives, and whether CUDA is emulated."""

    device: str
    emulated: bool


@dataclass
class Fixture:
    """What the verifier reads from a fixture file without running it."""

    path: str
    codes: tuple[str, ...]
    default_n: int


@dataclass
class RunResult:
    items_per_s: float | None = None
    median_s: float | None = None
    spread: float | None = None  # (p75 - p25) / median of the timed runs
    runs: int = 0
    h2d: int | None = None
    d2h: int | None = None
    syncs: int | None = None
    error: str | None = None
    blocked: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FixtureResult:
    fixture: str
    codes: tuple[str, ...]
    reported: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    fixes_applied: int = 0
    note: str | None = None
    n: int = 0
    match: bool | None = None
    mismatch: str | None = None
    before: RunResult = field(default_factory=RunResult)
    after: RunResult = field(default_factory=RunResult)

    @property
    def speedup(self) -> float | None:
        before, after = self.before.items_per_s, self.after.items_per_s
        return after / before if before and after else None

    @property
    def ok(self) -> bool:
        runs_ok = not (self.before.error or self.after.error or self.before.blocked or self.after.blocked)
        return self.match is True and not self.missing and runs_ok

    def to_json(self) -> dict[str, Any]:
        return {
            "fixture": self.fixture,
            "codes": list(self.codes),
            "reported": self.reported,
            "missing": self.missing,
            "fixes_applied": self.fixes_applied,
            "note": self.note,
            "n": self.n,
            "match": self.match,
            "mismatch": self.mismatch,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "speedup": self.speedup,
        }


def choose_target(device: str) -> Target:
    """`auto` is CUDA when present; CUDA asked for on a machine without it is emulated."""
    try:
        parsed = torch.device("cuda" if device == "auto" else device)
    except RuntimeError:
        raise UsageError(f"invalid --device {device!r}: use auto, cpu, cuda or cuda:N") from None
    if parsed.type == "cpu":
        return Target("cpu", emulated=False)
    if parsed.type != "cuda" or (device != "auto" and device not in ("cuda", f"cuda:{parsed.index}")):
        raise UsageError(f"invalid --device {device!r}: use auto, cpu, cuda or cuda:N")
    index = parsed.index or 0
    if torch.cuda.is_available():
        if index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA devices")
        return Target(f"cuda:{index}", emulated=False)
    return Target(f"cuda:{index}", emulated=True)


def environment(target: Target, options: Options) -> dict[str, Any]:
    real_cuda = target.device.startswith("cuda") and not target.emulated
    name = torch.cuda.get_device_name(torch.device(target.device)) if real_cuda else _cpu_name()
    return {
        "torch": torch.__version__,
        "torchdev_lint": torchdev_lint.__version__,
        "python": sys.version.split()[0],
        "device": target.device,
        "device_name": name + (" (CUDA emulated on CPU)" if target.emulated else ""),
        "cuda": torch.version.cuda if real_cuda else None,
        "emulated": target.emulated,
        "cpu_threads": options.threads or torch.get_num_threads(),
        "seed": options.seed,
        "unsafe_fixes": options.unsafe_fixes,
        "note": "CUDA emulated on CPU; timings not meaningful" if target.emulated else None,
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return f"CPU: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"CPU ({os.cpu_count()} cores)"


def find_fixtures(paths: Iterable[str]) -> list[str]:
    """The `.py` files named, and those found (sorted) under the folders named."""
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
                found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".py")]
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    return found


def read_fixture(path: str, source: bytes) -> Fixture | None:
    """The fixture's declarations, read without running it; None when it has no `main`."""
    try:
        tree = ast.parse(source, path)
    except SyntaxError as error:
        raise SourceError(path, f"syntax error: {error.msg}") from None
    values: dict[str, Any] = {}
    has_main = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            has_main = True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in ("CODES", "DEFAULT_N") and node.value:
                    try:
                        values[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        raise SourceError(path, f"{target.id} must be a literal") from None
    if not has_main:
        return None
    codes, default_n = values.get("CODES"), values.get("DEFAULT_N")
    if not isinstance(codes, (tuple, list)) or not codes or not all(isinstance(c, str) for c in codes):
        raise SourceError(path, 'CODES must be a non-empty tuple of rule codes, e.g. ("TDL201",)')
    if not isinstance(default_n, int) or default_n <= 0:
        raise SourceError(path, "DEFAULT_N must be a positive int")
    known = rules_by_code()
    unknown = [c for c in codes if c not in known]
    if unknown:
        raise SourceError(path, f"CODES names unknown rules: {', '.join(unknown)}")
    return Fixture(path, tuple(codes), default_n)


def project_fixer(path: str, source: bytes, codes: Sequence[str], unsafe: bool) -> tuple[bytes, int]:
    """The project's own codemod, limited to the codes the fixture demonstrates."""
    outcome = fix_source(path, source, select_rules(list(codes)), Settings(), unsafe=unsafe)
    return outcome.source, outcome.applied


def _unsafe_only(path: str, source: bytes, codes: Sequence[str]) -> bool:
    """Whether the fixes left out are unsafe ones (so --unsafe-fixes would apply them)."""
    result = check_source(path, source, select_rules(list(codes)), Settings())
    return any(f.fix is not None and f.fix.safety == "unsafe" for f in result.findings)


def _child_environment(run_dir: str, shim: str, threads: int) -> dict[str, str]:
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(torchdev_lint.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        [shim, package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env[ENV_ROOT] = run_dir
    tmp = os.path.join(run_dir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env["TMPDIR"] = env["TEMP"] = env["TMP"] = tmp
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env["MPLBACKEND"] = "Agg"
    return env


def _run_child(
    fixture_path: str, run_dir: str, shim: str, target: Target, n: int, options: Options
) -> tuple[RunResult, str | None]:
    """Run one version in a fresh process; the result and the path of its saved output."""
    os.makedirs(run_dir, exist_ok=True)
    spec = {
        "fixture": fixture_path,
        "device": target.device,
        "emulate": target.emulated,
        "n": n,
        "seed": options.seed,
        "min_time": options.min_time,
        "warmup": options.warmup,
        "min_runs": options.min_runs,
        "max_runs": options.max_runs,
        "threads": options.threads,
    }
    with open(os.path.join(run_dir, "spec.json"), "w", encoding="utf-8") as file:
        json.dump(spec, file)
    run = RunResult()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "torchdev_lint.verify.child", run_dir],
            cwd=run_dir,
            env=_child_environment(run_dir, shim, options.threads),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=options.timeout,
        )
    except subprocess.TimeoutExpired:
        run.error = f"timed out after {options.timeout:g} s"
        return run, None
    blocked_log = os.path.join(run_dir, BLOCKED_LOG)
    if os.path.exists(blocked_log):
        with open(blocked_log, encoding="utf-8") as file:
            run.blocked = list(dict.fromkeys(line.strip() for line in file if line.strip()))
    report_path = os.path.join(run_dir, "report.json")
    if not os.path.exists(report_path):
        tail = (completed.stderr or "").strip().splitlines()[-5:]
        run.error = f"child exited {completed.returncode}: " + " | ".join(tail)
        return run, None
    with open(report_path, encoding="utf-8") as file:
        report = json.load(file)
    if "error" in report:
        run.error = report["error"]
        return run, None
    counts, times = report["counts"], sorted(report["times"])
    run.h2d, run.d2h, run.syncs = counts["h2d"], counts["d2h"], counts["syncs"]
    run.runs = len(times)
    run.median_s = statistics.median(times)
    if len(times) >= 2 and run.median_s > 0:
        quartiles = statistics.quantiles(times, n=4)
        run.spread = (quartiles[2] - quartiles[0]) / run.median_s
    run.items_per_s = n / run.median_s if run.median_s > 0 else None
    return run, os.path.join(run_dir, "result.pt")


def compare(before_path: str, after_path: str, rtol: float, atol: float) -> str | None:
    """None when the two saved results agree; else what differs first."""
    before = torch.load(before_path, map_location="cpu", weights_only=True)
    after = torch.load(after_path, map_location="cpu", weights_only=True)
    leaves_b, spec_b = tree_flatten(before)
    leaves_a, spec_a = tree_flatten(after)
    if spec_b != spec_a:
        return f"result structure differs: {spec_b} vs {spec_a}"
    for index, (b, a) in enumerate(zip(leaves_b, leaves_a, strict=True)):
        where = f"result leaf {index}"
        if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor):
            try:
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
            except AssertionError as error:
                return f"{where}: " + " ".join(str(error).split())[:300]
        elif isinstance(b, float) and isinstance(a, float):
            if not (abs(a - b) <= atol + rtol * abs(b) or (a != a and b != b)):
                return f"{where}: {b!r} became {a!r}"
        elif type(a) is not type(b) or a != b:
            return f"{where}: {b!r} became {a!r}"
    return None


def verify_fixture(
    path: str,
    work: str,
    shim: str,
    target: Target,
    options: Options,
    fixer: Fixer,
) -> FixtureResult | None:
    source = read_source(path)
    fixture = read_fixture(path, source)
    if fixture is None:
        return None
    name = os.path.splitext(os.path.basename(path))[0]
    result = FixtureResult(fixture=path, codes=fixture.codes, n=options.n or fixture.default_n)
    checked = check_source(path, source, select_rules(["ALL"]), Settings())
    result.reported = sorted({d.code for d in checked.reported})
    result.missing = [code for code in fixture.codes if code not in result.reported]
    fixed, result.fixes_applied = fixer(path, source, fixture.codes, options.unsafe_fixes)
    if result.fixes_applied == 0 or fixed == source:
        result.note = "no fix applied: both runs are of the same code"
        if not options.unsafe_fixes and _unsafe_only(path, source, fixture.codes):
            result.note = "no change: the fix is unsafe; run with --unsafe-fixes"
    outputs = {}
    for version, text in (("before", source), ("after", fixed)):
        # A fresh folder per run: fixtures of the same name in different folders,
        # or a child that dies before writing its report, can never read another's report.json.
        run_dir = tempfile.mkdtemp(prefix=f"{name}-{version}-", dir=work)
        copy = os.path.join(run_dir, f"{name}.py")
        with open(copy, "wb") as file:
            file.write(text)
        run, output = _run_child(copy, run_dir, shim, target, result.n, options)
        setattr(result, version, run)
        outputs[version] = output
    if outputs["before"] and outputs["after"]:
        result.mismatch = compare(outputs["before"], outputs["after"], options.rtol, options.atol)
        result.match = result.mismatch is None
    return result


def verify(
    paths: Sequence[str],
    options: Options,
    fixer: Fixer = project_fixer,
    progress: Callable[[str], None] = lambda message: None,
) -> tuple[dict[str, Any], list[FixtureResult]]:
    """Verify every fixture under `paths`; the environment and one result per fixture."""
    target = choose_target(options.device)
    files = find_fixtures(paths)
    results: list[FixtureResult] = []
    with tempfile.TemporaryDirectory(prefix="torchdev-verify-") as work:
        shim = os.path.join(work, "shim")
        write_shim(shim)
        for index, path in enumerate(files, 1):
            progress(f"[{index}/{len(files)}] {path}")
            try:
                result = verify_fixture(path, work, shim, target, options, fixer)
            except SourceError as error:
                result = FixtureResult(fixture=path, codes=())
                result.before.error = str(error)
            if result is None:
                progress(f"  skipped: {path} has no main(device, n)")
                continue
            results.append(result)
            progress("  " + ("ok" if result.ok else "FAILED"))
    return environment(target, options), results
