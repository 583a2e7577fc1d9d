"""Applying fixes: choose compatible ones, apply them together, repeat until stable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import FileResult, apply_fixes, check_module, check_source
from torchdev_lint.rule import Fix, Rule

# Each round applies every fix that does not overlap another; fixes that
# overlapped are found again on the re-check and applied in the next round.
MAX_ROUNDS = 10


@dataclass
class FixOutcome:
    """The fixed source and what happened to the findings."""

    source: bytes
    applied: int
    result: FileResult  # the check of the final source: what remains


def fix_source(
    path: str,
    source: bytes,
    rules: Sequence[type[Rule]],
    settings: Settings,
    *,
    unsafe: bool = False,
    max_rounds: int = MAX_ROUNDS,
) -> FixOutcome:
    """Apply safe (and with `unsafe` also unsafe) fixes until none is left to apply.

    `max_rounds=1` applies only fixes of findings in `source` itself, not those
    that earlier fixes give rise to (the fuzz tests check each round apart).
    """
    result = check_source(path, source, rules, settings, with_edits=False)
    applied = 0
    try:
        for _ in range(max_rounds):
            chosen = _choose(result, unsafe)
            if not chosen or result.module is None:
                break
            if applied == 0 and result.module.bytes != source:
                # LibCST drops form feeds and a final lone CR: writing would change other lines.
                raise SourceError(path, "cannot fix: LibCST does not reproduce this file exactly")
            module = apply_fixes(result.module, chosen)
            applied += len(chosen)
            result = check_module(path, module, rules, settings, with_edits=False)
        module = result.module
        new_source = source if module is None or applied == 0 else module.bytes
    except RecursionError:  # LibCST's transformer and code generation recurse
        raise SourceError(path, "too deeply nested to fix") from None
    return FixOutcome(new_source, applied, result)


def _choose(result: FileResult, unsafe: bool) -> list[Fix]:
    """Fixes to apply together: allowed by safety, not suppressed, spans disjoint."""
    chosen: list[Fix] = []
    taken: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for finding, diagnostic in zip(result.findings, result.diagnostics, strict=True):
        fix = finding.fix
        if fix is None or diagnostic.suppressed or (fix.safety == "unsafe" and not unsafe):
            continue
        spans = [result.positions[id(node)] for node in fix.replacements]
        start = min(span[0] for span in spans)
        end = max(span[1] for span in spans)
        if any(start <= b_end and b_start <= end for b_start, b_end in taken):
            continue
        taken.append((start, end))
        chosen.append(fix)
    return chosen
