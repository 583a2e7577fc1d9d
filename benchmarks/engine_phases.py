"""Where a check's CPU time goes, and what the engine's own passes save over LibCST's.

    .venv/bin/python benchmarks/engine_phases.py [PATH ...]

For the files under PATH (default: torch/nn, torch/optim, torch/utils/data of
the installed torch), prints CPU seconds, in this process, of: LibCST parsing;
LibCST's own `visit` with an empty visitor against the engine's read-only
`walk`; LibCST's ScopeProvider + QualifiedNameProvider (what TorchFix uses)
against the engine's full check with every rule (its own name resolution
included); positions of the reported nodes from PositionProvider against the
engine's lean pass; and a full check with and without fix edits.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider, ScopeProvider

from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.config import Settings, select_rules
from torchdev_lint.engine import check_module
from torchdev_lint.files import discover
from torchdev_lint.fixes import add_edits
from torchdev_lint.positions import spans_and_code


def cpu(label: str, action: Callable[[], object], base: float | None = None) -> float:
    start = time.process_time()
    action()
    seconds = time.process_time() - start
    ratio = f"  ({seconds / base:.2f}x parse)" if base else ""
    print(f"  {label:<58} {seconds:7.2f} s{ratio}", flush=True)
    return seconds


def main(argv: list[str]) -> int:
    if argv:
        folders = argv
    else:
        spec = importlib.util.find_spec("torch")
        assert spec is not None and spec.origin is not None
        torch = Path(spec.origin).parent
        folders = [str(torch / "nn"), str(torch / "optim"), str(torch / "utils" / "data")]
    files, _ = discover(folders, respect_gitignore=False)
    sources = [Path(f).read_bytes() for f in files]
    rules = select_rules(["ALL"])
    settings = Settings()
    lines = sum(s.count(b"\n") for s in sources)
    print(f"{len(files)} files, {lines} lines; {len(rules)} rules")
    modules: list[cst.Module] = []
    parse = cpu("libcst.parse_module", lambda: modules.extend(cst.parse_module(s) for s in sources))
    cpu("LibCST visit, empty CSTVisitor", lambda: [m.visit(cst.CSTVisitor()) for m in modules], parse)
    cpu("engine walk, no handlers", lambda: [walk(m, lambda n: None, lambda n: None) for m in modules], parse)

    def providers() -> None:
        for module in modules:
            MetadataWrapper(module, unsafe_skip_copy=True).resolve_many(
                [ScopeProvider, QualifiedNameProvider]
            )

    cpu("LibCST ScopeProvider + QualifiedNameProvider", providers, parse)
    results = []
    cpu(
        "engine check, all rules, no fix edits (positions included)",
        lambda: results.extend(
            check_module(f, m, rules, settings) for f, m in zip(files, modules, strict=True)
        ),
        parse,
    )
    cpu(
        "engine check, all rules, with fix edits",
        lambda: [add_edits(check_module(f, m, rules, settings)) for f, m in zip(files, modules, strict=True)],
        parse,
    )
    flagged = [(r.module, [f.node for f in r.findings]) for r in results if r.findings]
    print(f"  {len(flagged)} files with findings, {sum(len(n) for _, n in flagged)} findings")

    def provider_positions() -> None:
        for module, nodes in flagged:
            positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
            [positions[n] for n in nodes]

    cpu("positions of reported nodes: PositionProvider", provider_positions, parse)
    cpu(
        "positions of reported nodes: engine's lean pass",
        lambda: [spans_and_code(m, n)[0] for m, n in flagged],
        parse,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
