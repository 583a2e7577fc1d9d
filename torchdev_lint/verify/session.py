"""Verifying fixtures: lint, fix into a temp folder, run both versions, compare, measure.

Imports torch (for `torch.load` and comparisons) but never runs fixture code in
this process: every run happens in a fresh child process (see `child.py`).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import random
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
class VerifyOptions:
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
    patterns: tuple[str, ...] = ()  # -k: run only fixtures whose file name matches one


# A speedup is called only when its 95% bootstrap interval excludes 1 and each side has this many runs.
MIN_RUNS_FOR_VERDICT = 5
_BOOTSTRAP_RESAMPLES = 2000


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
    spread: float | None = None  # (p75 - p25) / median of the timed runs; the table's ± is half of it
    runs: int = 0
    h2d: int | None = None
    d2h: int | None = None
    syncs: int | None = None
    device_peak_bytes: int | None = None  # torch.cuda.max_memory_allocated of the counting run (real GPU)
    figures: dict[str, float] = field(default_factory=dict)  # what the fixture put in FIGURES
    error: str | None = None
    raised: str | None = None  # the exception the fixture's main raised (error says what it said)
    blocked: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "times"}


@dataclass(frozen=True)
class Speedup:
    """After/before throughput, with the 95% bootstrap interval over the repeated runs."""

    ratio: float | None
    low: float | None = None
    high: float | None = None
    verdict: str = "-"


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
    after: RunResult | None = field(default_factory=RunResult)  # None: the fix changed nothing
    timing: Speedup = field(default_factory=lambda: Speedup(None))

    @property
    def changed(self) -> bool:
        return self.after is not None

    @property
    def speedup(self) -> float | None:
        return self.timing.ratio

    @property
    def fixed_failure(self) -> bool:
        """The original raised and the fixed version ran: the fix removed the failure."""
        after = self.after
        return bool(self.before.raised) and after is not None and not (after.error or after.blocked)

    @property
    def ok(self) -> bool:
        runs = [self.before] if self.after is None else [self.before, self.after]
        if self.missing or any(run.blocked for run in runs):
            return False
        if self.fixed_failure:
            return True
        if self.after is None:
            # Nothing was fixed: the original raising is the bug left in place, not verify failing.
            return not self.before.error or bool(self.before.raised)
        return self.match is True and not any(run.error for run in runs)

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
            "changed": self.changed,
            "before_raised_expected": self.fixed_failure,
            "before": self.before.to_json(),
            "after": None if self.after is None else self.after.to_json(),
            "speedup": self.timing.ratio,
            "speedup_interval": None if self.timing.low is None else [self.timing.low, self.timing.high],
            "speedup_verdict": self.timing.verdict,
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


def environment(target: Target, options: VerifyOptions) -> dict[str, Any]:
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
        "timings_meaningful": not target.emulated,
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


def selected(path: str, patterns: Sequence[str]) -> bool:
    """`-k`: a pattern matches a fixture's file name as a substring, or as a glob (`tdl2*`)."""
    name = os.path.basename(path)
    return not patterns or any(p in name or fnmatch.fnmatch(name, p) for p in patterns)


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
    fixture_path: str,
    run_dir: str,
    shim: str,
    target: Target,
    n: int,
    options: VerifyOptions,
    timed: bool = True,
) -> tuple[RunResult, str | None]:
    """Run one version in a fresh process; the result and the path of its saved output."""
    os.makedirs(run_dir, exist_ok=True)
    spec = {
        "fixture": fixture_path,
        "device": target.device,
        "emulate": target.emulated,
        "n": n,
        "seed": options.seed,
        "min_time": options.min_time if timed else 0.0,
        "warmup": options.warmup if timed else 0,
        "min_runs": options.min_runs if timed else 0,
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
        run.raised = report.get("raised")
        return run, None
    counts, times = report["counts"], sorted(report["times"])
    run.h2d, run.d2h, run.syncs = counts["h2d"], counts["d2h"], counts["syncs"]
    run.device_peak_bytes = report.get("device_peak_bytes")
    run.figures = report.get("figures") or {}
    run.times = times
    run.runs = len(times)
    if times:
        run.median_s = statistics.median(times)
        if len(times) >= 2 and run.median_s > 0:
            quartiles = statistics.quantiles(times, n=4)
            run.spread = (quartiles[2] - quartiles[0]) / run.median_s
        run.items_per_s = n / run.median_s if run.median_s > 0 else None
    return run, os.path.join(run_dir, "result.pt")


def speedup(before: RunResult, after: RunResult, emulated: bool, seed: int = 0) -> Speedup:
    """After/before throughput, called faster or slower only beyond the run-to-run noise.

    The interval is a percentile bootstrap (95%) of the ratio of median times,
    resampling each version's timed runs; with fewer than `MIN_RUNS_FOR_VERDICT`
    runs a side, or an interval that contains 1, the verdict is "no measurable change".
    """
    if emulated:
        return Speedup(None, verdict="n/a (emulated)")
    if not (before.median_s and after.median_s):
        return Speedup(None)
    ratio = before.median_s / after.median_s
    if min(len(before.times), len(after.times)) < MIN_RUNS_FOR_VERDICT:
        return Speedup(ratio, verdict="no measurable change")
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(before.times, k=len(before.times)))
        / statistics.median(rng.choices(after.times, k=len(after.times)))
        for _ in range(_BOOTSTRAP_RESAMPLES)
    )
    low, high = ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1]
    verdict = "faster" if low > 1 else "slower" if high < 1 else "no measurable change"
    return Speedup(ratio, low, high, verdict)


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
    options: VerifyOptions,
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
    versions = [("before", source), ("after", fixed)]
    if result.fixes_applied == 0 or fixed == source:
        # Nothing to compare or time: run the original once, for its counts and to see it runs.
        result.note = "no change: no fix applied, so nothing was timed"
        if not options.unsafe_fixes and _unsafe_only(path, source, fixture.codes):
            result.note = "no change: the fix is unsafe; run with --unsafe-fixes"
        result.after = None
        versions = versions[:1]
    outputs: dict[str, str | None] = {"after": None}
    for version, text in versions:
        # A fresh folder per run: fixtures of the same name in different folders,
        # or a child that dies before writing its report, can never read another's report.json.
        run_dir = tempfile.mkdtemp(prefix=f"{name}-{version}-", dir=work)
        copy = os.path.join(run_dir, f"{name}.py")
        with open(copy, "wb") as file:
            file.write(text)
        run, output = _run_child(copy, run_dir, shim, target, result.n, options, len(versions) == 2)
        setattr(result, version, run)
        outputs[version] = output
    if outputs["before"] and outputs["after"]:
        result.mismatch = compare(outputs["before"], outputs["after"], options.rtol, options.atol)
        result.match = result.mismatch is None
    if result.after is not None and result.match:
        result.timing = speedup(result.before, result.after, target.emulated, options.seed)
    return result


def verify(
    paths: Sequence[str],
    options: VerifyOptions,
    fixer: Fixer = project_fixer,
    progress: Callable[[str], None] = lambda message: None,
) -> tuple[dict[str, Any], list[FixtureResult]]:
    """Verify every fixture under `paths`; the environment and one result per fixture."""
    target = choose_target(options.device)
    files = [path for path in find_fixtures(paths) if selected(path, options.patterns)]
    results: list[FixtureResult] = []
    with tempfile.TemporaryDirectory(prefix="torchdev-verify-") as work:
        shim = os.path.join(work, "shim")
        write_shim(shim)
        for index, path in enumerate(files, 1):
            try:
                result = verify_fixture(path, work, shim, target, options, fixer)
            except SourceError as error:
                result = FixtureResult(fixture=path, codes=())
                result.before.error = str(error)
            if result is None:
                progress(f"[{index}/{len(files)}] {path}: skipped (no main(device, n))")
                continue
            results.append(result)
            progress(f"[{index}/{len(files)}] {path}: {'ok' if result.ok else 'FAILED'}")
    return environment(target, options), results
