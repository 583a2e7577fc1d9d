"""Write the hunks each rule's fixes make on real projects, for a person to read.

    python scripts/fix_hunks.py --out hunks.md PROJECT_DIR [PROJECT_DIR ...]

For every rule with a fix, each file is fixed with that rule alone twice: safe
fixes only, then unsafe ones too. The safe run's hunks are the rule's safe
hunks; what the unsafe run changes on top of them are its unsafe hunks. Up to
`--per-rule` hunks per rule and safety are written (a seeded sample when there
are more), each with its project and file, so that every one can be judged:
does the program still do the same thing (safe) / is it what the user wants
(unsafe)? Nothing is written into the projects.
"""

from __future__ import annotations

import argparse
import difflib
import random
from collections import defaultdict
from pathlib import Path

from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import fix_source
from torchdev_lint.rule import Rule, all_rules

Hunk = tuple[str, str]  # (where, unified diff text)


def hunks(where: str, before: bytes, after: bytes) -> list[Hunk]:
    """The unified-diff hunks between two versions of a file, two lines of context."""
    old = before.decode("utf-8", "replace").splitlines(keepends=True)
    new = after.decode("utf-8", "replace").splitlines(keepends=True)
    found: list[Hunk] = []
    current: list[str] = []
    for line in list(difflib.unified_diff(old, new, n=2))[2:]:
        if line.startswith("@@") and current:
            found.append((where, "".join(current)))
            current = []
        current.append(line if line.endswith("\n") else line + "\n")
    if current:
        found.append((where, "".join(current)))
    return found


def fixable_files(
    rules: list[type[Rule]], files: list[tuple[str, Path]]
) -> dict[str, list[tuple[str, Path]]]:
    """For each rule, the files where it has a finding with a fix (one check per file)."""
    found: dict[str, list[tuple[str, Path]]] = defaultdict(list)
    for project, path in files:
        try:
            result = check_source(str(path), path.read_bytes(), rules, Settings())
        except (SourceError, RecursionError):
            continue
        for code in {finding.rule.code for finding in result.findings if finding.fix is not None}:
            found[code].append((project, path))
    return found


def rule_hunks(rule: type[Rule], files: list[tuple[str, Path]]) -> dict[str, list[Hunk]]:
    """Safe and unsafe hunks of one rule's fixes over the files."""
    found: dict[str, list[Hunk]] = defaultdict(list)
    for project, path in files:
        source = path.read_bytes()
        try:
            safe = fix_source(str(path), source, [rule], Settings()).source
            everything = fix_source(str(path), source, [rule], Settings(), unsafe=True).source
        except (SourceError, RecursionError):
            continue
        where = f"{project} {path}"
        found["safe"] += hunks(where, source, safe)
        found["unsafe"] += hunks(where, safe, everything)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("projects", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-rule", type=int, default=12)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--select", default="", help="comma-separated codes (default: every rule with a fix)")
    args = parser.parse_args()
    chosen = {code for code in args.select.split(",") if code}
    files = [(project.name, path) for project in args.projects for path in sorted(project.rglob("*.py"))]
    rules = [r for r in all_rules() if r.fix_availability != "never" and (not chosen or r.code in chosen)]
    fixable = fixable_files(rules, files)
    lines = ["# Fix hunks for reading", "", f"Projects: {', '.join(p.name for p in args.projects)}", ""]
    for rule in rules:
        found = rule_hunks(rule, fixable.get(rule.code, []))
        for safety in ("safe", "unsafe"):
            every = found.get(safety, [])
            sample = (
                every
                if len(every) <= args.per_rule
                else random.Random(args.seed).sample(every, args.per_rule)
            )
            lines.append(f"## {rule.code} {safety}: {len(every)} hunks, {len(sample)} shown")
            lines.append("")
            for index, (where, text) in enumerate(sample, 1):
                lines += [
                    f"### {rule.code}-{safety}-{index}: {where}",
                    "",
                    "```diff",
                    text.rstrip("\n"),
                    "```",
                    "",
                ]
        print(f"{rule.code}: {len(found.get('safe', []))} safe, {len(found.get('unsafe', []))} unsafe hunks")
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
