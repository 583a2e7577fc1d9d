"""One fixture run in a fresh process: `python -m torchdev_lint.verify.child RUN_DIR`.

Reads `RUN_DIR/spec.json`, imports the fixture (its `__main__` block does not
run), calls `main(device, n)` once with counting on and saves what it returned
to `result.pt`, then times it: warm-up runs, then repeated runs until the
minimum time has passed. Every call starts from the same seed. Writes
`report.json` with counts, timings, the figures the fixture recorded in its
`FIGURES` dict during the counting run, the peak device memory (on a real GPU),
and any error: `raised` names the exception when the fixture's own `main`
raised it (the bug a fix may remove), as opposed to a failure of the harness.
Runs under the sandbox installed by the `sitecustomize` the parent put on
`PYTHONPATH`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from torchdev_lint.verify.emulation import DeviceMode, to_host


def _seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("torchdev_verify_fixture", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _patch(mode: DeviceMode) -> None:
    """Count `torch.cuda.synchronize()`, saves and loads; under emulation none touches CUDA."""
    real = torch.cuda.synchronize

    def synchronize(device: torch.device | str | int | None = None) -> None:
        mode.synchronize()
        if not mode.emulate:
            real(device)

    torch.cuda.synchronize = synchronize
    torch.load = torch.serialization.load = mode.wrap_load(torch.serialization.load)
    torch.save = torch.serialization.save = mode.wrap_save(torch.serialization.save)


def _timings(call: Callable[[], object], sync: Callable[[], None], spec: dict[str, Any]) -> list[float]:
    for _ in range(spec["warmup"]):
        call()
    times: list[float] = []
    spent = 0.0
    while len(times) < spec["max_runs"] and (spent < spec["min_time"] or len(times) < spec["min_runs"]):
        sync()
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return times


def run(run_dir: str) -> dict[str, Any]:
    with open(os.path.join(run_dir, "spec.json"), encoding="utf-8") as file:
        spec = json.load(file)
    device = torch.device(spec["device"])
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    mode = DeviceMode(emulate=spec["emulate"])
    _patch(mode)
    really_cuda = device.type == "cuda" and not spec["emulate"]

    def sync() -> None:
        if really_cuda:
            torch.cuda.synchronize(device)

    fixture = _load(spec["fixture"])
    seed, n = spec["seed"], spec["n"]

    def call() -> object:
        _seed(seed)
        return fixture.main(device, n)

    # The counting run doubles as the run whose result is compared.
    if really_cuda:
        # The caching allocator exists only once CUDA is initialised: before the first CUDA call
        # `reset_peak_memory_stats` raises "Invalid device argument 0: did you call init?".
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)
    mode.counting = True
    try:
        with mode:
            result = call()
            sync()
    except Exception as error:  # the fixture's own failure: reported as what the run raised
        return {"raised": type(error).__name__, "error": f"{type(error).__name__}: {error}"}
    mode.counting = False
    memory = torch.cuda.max_memory_allocated(device) if really_cuda else None
    figures = _figures(fixture)
    torch.save(to_host(result), os.path.join(run_dir, "result.pt"))
    counts = mode.counts.as_dict()
    if spec["emulate"]:
        with mode:
            times = _timings(call, sync, spec)
    else:
        times = _timings(call, sync, spec)
    return {"counts": counts, "times": times, "device_peak_bytes": memory, "figures": figures}


def _figures(fixture: Any) -> dict[str, float]:
    """The numbers the fixture put in its module-level `FIGURES` dict (name -> number)."""
    found = getattr(fixture, "FIGURES", None)
    if not isinstance(found, dict):
        return {}
    return {
        str(k): float(v) for k, v in found.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def main() -> int:
    run_dir = sys.argv[1]
    try:
        report: dict[str, Any] = run(run_dir)
    except BaseException as error:  # noqa: B036 - the report must say why any run failed
        lines = traceback.format_exception(error)
        report = {"error": f"{type(error).__name__}: {error}", "traceback": "".join(lines[-12:])}
    with open(os.path.join(run_dir, "report.json"), "w", encoding="utf-8") as file:
        json.dump(report, file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
