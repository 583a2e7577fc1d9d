"""Check and fix (unsafe fixes included) a copy of the installed torch package source; report quality.

    .venv/bin/python scripts/corpus_quality.py [--source DIR] [--workers 2] [--limit N]

Every `.py` file of the copy is checked with all rules, fixed with unsafe
fixes (written back atomically, as `torchdev-fix` does), and fixed again. The
summary counts files, findings per code, internal errors (any exception other
than a SourceError for a file that does not parse), fixed files that no longer
compile, files a second fix run changes, and changes made outside the fixed
findings. Exit status 1 when any of those last four is not zero.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import shutil
import sys
import sysconfig
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fix_properties import check_fix_properties  # noqa: E402

from torchdev_lint.files import write_atomic  # noqa: E402
from torchdev_lint.rule import all_rules  # noqa: E402


def _one(path: str) -> dict[str, object]:
    """Everything about one file, as plain data for the parent process."""
    rules = all_rules()
    started = time.perf_counter()
    record: dict[str, object] = {"path": path, "parsed": True, "findings": {}, "problems": [], "error": None}
    try:
        source = Path(path).read_bytes()
        outcome = check_fix_properties(path, source, rules)
        record.update(parsed=outcome.parsed, findings=outcome.findings, problems=outcome.problems)
        record["refused"] = outcome.refused
        record["cascade"] = outcome.rounds > 1
        if outcome.fixed is not None:
            write_atomic(path, outcome.fixed)
    except Exception:  # noqa: BLE001 - counting them is the point
        record["error"] = traceback.format_exc()
    record["seconds"] = time.perf_counter() - started
    return record


def main() -> int:
    default = Path(sysconfig.get_paths()["purelib"]) / "torch"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=default, help=f"package to copy (default: {default})")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="only the first N files (0: all)")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tdl-corpus-") as temp:
        copy = Path(temp) / args.source.name
        shutil.copytree(args.source, copy, ignore=_not_python)
        files = sorted(str(p) for p in copy.rglob("*.py"))
        if args.limit:
            files = files[: args.limit]
        per_code: collections.Counter[str] = collections.Counter()
        unparsable, errors, broken, fixed, slow, refused, cascades = [], [], [], 0, [], [], 0
        with multiprocessing.Pool(args.workers) as pool:
            for record in pool.imap_unordered(_one, files, chunksize=4):
                rel = os.path.relpath(str(record["path"]), temp)
                per_code.update(record["findings"])  # type: ignore[arg-type]
                if not record["parsed"]:
                    unparsable.append(rel)
                cascades += bool(record.get("cascade"))
                if record.get("refused"):
                    refused.append(f"{rel} ({record['refused']})")
                if record["error"]:
                    errors.append((rel, record["error"]))
                for problem in record["problems"]:  # type: ignore[attr-defined]
                    broken.append((rel, problem))
                fixed += bool(record["findings"]) and not record["error"]
                slow.append((record["seconds"], rel))
    elapsed = time.perf_counter() - started
    for rel, text in errors:
        print(f"INTERNAL ERROR {rel}\n{text}", file=sys.stderr)
    for rel, problem in broken:
        print(f"BROKEN FIX {rel}: {problem}", file=sys.stderr)
    kinds = collections.Counter(p.split(":", 1)[0].split(" ")[0] for _, p in broken)
    print(f"files: {len(files)} ({len(unparsable)} do not parse: {', '.join(unparsable) or '-'})")
    print(f"files with findings: {fixed}")
    print("findings per code: " + (", ".join(f"{c} {n}" for c, n in sorted(per_code.items())) or "none"))
    print(f"findings total: {sum(per_code.values())}")
    print(f"files where fixes gave rise to new findings (fixed in a later round): {cascades}")
    print(f"files the fixer refused: {len(refused)} {', '.join(refused)}")
    print(f"internal errors: {len(errors)}")
    print(f"fixed files that no longer compile: {kinds['fixed']}")
    print(f"files where a second fix run changes something: {kinds['not']}")
    print(f"changes outside the fixed findings: {kinds['changed'] + kinds['inserted']}")
    print(f"slowest file: {max(slow)[1]} ({max(slow)[0]:.1f} s)" if slow else "slowest file: -")
    print(f"wall time: {elapsed:.0f} s with {args.workers} workers")
    return 1 if errors or broken else 0


def _not_python(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not os.path.isdir(os.path.join(directory, n))]


if __name__ == "__main__":
    sys.exit(main())
