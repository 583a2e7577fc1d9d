"""Measure precision and recall of the rules on real projects (issue 12, "How to measure").

    # findings of every rule, a seeded sample per code, a label file to fill in
    python scripts/precision_sample.py sample --out docs/precision/before.md \\
        [--reuse docs/precision/before.md] [--findings docs/precision/before-findings.tsv] PROJECT...
    # candidate sites for recall (torch.load, .cuda(, "cuda", DataLoader(, .to( in loops)
    python scripts/precision_sample.py candidates --out docs/precision/recall.md \\
        --findings docs/precision/before-findings.tsv [--findings ...] PROJECT...
    # per-code precision and recall from filled-in label files
    python scripts/precision_sample.py table docs/precision/before.md [--recall docs/precision/recall.md]
    # every finding of a run matched against every label file: counts per code, labelled noise left,
    # the recall files' covered sites the run does not report
    python scripts/precision_sample.py labelled before-findings.tsv [after-findings.tsv ...] \
        [--labels 'docs/precision/**/*.md'] [--noise] [--missed]

A PROJECT is a folder named `<name>-<version>` (its label becomes `name@version`) or
`label=folder`. The checker is whichever `torchdev_lint` the running Python imports: set
PYTHONPATH to a worktree to measure another commit. Each code's findings, over all projects
together, are all read when there are 12 or fewer, otherwise a sample of 12 drawn with a fixed
seed. Labels already given to the same `project path:line code` in a `--reuse` file are kept.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SAMPLE_SIZE = 12
SEED = 12
CELL_SPLIT = re.compile(r"(?<!\\)\|")
# `python -m` puts the working directory first on sys.path: run the checker from a folder
# holding no torchdev_lint, so that PYTHONPATH (or the installed package) decides which one runs.
NEUTRAL_CWD = tempfile.gettempdir()


@dataclass(frozen=True)
class Project:
    label: str
    root: Path


@dataclass(frozen=True)
class Finding:
    project: str
    path: str
    line: int
    end_line: int
    code: str
    message: str

    @property
    def key(self) -> str:
        return f"{self.project} {self.path}:{self.line} {self.code}"


def parse_project(arg: str) -> Project:
    """`label=folder` or a folder named `name-version`."""
    if "=" in arg:
        label, folder = arg.split("=", 1)
        return Project(label, Path(folder).resolve())
    root = Path(arg).resolve()
    name, _, version = root.name.rpartition("-")
    return Project(f"{name}@{version}" if name else root.name, root)


def checker_origin() -> str:
    """Where the checker's torchdev_lint lives, and its git commit when it is a checkout."""
    probe = [sys.executable, "-c", "import torchdev_lint; print(torchdev_lint.__file__)"]
    imported = subprocess.run(probe, capture_output=True, text=True, cwd=NEUTRAL_CWD, check=True).stdout
    folder = Path(imported.strip()).resolve().parent.parent
    commit = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no", "torchdev_lint"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{folder} @ {commit or '?'}{' (uncommitted changes in torchdev_lint/)' if dirty else ''}"


def run_check(project: Project, jobs: int) -> list[Finding]:
    """All findings of every rule on one project, no cache, gitignore and config ignored."""
    command = [sys.executable, "-m", "torchdev_lint", "check", "--select", "ALL", "--no-cache"]
    command += ["--no-respect-gitignore", "--isolated", "--format", "json", "-q", "-j", str(jobs)]
    result = subprocess.run([*command, str(project.root)], capture_output=True, text=True, cwd=NEUTRAL_CWD)
    if result.returncode == 2 and result.stdout.strip():
        # Files the checker could not read (one line each on stderr); the others were checked.
        print(f"{project.label}: {result.stderr.strip()}", file=sys.stderr)
    elif result.returncode not in (0, 1):
        raise SystemExit(f"check failed on {project.root}:\n{result.stderr}")
    return [
        Finding(
            project.label,
            notebook_site(str(Path(item["path"]).resolve().relative_to(project.root)), item.get("cell")),
            item["line"],
            item["end_line"],
            item["code"],
            item["message"],
        )
        for item in json.loads(result.stdout or "[]")
    ]


def notebook_site(path: str, cell_number: int | None) -> str:
    """A notebook finding's path names its cell too (`demo.ipynb:cell 3`), as `check` prints it:
    its line counts within that cell."""
    return path if cell_number is None else f"{path}:cell {cell_number}"


def source_line(root: Path, path: str, line: int) -> str:
    file, _, number = path.partition(":cell ")
    if number:  # a notebook's cell, 1-based among all cells
        cells = json.loads((root / file).read_text(encoding="utf-8")).get("cells", [])
        source = cells[int(number) - 1].get("source", "") if 0 < int(number) <= len(cells) else ""
        lines = ("".join(source) if isinstance(source, list) else source).splitlines()
    else:
        lines = (root / path).read_text(encoding="utf-8", errors="replace").splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if text and "`" not in text else text


def read_table(path: Path) -> list[dict[str, str]]:
    """Rows of the markdown tables in a label file, as dicts keyed by header."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in CELL_SPLIT.split(raw.strip())[1:-1]]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


def reusable_labels(paths: list[Path]) -> dict[str, tuple[str, str]]:
    labels: dict[str, tuple[str, str]] = {}
    for path in paths:
        for row in read_table(path):
            if row.get("label") in ("useful", "noise") and {"project", "site", "code"} <= row.keys():
                key = f"{row['project']} {row['site']} {row['code']}"
                labels[key] = (row["label"], row.get("reason", ""))
    return labels


def write_findings(path: Path, findings: list[Finding]) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write("project\tpath\tline\tend_line\tcode\tmessage\n")
        for f in findings:
            out.write(f"{f.project}\t{f.path}\t{f.line}\t{f.end_line}\t{f.code}\t{f.message}\n")


def read_findings(path: Path) -> list[Finding]:
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    findings = []
    for row in rows:
        project, file, line, end_line, code, message = row.split("\t", 5)
        findings.append(Finding(project, file, int(line), int(end_line), code, message))
    return findings


def preamble(path: str | None) -> list[str]:
    """The labelling criteria to print above the tables, from a file kept next to the labels."""
    return [*Path(path).read_text(encoding="utf-8").rstrip().splitlines(), ""] if path else []


def default_on_codes() -> set[str]:
    from torchdev_lint.rule import all_rules

    return {rule.code for rule in all_rules() if rule.default_enabled}


def command_sample(args: argparse.Namespace) -> None:
    projects = [parse_project(p) for p in args.projects]
    findings: list[Finding] = []
    for project in projects:
        found = run_check(project, args.jobs)
        print(f"{project.label}: {len(found)} findings", file=sys.stderr)
        findings += found
    findings.sort(key=lambda f: (f.code, f.project, f.path, f.line))
    if args.findings:
        write_findings(Path(args.findings), findings)
    roots = {p.label: p.root for p in projects}
    labels = reusable_labels([Path(p) for p in args.reuse])
    by_code: dict[str, list[Finding]] = collections.defaultdict(list)
    for f in findings:
        by_code[f.code].append(f)
    default_on = default_on_codes()
    out = [
        "# Precision sample",
        "",
        *preamble(args.preamble),
        f"Checker: `{checker_origin()}`  ",
        f"Projects: {', '.join(p.label for p in projects)}  ",
        f"Sample: every finding of a code with {SAMPLE_SIZE} or fewer, otherwise {SAMPLE_SIZE} drawn with "
        f"`random.Random('{SEED}:<code>')` from the code's findings over all projects (sorted by project, path, line).",
        "",
        "| code | default | findings | sampled |",
        "|---|---|---|---|",
    ]
    samples: dict[str, list[Finding]] = {}
    for code in sorted(by_code):
        group = by_code[code]
        picked = (
            group if len(group) <= SAMPLE_SIZE else random.Random(f"{SEED}:{code}").sample(group, SAMPLE_SIZE)
        )
        samples[code] = sorted(picked, key=lambda f: (f.project, f.path, f.line))
        default = "on" if code in default_on else "opt-in"
        out.append(f"| {code} | {default} | {len(group)} | {len(picked)} |")
    for code, picked in samples.items():
        out += [
            "",
            f"## {code}",
            "",
            "| project | site | code | source | label | reason |",
            "|---|---|---|---|---|---|",
        ]
        for f in picked:
            label, reason = labels.get(f.key, ("", ""))
            text = source_line(roots[f.project], f.path, f.line)
            out.append(f"| {f.project} | {f.path}:{f.line} | {code} | {cell(text)} | {label} | {reason} |")
    Path(args.out).write_text("\n".join(out) + "\n", encoding="utf-8")


CANDIDATE_PATTERNS = {
    "torch.load(": re.compile(r"\btorch\.load\("),
    ".cuda(": re.compile(r"\.cuda\("),
    '"cuda"': re.compile(r"""["']cuda(:\d+)?["']"""),
    "DataLoader(": re.compile(r"\bDataLoader\("),
}


def moves_in_loops(tree: ast.AST) -> set[int]:
    """Lines of `.to(`/`.cuda(` calls inside a for/while body of the same function."""
    lines: set[int] = set()

    def visit(node: ast.AST, in_loop: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child, False)
                continue
            loop_body = in_loop or isinstance(node, (ast.For, ast.While)) and child in node.body
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in ("to", "cuda")
                and loop_body
            ):
                lines.add(child.lineno)
            visit(child, loop_body)

    visit(tree, False)
    return lines


@dataclass(frozen=True)
class Candidate:
    project: str
    path: str
    line: int
    pattern: str


def docstring_lines(tree: ast.AST) -> set[int]:
    """Lines of string statements (docstrings, doctest examples): text, not code."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def candidate_sites(project: Project) -> list[Candidate]:
    found: list[Candidate] = []
    for file in sorted(project.root.rglob("*.py")):
        text = file.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        relative = str(file.relative_to(project.root))
        text_only = docstring_lines(tree)
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            for name, pattern in CANDIDATE_PATTERNS.items():
                if number not in text_only and pattern.search(code):
                    found.append(Candidate(project.label, relative, number, name))
        found += [Candidate(project.label, relative, n, "move in loop") for n in sorted(moves_in_loops(tree))]
    return found


def command_candidates(args: argparse.Namespace) -> None:
    projects = [parse_project(p) for p in args.projects]
    roots = {p.label: p.root for p in projects}
    by_pattern: dict[str, list[Candidate]] = collections.defaultdict(list)
    for project in projects:
        for c in candidate_sites(project):
            by_pattern[c.pattern].append(c)
    findings_sets = [(Path(p).stem, read_findings(Path(p))) for p in args.findings]
    labels = {}
    for path in args.reuse:
        for row in read_table(Path(path)):
            if "covered" in row:
                labels[f"{row['project']} {row['site']}"] = (row["covered"], row.get("reason", ""))
    out = [
        "# Recall sample: candidate sites",
        "",
        *preamble(args.preamble),
        f"Per pattern, {args.per_pattern} sites drawn with `random.Random('{SEED}:<pattern>')` from all "
        "matching lines of the projects (comments and docstrings excluded). `covered`: the rule code whose pattern (per "
        "RULES.md) the site really is, or `-`. The finding columns list the codes reported on a statement "
        "spanning that line.",
        "",
        "| pattern | sites |",
        "|---|---|",
    ]
    out += [f"| {name} | {len(sites)} |" for name, sites in by_pattern.items()]
    header = [
        "project",
        "site",
        "pattern",
        "source",
        *(name for name, _ in findings_sets),
        "covered",
        "reason",
    ]
    out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in by_pattern:
        sites = by_pattern[name]
        picked = random.Random(f"{SEED}:{name}").sample(sites, min(args.per_pattern, len(sites)))
        for c in sorted(picked, key=lambda c: (c.project, c.path, c.line)):
            reported = [
                ",".join(
                    sorted(
                        {
                            f.code
                            for f in fs
                            if f.project == c.project and f.path == c.path and f.line <= c.line <= f.end_line
                        }
                    )
                )
                or "-"
                for _, fs in findings_sets
            ]
            covered, reason = labels.get(f"{c.project} {c.path}:{c.line}", ("", ""))
            text = cell(source_line(roots[c.project], c.path, c.line))
            out.append(
                f"| {c.project} | {c.path}:{c.line} | {name} | {text} | {' | '.join(reported)} | {covered} | {reason} |"
            )
    Path(args.out).write_text("\n".join(out) + "\n", encoding="utf-8")


def command_table(args: argparse.Namespace) -> None:
    default_on = default_on_codes()
    for path in args.labels:
        rows = read_table(Path(path))
        counts = {r["code"]: int(r["findings"]) for r in rows if "findings" in r}
        tally: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for r in rows:
            if "label" in r:
                tally[r["code"]][r["label"] or "unlabelled"] += 1
        print(
            f"\n{path}\n\n| code | default | findings | read | useful | noise | precision |\n|---|---|---|---|---|---|---|"
        )
        groups: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for code in sorted(counts):
            t = tally[code]
            read = t["useful"] + t["noise"]
            precision = f"{t['useful'] / read:.2f}" if read else "-"
            default = "on" if code in default_on else "opt-in"
            print(
                f"| {code} | {default} | {counts[code]} | {read} | {t['useful']} | {t['noise']} | {precision} |"
            )
            # overall precision weights each code's sample precision by its number of findings
            if read:
                groups[default]["findings"] += counts[code]
                groups[default]["useful_weighted"] += counts[code] * t["useful"] / read
                groups[default]["useful"] += t["useful"]
                groups[default]["read"] += read
        for default, g in groups.items():
            weighted = g["useful_weighted"] / g["findings"]
            plain = g["useful"] / g["read"]
            print(
                f"| {default} overall | | {g['findings']} | {g['read']} | {g['useful']} | "
                f"{g['read'] - g['useful']} | {plain:.2f} (weighted by findings: {weighted:.2f}) |"
            )
    for path in args.recall:
        rows = [r for r in read_table(Path(path)) if "covered" in r]
        columns = [
            k for k in rows[0] if k not in ("project", "site", "pattern", "source", "covered", "reason")
        ]
        covered = [r for r in rows if r["covered"] not in ("", "-")]
        print(f"\n{path}: {len(rows)} sites, {len(covered)} covered by the spec")
        for column in columns:
            hits = sum(1 for r in covered if r["covered"] in r[column].split(","))
            print(f"  {column}: {hits}/{len(covered)} reported = {hits / max(len(covered), 1):.2f}")


def command_labelled(args: argparse.Namespace) -> None:
    """Each findings TSV (a whole run, `sample --findings`) against the labels of every label file
    (read in sorted path order; a site labelled twice keeps the label read last): useful, noise and
    unlabelled per code and in all, and with `--noise` the findings labelled noise."""
    files = sorted(Path().glob(args.labels))
    labels = reusable_labels(files)
    print(f"{len(labels)} labelled sites in {len(files)} files matching {args.labels}")
    for path in args.findings:
        tally: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        noise = []
        for finding in read_findings(Path(path)):
            label, reason = labels.get(finding.key, ("unlabelled", ""))
            tally[finding.code][label] += 1
            if label == "noise":
                noise.append(f"  {finding.key}: {reason}")
        total = sum(tally.values(), collections.Counter())
        print(
            f"\n{path}: {total.total()} findings\n\n| code | useful | noise | unlabelled |\n|---|---|---|---|"
        )
        for code, t in [*sorted(tally.items()), ("all", total)]:
            print(f"| {code} | {t['useful']} | {t['noise']} | {t['unlabelled']} |")
        if args.noise:
            print("\nlabelled noise:", *noise, sep="\n")
        if args.missed:
            print_missed(files, read_findings(Path(path)))


def print_missed(files: list[Path], findings: list[Finding]) -> None:
    """The recall files' covered sites (`covered` a code) in the findings' projects, each once: how
    many a finding of a covered code spans, and the others."""
    projects = {finding.project for finding in findings}
    sites = {
        (row["project"], row["site"]): row
        for path in files
        for row in read_table(path)
        if row.get("covered", "-") not in ("", "-") and row.get("project") in projects and "site" in row
    }
    spans = collections.defaultdict(list)
    for finding in findings:
        spans[(finding.project, finding.path)].append(finding)
    missed = []
    for (project, site), row in sorted(sites.items()):
        file, _, line = site.rpartition(":")
        codes = set(re.split(r"[ ,]+", row["covered"]))
        if not any(f.code in codes and f.line <= int(line) <= f.end_line for f in spans[(project, file)]):
            missed.append(f"  {project} {site} {row['covered']}: {row.get('reason', '')}")
    print(f"\ncovered sites of the recall files: {len(sites) - len(missed)}/{len(sites)} reported; missed:")
    print(*missed, sep="\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sample = sub.add_parser("sample")
    sample.add_argument("projects", nargs="+")
    sample.add_argument("--out", required=True)
    sample.add_argument("--findings", help="also write every finding here (TSV)")
    sample.add_argument("--reuse", action="append", default=[], help="label file whose labels to keep")
    sample.add_argument("-j", "--jobs", type=int, default=2)
    sample.add_argument("--preamble", help="markdown (labelling criteria) to put above the tables")
    candidates = sub.add_parser("candidates")
    candidates.add_argument("projects", nargs="+")
    candidates.add_argument("--out", required=True)
    candidates.add_argument("--findings", action="append", default=[], help="findings TSV, one column each")
    candidates.add_argument("--reuse", action="append", default=[], help="recall file whose labels to keep")
    candidates.add_argument("--per-pattern", type=int, default=12)
    candidates.add_argument("--preamble", help="markdown (labelling criteria) to put above the tables")
    table = sub.add_parser("table")
    table.add_argument("labels", nargs="*")
    table.add_argument("--recall", action="append", default=[])
    labelled = sub.add_parser("labelled")
    labelled.add_argument("findings", nargs="+")
    labelled.add_argument("--labels", default="docs/precision/**/*.md", help="glob of label files")
    labelled.add_argument("--noise", action="store_true", help="list the findings labelled noise")
    labelled.add_argument(
        "--missed", action="store_true", help="list the recall files' covered sites not reported"
    )
    args = parser.parse_args()
    commands = {
        "sample": command_sample,
        "candidates": command_candidates,
        "table": command_table,
        "labelled": command_labelled,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main()
