"""Presenting verification results: terminal table, JSON document, plot."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from torchdev_lint.verify.session import FixtureResult, RunResult

HEADERS = ("fixture", "codes", "match", "before items/s", "after items/s", "speedup", "H2D", "D2H", "syncs")


def _rate(run: RunResult) -> str:
    if run.error:
        return "error"
    if run.items_per_s is None:
        return "-"
    spread = f" ±{run.spread * 50:.0f}%" if run.spread is not None else ""
    return f"{run.items_per_s:,.0f}{spread}"


def _counts(result: FixtureResult, key: str) -> str:
    before, after = getattr(result.before, key), getattr(result.after, key)
    if before is None or after is None:
        return "-"
    return f"{before} → {after}"


def _match(result: FixtureResult) -> str:
    if result.missing:
        return "MISSING " + ",".join(result.missing)
    if result.match is None:
        return "ERROR"
    return "yes" if result.match else "NO"


def rows(results: Sequence[FixtureResult]) -> list[tuple[str, ...]]:
    table = []
    for result in results:
        speedup = result.speedup
        table.append(
            (
                os.path.basename(result.fixture),
                ",".join(result.codes),
                _match(result),
                _rate(result.before),
                _rate(result.after),
                f"{speedup:.2f}x" if speedup is not None else "-",
                _counts(result, "h2d"),
                _counts(result, "d2h"),
                _counts(result, "syncs"),
            )
        )
    return table


def _problems(results: Sequence[FixtureResult]) -> list[str]:
    lines = []
    for result in results:
        name = os.path.basename(result.fixture)
        if result.missing:
            lines.append(f"{name}: declared {', '.join(result.missing)} not reported")
        if result.mismatch:
            lines.append(f"{name}: results differ after the fix: {result.mismatch}")
        for version in ("before", "after"):
            run = getattr(result, version)
            if run.error:
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
    notes.append("items/s: median over repeated runs, ± half the interquartile range; counts: one run")
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
    """Speedup per fixture and transfer counts before/after (log scale), one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [os.path.splitext(os.path.basename(r.fixture))[0] for r in results]
    positions = list(range(len(results)))
    figure, (speed, traffic) = plt.subplots(
        2, 1, figsize=(max(8.0, 0.7 * len(results) + 3), 8), constrained_layout=True
    )
    speedups = [r.speedup or 0.0 for r in results]
    speed.bar(positions, speedups, color=["tab:green" if s >= 1 else "tab:red" for s in speedups])
    speed.axhline(1.0, color="black", linewidth=0.8)
    speed.set_ylabel("speedup (after / before)")
    title = f"torchdev-lint verify on {environment['device_name']}"
    if environment.get("emulated"):
        title += "\nCUDA emulated on CPU; timings not meaningful"
    speed.set_title(title)
    width = 0.13
    keys = (("h2d", "H2D"), ("d2h", "D2H"), ("syncs", "syncs"))
    for k, (key, label) in enumerate(keys):
        for j, version in enumerate(("before", "after")):
            values = [(getattr(getattr(r, version), key) or 0) + 1 for r in results]
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
    traffic.set_title("transfers and syncs in one run, before → after")
    traffic.legend(ncol=3, fontsize="small")
    for axes in (speed, traffic):
        axes.set_xticks(positions, names, rotation=30, ha="right", fontsize="small")
    figure.savefig(path, dpi=110)
    plt.close(figure)
