"""Presenting verification results: terminal table, JSON document, plot."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from torchdev_lint.verify.session import FixtureResult, RunResult

HEADERS = (
    "fixture",
    "codes",
    "match",
    "before items/s",
    "after items/s",
    "speedup",
    "H2D",
    "D2H",
    "syncs",
    "peak memory",
)
NOTE_SPREAD = (
    "items/s: n / median time of the repeated runs, ± half the interquartile range as a % of the median "
    "(JSON spread: the whole interquartile range / median); counts: one run"
)
NOTE_SPEEDUP = (
    "speedup: after/before; called only when the 95% bootstrap interval over the repeated runs "
    "(shown, with the runs before/after) excludes 1"
)


def _rate(run: RunResult | None) -> str:
    if run is None:
        return "-"
    if run.raised:
        return f"raised {run.raised}"
    if run.error:
        return "error"
    if run.items_per_s is None:
        return "-"
    spread = f" ±{run.spread * 50:.0f}%" if run.spread is not None else ""
    return f"{run.items_per_s:,.0f}{spread}"


def _counts(result: FixtureResult, key: str) -> str:
    before = getattr(result.before, key)
    if result.after is None:
        return "-" if before is None else f"{before} (no change)"
    after = getattr(result.after, key)
    if before is None or after is None:
        return "-" if after is None else f"- → {after}"
    return f"{before} → {after}"


def _memory(result: FixtureResult) -> str:
    before = result.before.device_peak_bytes
    after = result.after.device_peak_bytes if result.after is not None else before
    if before is None and after is None:
        return "-"
    return f"{_megabytes(before)} → {_megabytes(after)}"


def _megabytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MB"


def _match(result: FixtureResult) -> str:
    if result.missing:
        return "MISSING " + ",".join(result.missing)
    if result.fixed_failure:
        return "fixed (before raised)"
    if result.after is None:
        if result.before.raised:
            return "no change (raised)"
        return "no change" if not result.before.error else "ERROR"
    if result.match is None:
        return "ERROR"
    return "yes" if result.match else "NO"


def speedup_text(result: FixtureResult) -> str:
    timing = result.timing
    if result.after is None:
        return "no change"
    if timing.verdict == "n/a (emulated)" or timing.ratio is None:
        return timing.verdict
    runs = f"n={len(result.before.times)}/{len(result.after.times)}"
    if timing.low is None:
        return f"{timing.verdict} ({timing.ratio:.2f}x, {runs}: too few runs)"
    interval = f"[{timing.low:.2f}-{timing.high:.2f}], {runs}"
    if timing.verdict == "no measurable change":
        return f"no measurable change ({timing.ratio:.2f}x {interval})"
    return f"{timing.ratio:.2f}x {interval}"


def rows(results: Sequence[FixtureResult]) -> list[tuple[str, ...]]:
    return [
        (
            os.path.basename(result.fixture),
            ",".join(result.codes),
            _match(result),
            _rate(result.before),
            _rate(result.after),
            speedup_text(result),
            _counts(result, "h2d"),
            _counts(result, "d2h"),
            _counts(result, "syncs"),
            _memory(result),
        )
        for result in results
    ]


def _problems(results: Sequence[FixtureResult]) -> list[str]:
    lines = []
    for result in results:
        name = os.path.basename(result.fixture)
        if result.missing:
            lines.append(f"{name}: declared {', '.join(result.missing)} not reported")
        if result.mismatch:
            lines.append(f"{name}: results differ after the fix: {result.mismatch}")
        if result.fixed_failure:
            lines.append(
                f"{name}: before: raised {result.before.raised} (expected: the bug this fix removes): "
                f"{result.before.error}; after: ran"
            )
        elif result.after is None and result.before.raised:
            lines.append(
                f"{name}: before: raised {result.before.raised} (the bug is left in place): {result.before.error}"
            )
        for figure, before in result.before.figures.items():
            after = result.after.figures.get(figure) if result.after is not None else before
            lines.append(f"{name}: {figure}: {before:g} → {'-' if after is None else f'{after:g}'}")
        for version in ("before", "after"):
            run = getattr(result, version)
            if run is None:
                continue
            if run.error and not (
                version == "before" and (result.fixed_failure or run.raised and result.after is None)
            ):
                lines.append(f"{name} ({version}): {run.error}")
            for what in run.blocked:
                lines.append(f"{name} ({version}): blocked {what}")
        if result.note:
            lines.append(f"{name}: {result.note}")
    return lines


def table(environment: dict[str, Any], results: Sequence[FixtureResult], markdown: bool = False) -> str:
    """The results as an aligned text table (or a markdown one) with notes below."""
    body = rows(results)
    if markdown:
        lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
    else:
        widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(HEADERS)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)).rstrip()]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    head = f"device: {environment['device_name']} ({environment['device']}), torch {environment['torch']}"
    notes = [head]
    if environment.get("note"):
        notes.append(environment["note"])
    notes.append(NOTE_SPREAD)
    notes.append(NOTE_SPEEDUP if environment.get("timings_meaningful", True) else "speedup: n/a (emulated)")
    notes.append("peak memory: torch.cuda.max_memory_allocated during the counting run (real GPU only)")
    problems = _problems(results)
    tail = ["", *problems] if problems else []
    prefix = [f"- {n}" for n in notes] + [""] if markdown else [*notes, ""]
    return "\n".join(prefix + lines + tail) + "\n"


def document(environment: dict[str, Any], results: Sequence[FixtureResult]) -> dict[str, Any]:
    return {"environment": environment, "fixtures": [result.to_json() for result in results]}


def write_json(path: str, environment: dict[str, Any], results: Sequence[FixtureResult]) -> None:
    with open(path, "w", encoding="utf-8") as file:
        json.dump(document(environment, results), file, indent=2)
        file.write("\n")


def write_plot(path: str, environment: dict[str, Any], results: Sequence[FixtureResult]) -> None:
    """Transfer counts before/after (log scale), and on a real device the speedups, one figure.

    Under emulation the timings are of the CPU, so no speedup is drawn and the title says why.
    Speedups within the noise are drawn grey, with their bootstrap interval.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [os.path.splitext(os.path.basename(r.fixture))[0] for r in results]
    positions = list(range(len(results)))
    timed = environment.get("timings_meaningful", True)
    title = f"torchdev-lint verify on {environment['device_name']}"
    width_in = max(8.0, 0.7 * len(results) + 3)
    if timed:
        figure, (speed, traffic) = plt.subplots(2, 1, figsize=(width_in, 8), constrained_layout=True)
        _plot_speedups(speed, positions, results)
        speed.set_title(title)
        axes_list = [speed, traffic]
    else:
        figure, traffic = plt.subplots(1, 1, figsize=(width_in, 5), constrained_layout=True)
        title += "\nCUDA emulated on CPU: timings not meaningful, so only transfer and sync counts are shown"
        axes_list = [traffic]
    width = 0.13
    keys = (("h2d", "H2D"), ("d2h", "D2H"), ("syncs", "syncs"))
    for k, (key, label) in enumerate(keys):
        for j, version in enumerate(("before", "after")):
            values = [(getattr(getattr(r, version) or r.before, key) or 0) + 1 for r in results]
            offset = (2 * k + j - 2.5) * width
            traffic.bar(
                [p + offset for p in positions],
                values,
                width,
                label=f"{label} {version}",
                color=f"C{k}",
                alpha=1.0 if version == "before" else 0.45,
            )
    traffic.set_yscale("log")
    traffic.set_ylabel("count + 1 (log)")
    counts_title = "transfers and syncs in one run, before → after"
    traffic.set_title(counts_title if timed else f"{title}\n{counts_title}")
    traffic.legend(ncol=3, fontsize="small")
    for axes in axes_list:
        axes.set_xticks(positions, names, rotation=30, ha="right", fontsize="small")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _plot_speedups(axes: Any, positions: list[int], results: Sequence[FixtureResult]) -> None:
    """Bars coloured only where the change is beyond the noise; whiskers show the interval."""
    colours = {"faster": "tab:green", "slower": "tab:red"}
    values = [r.timing.ratio or 0.0 for r in results]
    axes.bar(positions, values, color=[colours.get(r.timing.verdict, "tab:gray") for r in results])
    for position, result in zip(positions, results, strict=True):
        timing = result.timing
        if timing.low is not None and timing.high is not None and timing.ratio is not None:
            axes.errorbar(
                position,
                timing.ratio,
                yerr=[[timing.ratio - timing.low], [timing.high - timing.ratio]],
                color="black",
                capsize=3,
            )
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_ylabel("speedup (after / before), 95% interval")
