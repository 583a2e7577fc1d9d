"""Fix whole projects with the real command line and count what the fixes break (issue 24).

    PYTHONPATH=CHECKOUT python scripts/fix_project.py --out hunks.md \\
        [--sample-out sample.md --sample 40 --seed 24:hunks] [--keep DIR] PROJECT [PROJECT ...]

A PROJECT is a folder named `<name>-<version>` or `label=folder` (as in precision_sample.py).
Each one is copied to a temporary folder and fixed there the way the pre-commit hook fixes it:

    python -m torchdev_lint check --fix --select ALL --no-cache --isolated --no-respect-gitignore -q COPY

(safe fixes only, project facts on), run from a neutral working directory so that PYTHONPATH (or
the installed package) decides which torchdev_lint runs. Then, per project:

  files, hunks   files the fix changed and its hunks (unified diff, two lines of context)
  pass 2         files and hunks that a second, identical run changes (0: the first run reached
                 the fixed point)
  F401           unused imports that ruff (`--select F401 --isolated`) finds in the fixed copy and
                 not in the original, matched by file and imported name (not line)
  trailing       lines ending in spaces or tabs in the fixed copy and not in the original (per file,
                 as multisets of lines)
  no compile     Python files that `compile()` accepted before the fix and refuses after it
  other          files that are neither .py, .pyi nor .ipynb and changed (0 expected)

A table per project and the totals go to stdout and to the top of `--out`, followed by every
non-zero case and every hunk, tagged with the codes of the safe-fix findings it overlaps (from a
`--format json` check of the original; `?` when none does, e.g. a follow-up fix) and the
enclosing function. `--sample-out` writes a seeded sample of the hunks, each with the enclosing
function's source, for labelling. Nothing is written into the projects.
"""

from __future__ import annotations

import argparse
import ast
import collections
import difflib
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from precision_sample import NEUTRAL_CWD, Project, checker_origin, parse_project

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")
FIX_COMMAND = [
    "check",
    "--fix",
    "--select",
    "ALL",
    "--no-cache",
    "--isolated",
    "--no-respect-gitignore",
    "-q",
]
UNUSED_NAME = re.compile(r"`([^`]+)` imported but unused")
TRAILING = re.compile(r"[ \t]$")
CONTEXT = 2
FUNCTION_CAP = 160  # lines of an enclosing function shown in the sample


@dataclass
class Hunk:
    project: str
    path: str
    old_start: int  # 1-based first line of the hunk in the file before
    text: str
    codes: str = "?"
    enclosing: str = ""


@dataclass
class Result:
    project: Project
    files: int = 0
    changed: list[str] = field(default_factory=list)
    hunks: list[Hunk] = field(default_factory=list)
    second: list[Hunk] = field(default_factory=list)
    second_files: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    trailing: list[str] = field(default_factory=list)
    uncompilable: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


# ---------------------------------------------------------------- running the tools


def run_cli(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "torchdev_lint", *arguments]
    return subprocess.run(command, capture_output=True, text=True, cwd=NEUTRAL_CWD)


def fix_pass(copy: Path, result: Result, label: str) -> None:
    """One `check --fix` run; a crash or a file it could not handle is recorded as an error."""
    done = run_cli([*FIX_COMMAND, str(copy)])
    stderr = done.stderr.strip()
    if done.returncode not in (0, 1) or stderr:
        where = f"{label}: exit {done.returncode}"
        result.errors.append(f"{where}\n{stderr}" if stderr else where)


def safe_fix_lines(copy: Path, result: Result) -> dict[str, list[tuple[int, int, str]]]:
    """Per file, the (first line, last line, code) of every safe fix the checker would apply."""
    done = run_cli(["check", *FIX_COMMAND[2:], "--format", "json", str(copy)])
    found: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
    try:
        items = json.loads(done.stdout or "[]")
    except json.JSONDecodeError:
        items = []
    if done.returncode not in (0, 1) or done.stderr.strip() or not isinstance(items, list):
        result.errors.append(f"json check (for tags): exit {done.returncode}\n{done.stderr.strip()}")
        return found
    for item in items:
        fix = item.get("fix")
        if not fix or fix.get("safety") != "safe" or fix.get("not_applied") or "cell" in item:
            continue
        path = str(Path(item["path"]).resolve().relative_to(copy.resolve()))
        for edit in fix["edits"]:
            found[path].append((edit["line"], edit["end_line"], item["code"]))
    return found


def ruff_unused(copy: Path) -> collections.Counter[tuple[str, str]]:
    """(file, imported name) of every F401 finding ruff reports in a folder."""
    command = ["ruff", "check", "--select", "F401", "--isolated", "--no-cache", "--exit-zero"]
    done = subprocess.run(
        [*command, "--output-format", "json", "."], capture_output=True, text=True, cwd=copy
    )
    found: collections.Counter[tuple[str, str]] = collections.Counter()
    for item in json.loads(done.stdout or "[]"):
        match = UNUSED_NAME.search(item.get("message") or "")
        if item.get("code") == "F401" and match:
            found[(str(Path(item["filename"]).resolve().relative_to(copy.resolve())), match[1])] += 1
    return found


# ---------------------------------------------------------------- comparing copies


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def lines_of(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def diff_hunks(project: str, path: str, before: bytes, after: bytes) -> list[tuple[Hunk, list[range]]]:
    """The hunks between two versions of a file, each with the 1-based old line ranges it changes."""
    old, new = lines_of(before), lines_of(after)
    found = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(CONTEXT):
        first, last = group[0], group[-1]
        header = f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@\n"
        text, changed = [header], []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                text += [" " + line for line in old[i1:i2]]
                continue
            text += ["-" + line for line in old[i1:i2]] + ["+" + line for line in new[j1:j2]]
            changed.append(range(i1 + 1, i2 + 1) if i2 > i1 else range(i1, i1 + 2))
        body = "".join(line if line.endswith("\n") else line + "\n" for line in text)
        found.append((Hunk(project, path, first[1] + 1, body), changed))
    return found


def trailing_lines(data: bytes) -> collections.Counter[str]:
    return collections.Counter(
        line for line in data.decode("utf-8", "replace").splitlines() if TRAILING.search(line)
    )


def compiles(data: bytes, path: str) -> str | None:
    """None when the source compiles, else the error."""
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def enclosing(source: bytes, line: int) -> tuple[str, int, int]:
    """Name and line span of the innermost function or class around a line ('<module>' if none)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return "<unparsed>", line, line
    best: tuple[str, int, int] = ("<module>", line, line)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            end = node.end_lineno or node.lineno
            if start <= line <= end and (best[0] == "<module>" or start >= best[1]):
                kind = "class" if isinstance(node, ast.ClassDef) else "def"
                best = (f"{kind} {node.name}", start, end)
    return best


def tag(hunk: Hunk, changed: list[range], fixes: list[tuple[int, int, str]], source: bytes) -> None:
    codes = sorted(
        {code for first, last, code in fixes for span in changed if first <= span[-1] and last >= span[0]}
    )
    hunk.codes = ",".join(codes) or "?"
    if hunk.path.endswith((".py", ".pyi")):
        first_changed = changed[0][0] if changed else hunk.old_start
        name, start, end = enclosing(source, max(first_changed, 1))
        hunk.enclosing = f"{name} (lines {start}-{end})" if name != "<module>" else "<module>"


# ---------------------------------------------------------------- one project


def measure(project: Project, keep: Path | None) -> Result:
    result = Result(project)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fix-project-") as folder:
        original = Path(folder) / "original" / project.root.name
        copy = Path(folder) / "fixed" / project.root.name
        shutil.copytree(project.root, original, symlinks=True)
        shutil.copytree(project.root, copy, symlinks=True)
        before = snapshot(original)
        result.files = sum(path.endswith(SOURCE_SUFFIXES) for path in before)
        fixes = safe_fix_lines(copy, result)
        fix_pass(copy, result, "pass 1")
        first = snapshot(copy)
        fix_pass(copy, result, "pass 2")
        second = snapshot(copy)
        compare(result, before, first, fixes)
        for path in sorted(set(first) | set(second)):
            if first.get(path) != second.get(path):
                result.second_files.append(path)
                pairs = diff_hunks(project.label, path, first.get(path, b""), second.get(path, b""))
                result.second += [hunk for hunk, _ in pairs]
        unused = ruff_unused(copy) - ruff_unused(original)
        result.unused = [
            f"{path}: `{name}`" + (f" x{count}" if count > 1 else "")
            for (path, name), count in sorted(unused.items())
        ]
        if keep is not None:
            target = keep / project.root.name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(copy, target, symlinks=True)
    result.seconds = time.monotonic() - began
    return result


def compare(result: Result, before: dict[str, bytes], after: dict[str, bytes], fixes: dict) -> None:
    """Fill in files changed, hunks, trailing spaces, compile errors and other files from pass 1."""
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if not path.endswith(SOURCE_SUFFIXES) or old is None or new is None:
            result.other.append(
                f"{path} ({'created' if old is None else 'deleted' if new is None else 'changed'})"
            )
            continue
        result.changed.append(path)
        for hunk, changed in diff_hunks(result.project.label, path, old, new):
            tag(hunk, changed, fixes.get(path, []), old)
            result.hunks.append(hunk)
        added = trailing_lines(new) - trailing_lines(old)
        if added:
            result.trailing.append(f"{path}: {sum(added.values())} line(s), e.g. {next(iter(added))!r}")
        if path.endswith((".py", ".pyi")) and compiles(old, path) is None:
            error = compiles(new, path)
            if error is not None:
                result.uncompilable.append(f"{path}: {error}")


# ---------------------------------------------------------------- reporting


COLUMNS = [
    "project",
    "files",
    "changed",
    "hunks",
    "pass 2 files",
    "pass 2 hunks",
    "new F401",
    "trailing",
    "no compile",
    "other",
    "errors",
    "s",
]


def row(result: Result) -> list[str]:
    return [
        result.project.label,
        str(result.files),
        str(len(result.changed)),
        str(len(result.hunks)),
        str(len(result.second_files)),
        str(len(result.second)),
        str(len(result.unused)),
        str(len(result.trailing)),
        str(len(result.uncompilable)),
        str(len(result.other)),
        str(len(result.errors)),
        f"{result.seconds:.0f}",
    ]


def table(results: list[Result]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---" + "|---:" * (len(COLUMNS) - 1) + "|"]
    rows = [row(result) for result in results]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    totals = [str(sum(int(cells[i]) for cells in rows)) for i in range(1, len(COLUMNS))]
    lines.append("| **total** (" + str(len(rows)) + " projects) | " + " | ".join(totals) + " |")
    return lines


def problems(results: list[Result]) -> list[str]:
    lines = ["## Non-zero cases", ""]
    kinds = [
        ("second pass changed", lambda r: r.second_files),
        ("new unused imports (F401)", lambda r: r.unused),
        ("new trailing whitespace", lambda r: r.trailing),
        ("no longer compiles", lambda r: r.uncompilable),
        ("other files changed", lambda r: r.other),
        ("errors (exit code or stderr)", lambda r: r.errors),
    ]
    for title, get in kinds:
        entries = [(r.project.label, entry) for r in results for entry in get(r)]
        lines += [f"### {title}: {len(entries)}", ""]
        for project, entry in entries:
            first, _, rest = entry.partition("\n")
            lines.append(f"- {project} {first}")
            if rest:
                lines += ["", "```", rest, "```", ""]
        lines.append("")
    second = [hunk for r in results for hunk in r.second]
    if second:
        lines += ["### second-pass hunks", ""]
        for hunk in second:
            lines += [f"- {hunk.project} {hunk.path}", "", "```diff", hunk.text.rstrip("\n"), "```", ""]
    return lines


def hunk_block(title: str, hunk: Hunk) -> list[str]:
    where = f"{hunk.project} {hunk.path}:{hunk.old_start} [{hunk.codes}]"
    where += f" in {hunk.enclosing}" if hunk.enclosing else ""
    return [f"### {title}: {where}", "", "```diff", hunk.text.rstrip("\n"), "```", ""]


def function_source(project: Project, hunk: Hunk) -> list[str]:
    """The enclosing function of a hunk, as it was before the fix, with line numbers."""
    if not hunk.enclosing or hunk.enclosing == "<module>":
        return []
    source = (project.root / hunk.path).read_bytes()
    match = re.search(r"lines (\d+)-(\d+)", hunk.enclosing)
    if not match:
        return []
    start, end = int(match[1]), int(match[2])
    end = min(end, start + FUNCTION_CAP - 1)
    numbered = [f"{n:5d}  {line}" for n, line in enumerate(lines_of(source)[start - 1 : end], start)]
    return ["Enclosing source before the fix:", "", "```python", "".join(numbered).rstrip("\n"), "```", ""]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("projects", nargs="+", type=parse_project)
    parser.add_argument(
        "--out", type=Path, required=True, help="markdown: tables, non-zero cases, every hunk"
    )
    parser.add_argument("--sample-out", type=Path, help="markdown: a seeded sample of hunks to label")
    parser.add_argument("--sample", type=int, default=40)
    parser.add_argument("--seed", default="24:hunks")
    parser.add_argument("--keep", type=Path, help="keep each fixed copy under this folder")
    args = parser.parse_args()
    origin = checker_origin()
    print(f"checker: {origin}", flush=True)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    results = []
    for project in args.projects:
        results.append(measure(project, args.keep))
        print(" | ".join(row(results[-1])), flush=True)
    summary = table(results)
    print("\n".join(summary))
    every = [hunk for result in results for hunk in result.hunks]
    codes = collections.Counter(code for hunk in every for code in hunk.codes.split(","))
    by_code = ", ".join(f"{code} {count}" for code, count in sorted(codes.items()))
    print(f"hunks by code: {by_code}")
    command = "python -m torchdev_lint " + " ".join(FIX_COMMAND) + " COPY"
    lines = [
        "# Project-level safe fixes",
        "",
        f"Checker: {origin}",
        "",
        f"Command per copy: `{command}`, twice.",
        "",
    ]
    lines += summary + ["", f"Hunks by code (a hunk may carry several): {by_code}", ""]
    lines += problems(results) + ["## Every safe hunk", ""]
    for index, hunk in enumerate(every, 1):
        lines += hunk_block(f"hunk {index}", hunk)
    args.out.write_text("\n".join(lines) + "\n")
    if args.sample_out is not None:
        chosen = every if len(every) <= args.sample else random.Random(args.seed).sample(every, args.sample)
        roots = {result.project.label: result.project for result in results}
        out = ["# Sampled safe hunks", "", f"Checker: {origin}", "", f"{len(chosen)} of {len(every)} hunks, "]
        out[-1] += f"`random.Random({args.seed!r}).sample`."
        out.append("")
        for index, hunk in enumerate(chosen, 1):
            out += hunk_block(f"S{index}", hunk) + function_source(roots[hunk.project], hunk)
            out += ["Label: keeps behaviour on CPU, CUDA, MPS, XPU: ", ""]
        args.sample_out.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
