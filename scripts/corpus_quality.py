"""Check and fix (unsafe fixes included) copies of real projects; report quality per rule and per project.

    .venv/bin/python scripts/corpus_quality.py [PROJECT_DIR ...] [--corpus DIR] [--torch]
                                               [--workers 2] [--limit N]

Projects are folders of Python source: each PROJECT_DIR, every folder directly
under each `--corpus DIR` (e.g. unpacked sdists/wheels named `<name>-<version>`),
and with `--torch` (the default when nothing else is named) the installed
torch package. Each project's version comes from its metadata (`PKG-INFO`,
`*.dist-info/METADATA`, also next to the folder) or from a `<name>-<version>`
folder name.

Every `.py` file of the copies is checked with all rules, fixed with unsafe
fixes (written back atomically, as `torchdev-fix` does), and fixed again. The
summary counts files, findings per rule, internal errors (any exception other
than a SourceError for a file that does not parse), fixed files that no longer
compile, files a second fix run changes, and changes made outside the fixed
findings; and per rule: fixes the fixer's guard refused (oldest-grammar or
comment), fixed files that fail the Python 3.10 grammar or lost a comment
(checked here independently of the guard, and counted for every rule whose
findings the file had), and follow-up fixes (fixes of findings that other
fixes gave rise to, applied in a later round). Exit status 1 when any of the
problem counts is not zero.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from differential import comments, oldest_grammar_error  # noqa: E402
from fix_properties import check_fix_properties  # noqa: E402

from torchdev_lint.config import Settings  # noqa: E402
from torchdev_lint.engine import check_source  # noqa: E402
from torchdev_lint.files import write_atomic  # noqa: E402
from torchdev_lint.fixes import MAX_ROUNDS, fix_source  # noqa: E402
from torchdev_lint.rule import all_rules  # noqa: E402

_REFUSED = re.compile(r"refused (TDL\d+) fix at")
# Per-rule columns of the table, in order.
COLUMNS = (
    "findings",
    "fixed files",
    "guard grammar",
    "guard comment",
    "3.10 fails",
    "lost comments",
    "follow-ups",
)


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    source: Path


def _one(path: str) -> dict[str, object]:
    """Everything about one file, as plain data for the parent process."""
    rules = all_rules()
    fixable = {rule.code for rule in rules if rule.fix_availability != "never"}
    started = time.perf_counter()
    record: dict[str, object] = {"path": path, "parsed": True, "findings": {}, "problems": [], "error": None}
    per_rule: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    try:
        source = Path(path).read_bytes()
        outcome = check_fix_properties(path, source, rules)
        record.update(parsed=outcome.parsed, findings=outcome.findings, problems=outcome.problems)
        record["refused"] = outcome.refused
        record["cascade"] = outcome.rounds > 1
        for problem in outcome.problems:
            match = _REFUSED.match(problem)
            if match:
                per_rule[match.group(1)]["guard comment" if "comment" in problem else "guard grammar"] += 1
        if outcome.fixed is not None:
            touched = [code for code in outcome.findings if code in fixable]
            for code in touched:
                per_rule[code]["fixed files"] += 1
            if oldest_grammar_error(outcome.fixed) and not oldest_grammar_error(source):
                for code in touched:
                    per_rule[code]["3.10 fails"] += 1
            if comments(source) - comments(outcome.fixed):
                for code in touched:
                    per_rule[code]["lost comments"] += 1
            if outcome.rounds > 1:
                for code, count in _follow_ups(path, source, rules).items():
                    per_rule[code]["follow-ups"] += count
            write_atomic(path, outcome.fixed)
    except Exception:  # noqa: BLE001 - counting them is the point
        record["error"] = traceback.format_exc()
    record["per_rule"] = {code: dict(counts) for code, counts in per_rule.items()}
    record["seconds"] = time.perf_counter() - started
    return record


def _follow_ups(path: str, source: bytes, rules: list) -> collections.Counter[str]:
    """Per rule, fixes applied after the first round: findings that earlier fixes gave rise to."""
    counts: collections.Counter[str] = collections.Counter()
    text = source
    for round_number in range(MAX_ROUNDS):
        step = fix_source(path, text, rules, Settings(), unsafe=True, max_rounds=1)
        if step.source == text:
            break
        if round_number:
            result = check_source(path, text, rules, Settings())
            counts.update(d.code for d in result.reported if d.fix is not None)
        text = step.source
    return counts


def project_version(folder: Path) -> str:
    """The version in the project's metadata, else in a `<name>-<version>` folder name, else '?'."""
    candidates = [
        folder / "PKG-INFO",
        *folder.glob("*.dist-info/METADATA"),
        *folder.glob("*.egg-info/PKG-INFO"),
    ]
    candidates += list(folder.parent.glob(f"{folder.name}-*.dist-info/METADATA"))
    for metadata in candidates:
        try:
            text = metadata.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = re.search(r"^Version:\s*(\S+)", text, re.M)
        if match:
            return match.group(1)
    match = re.match(r".+?-(\d[\w.+!-]*)$", folder.name)
    return match.group(1) if match else "?"


def projects(args: argparse.Namespace) -> list[Project]:
    folders = [Path(p) for p in args.projects]
    for corpus in args.corpus:
        folders += sorted(p for p in Path(corpus).iterdir() if p.is_dir())
    if args.torch or not folders:
        folders.append(Path(sysconfig.get_paths()["purelib"]) / "torch")
    found = []
    for folder in folders:
        name = re.sub(r"-\d[\w.+!-]*$", "", folder.name)
        found.append(Project(name, project_version(folder), folder))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="*", help="project folders to copy, check and fix")
    parser.add_argument("--corpus", action="append", default=[], help="a folder of project folders")
    parser.add_argument("--torch", action="store_true", help="also the installed torch package")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="only the first N files per project (0: all)")
    args = parser.parse_args()
    chosen = projects(args)
    started = time.perf_counter()
    per_code: collections.Counter[str] = collections.Counter()
    per_rule: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    per_project: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    unparsable, errors, broken, refused, slow = [], [], [], [], []
    fixed = cascades = 0
    with tempfile.TemporaryDirectory(prefix="tdl-corpus-") as temp:
        files: list[str] = []
        owner: dict[str, str] = {}
        for index, project in enumerate(chosen):
            copy = Path(temp) / f"{index}" / project.source.name
            shutil.copytree(project.source, copy, ignore=_not_python)
            mine = sorted(str(p) for p in copy.rglob("*.py"))
            mine = mine[: args.limit] if args.limit else mine
            files += mine
            owner.update(dict.fromkeys(mine, project.name))
            per_project[project.name]["files"] = len(mine)
        with multiprocessing.Pool(args.workers) as pool:
            for record in pool.imap_unordered(_one, files, chunksize=4):
                path = str(record["path"])
                rel = os.path.relpath(path, temp)
                project_counts = per_project[owner[path]]
                findings: dict[str, int] = record["findings"]  # type: ignore[assignment]
                per_code.update(findings)
                project_counts["findings"] += sum(findings.values())
                for code, counts in record["per_rule"].items():  # type: ignore[attr-defined]
                    per_rule[code].update(counts)
                if not record["parsed"]:
                    unparsable.append(rel)
                cascades += bool(record.get("cascade"))
                if record.get("refused"):
                    refused.append(f"{rel} ({record['refused']})")
                if record["error"]:
                    errors.append((rel, record["error"]))
                for problem in record["problems"]:  # type: ignore[attr-defined]
                    broken.append((rel, problem))
                    project_counts["problems"] += 1
                fixed += bool(findings) and not record["error"]
                slow.append((record["seconds"], rel))
    elapsed = time.perf_counter() - started
    for code, count in per_code.items():
        per_rule[code]["findings"] = count
    for rel, text in errors:
        print(f"INTERNAL ERROR {rel}\n{text}", file=sys.stderr)
    for rel, problem in broken:
        print(f"BROKEN FIX {rel}: {problem}", file=sys.stderr)
    _print_projects(chosen, per_project)
    _print_rules(per_rule)
    kinds = collections.Counter(p.split(":", 1)[0].split(" ")[0] for _, p in broken)
    print(f"files: {len(files)} ({len(unparsable)} do not parse: {', '.join(unparsable) or '-'})")
    print(f"files with findings: {fixed}")
    print(f"findings total: {sum(per_code.values())}")
    print(f"files where fixes gave rise to new findings (fixed in a later round): {cascades}")
    print(f"files the fixer refused: {len(refused)} {', '.join(refused)}")
    print(f"internal errors: {len(errors)}")
    print(f"fixed files that no longer compile: {kinds['fixed']}")
    print(f"files where a second fix run changes something: {kinds['not']}")
    print(f"changes outside the fixed findings: {kinds['changed'] + kinds['inserted']}")
    print(f"fixes refused by the fixer's guard: {kinds['refused']}")
    print(f"slowest file: {max(slow)[1]} ({max(slow)[0]:.1f} s)" if slow else "slowest file: -")
    print(f"wall time: {elapsed:.0f} s with {args.workers} workers")
    problems = sum(per_rule[c][k] for c in per_rule for k in COLUMNS[2:6])
    return 1 if errors or broken or problems else 0


def _print_projects(chosen: list[Project], per_project: dict[str, collections.Counter[str]]) -> None:
    print("| project | version | files | findings | fix problems |")
    print("|---|---|---:|---:|---:|")
    for project in chosen:
        counts = per_project[project.name]
        print(
            f"| {project.name} | {project.version} | {counts['files']} | {counts['findings']} "
            f"| {counts['problems']} |"
        )
    print()


def _print_rules(per_rule: dict[str, collections.Counter[str]]) -> None:
    print("| rule | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for code in sorted(per_rule):
        print(f"| {code} | " + " | ".join(str(per_rule[code][column]) for column in COLUMNS) + " |")
    total = [sum(per_rule[code][column] for code in per_rule) for column in COLUMNS]
    print("| total | " + " | ".join(map(str, total)) + " |")
    print()


def _not_python(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not os.path.isdir(os.path.join(directory, n))]


if __name__ == "__main__":
    sys.exit(main())
