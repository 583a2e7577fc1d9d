"""Command line: `torchdev-lint check|rule|rules` and `torchdev-fix`.

Exit codes follow ruff and flake8: 0 nothing left to report, 1 findings
remain, 2 a usage error or a file that could not be read, parsed or written.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, NoReturn, TextIO

from torchdev_lint import __version__, catalog
from torchdev_lint.cache import FOLDER, ResultCache
from torchdev_lint.config import (
    ConfigError,
    FileConfig,
    Settings,
    codes_for,
    configured_line_length,
    did_you_mean,
    find_config,
    load_config,
    oldest_python,
    parse_version,
    search_start,
    select_codes,
    select_rules,
    validate_selectors,
)
from torchdev_lint.diagnostics import FileReport
from torchdev_lint.files import discover
from torchdev_lint.parallel import collect_less_often
from torchdev_lint.report import FORMATS, plural, render, statistics, summary
from torchdev_lint.report.text import concise as render_concise
from torchdev_lint.report.text import plain_text
from torchdev_lint.rule import all_rules

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.file_facts import ProjectFacts
    from torchdev_lint.runner import CheckOptions

# A run that the cache answers whole imports neither LibCST nor the rules: the runner,
# the engine and the rules are imported only when a file has to be checked or fixed.

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (`torchdev-lint check: error: ...`), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _codes(text: str) -> list[str]:
    return [part for part in text.replace(" ", ",").split(",") if part]


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of processes (1 or more), got {text!r}")
    return value


def _torch_version(text: str) -> tuple[int, int]:
    try:
        return parse_version(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _globs(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def _add_check_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    select = parser.add_argument_group("rule selection (override [tool.torchdev-lint] in pyproject.toml)")
    select.add_argument("--select", type=_codes, help="codes, prefixes (TDL2) or ALL to enable")
    select.add_argument("--extend-select", type=_codes, default=[], help="codes to enable on top")
    select.add_argument("--ignore", type=_codes, default=[], help="codes or prefixes to disable")
    select.add_argument(
        "--target-torch-version",
        type=_torch_version,
        default=None,
        help="oldest torch version the code supports (default: 2.6)",
    )
    files = parser.add_argument_group("files")
    files.add_argument("--exclude", type=_globs, default=None, help="comma-separated globs to skip")
    files.add_argument("--extend-exclude", type=_globs, default=[], help="globs to skip on top of exclude")
    files.add_argument(
        "--no-respect-gitignore",
        dest="respect_gitignore",
        action="store_false",
        help="also check files that .gitignore excludes",
    )
    files.add_argument("--config", metavar="PATH", help="pyproject.toml to read settings from")
    files.add_argument("--isolated", action="store_true", help="ignore all configuration files")
    files.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    files.add_argument(
        "--cache-dir",
        metavar="PATH",
        help=f"result cache folder (default: {FOLDER} in the project root)",
    )
    files.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=None,
        help="processes to check files with (default: the number of cores; 1: no worker processes)",
    )
    fixing = parser.add_argument_group("fixing")
    fixing.add_argument("--fix", action="store_true", help="apply safe fixes")
    fixing.add_argument(
        "--unsafe-fixes", action="store_true", default=None, help="also apply (and show) unsafe fixes"
    )
    fixing.add_argument("--no-unsafe-fixes", dest="unsafe_fixes", action="store_false")
    fixing.add_argument("--diff", action="store_true", help="print the diff --fix would apply; write nothing")
    fixing.add_argument(
        "--add-noqa",
        action="store_true",
        help="add `# noqa: CODE` directives that silence every finding, instead of reporting or fixing",
    )
    output = parser.add_argument_group("output")
    output.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    output.add_argument("--output-file", "-o", metavar="PATH", help="write the report here, not to stdout")
    output.add_argument("--show-fixes", action="store_true", help="show each fix's preview in text output")
    output.add_argument("--statistics", action="store_true", help="print the number of findings per code")
    output.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
    output.add_argument(
        "--report-unused-noqa",
        action="store_true",
        help="also report `# noqa` directives whose TDL codes silence no finding (as code NOQA)",
    )


def build_parser(*, verify_options: bool = True) -> argparse.ArgumentParser:
    """The command line; without `verify_options`, `verify` is listed but takes no options
    (building them costs a tenth of a run that the cache answers)."""
    parser = _Parser(prog="torchdev-lint", description="Find and fix PyTorch device anti-patterns.")
    parser.add_argument("--version", action="version", version=f"torchdev-lint {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_check_options(commands.add_parser("check", help="check files for device anti-patterns"))
    commands.add_parser("rules", help="list all rules")
    rule = commands.add_parser("rule", help="print a rule's documentation")
    rule.add_argument(
        "code", metavar="RULE", help="rule code or name, e.g. TDL101 or load-without-map-location"
    )
    rule.add_argument(
        "--format",
        choices=("text", "markdown"),
        default="text",
        help="text: plain text for the terminal (default); markdown: the page as in docs/rules",
    )
    commands.add_parser("server", help="run the language server (LSP over stdio; needs the [lsp] extra)")
    verify = commands.add_parser("verify", help="run fixtures before and after their fixes and compare")
    if verify_options:
        from torchdev_lint.verify.command import configure_parser

        configure_parser(verify)
    return parser


def _error(message: str) -> None:
    print(f"torchdev-lint: error: {message}", file=sys.stderr)


def _warn(message: str) -> None:
    print(f"torchdev-lint: warning: {message}", file=sys.stderr)


def _file_config(args: argparse.Namespace) -> FileConfig:
    if args.isolated:
        return FileConfig()
    if args.config:
        return load_config(args.config, required=True)
    found = find_config(args.paths)
    return load_config(found) if found else FileConfig()


class _Plan(NamedTuple):
    """What the command line and the file ask for, settled without importing the rules."""

    select: list[str] | None
    ignore: list[str]
    extend_select: list[str]
    codes: tuple[str, ...]  # the selected rules, as the catalog knows them
    settings: Settings
    unsafe_fixes: bool
    fix: bool
    with_edits: bool
    cache: ResultCache | None


def _plan(args: argparse.Namespace, config: FileConfig, fix: bool) -> _Plan:
    """Command-line flags over the file's settings, as in ruff: a CLI --select replaces the file's."""
    if args.select is not None:
        select: list[str] | None = validate_selectors(args.select)
        ignore = validate_selectors(args.ignore)
    else:
        select = list(config.select) if config.select is not None else None
        ignore = [*config.ignore, *validate_selectors(args.ignore)]
    extend = [*config.extend_select, *validate_selectors(args.extend_select)]
    version = args.target_torch_version or config.target_torch_version
    unsafe = args.unsafe_fixes if args.unsafe_fixes is not None else bool(config.unsafe_fixes)
    cache = None
    if not args.no_cache:
        cache = ResultCache.open(args.cache_dir or os.path.join(config.root, FOLDER))
        if cache is None and args.cache_dir:
            _warn(f"cannot create or write the cache folder {args.cache_dir!r}; checking without a cache")
    return _Plan(
        select=select,
        ignore=ignore,
        extend_select=extend,
        codes=tuple(select_codes(select, ignore, extend)),
        settings=Settings(
            target_torch_version=version or Settings.target_torch_version,
            device_policy=config.device_policy or Settings.device_policy,
            line_length=_line_length(args),
        ),
        unsafe_fixes=unsafe,
        fix=fix,
        # Only JSON, SARIF and fix previews show a fix's edits; the rest need to know a fix exists.
        with_edits=args.format in ("json", "sarif") or args.show_fixes,
        cache=cache,
    )


def _line_length(args: argparse.Namespace) -> int | None:
    """The project's line length, looked for as the settings are: from the folder of `--config`,
    else of the checked paths; none with `--isolated`."""
    if args.isolated:
        return None
    start = os.path.dirname(os.path.abspath(args.config)) if args.config else search_start(args.paths)
    return configured_line_length(start)


def _options(
    args: argparse.Namespace, config: FileConfig, plan: _Plan, project: ProjectFacts | None = None
) -> CheckOptions:
    """The runner's options: this imports the rules (and LibCST). `project`: pass 1's facts
    when already computed (None: the runner computes them)."""
    from torchdev_lint.runner import CheckOptions

    return CheckOptions(
        rules=tuple(select_rules(plan.select, plan.ignore, plan.extend_select)),
        settings=plan.settings,
        fix=plan.fix,
        unsafe_fixes=plan.unsafe_fixes,
        diff=args.diff,
        per_file_ignores=config.per_file_ignores,
        root=config.root,
        with_edits=plan.with_edits,
        cache=plan.cache,
        oldest_python=oldest_python(config),
        project=project,
    )


def _cached_facts(paths: Sequence[str], plan: _Plan) -> ProjectFacts | None:
    """Pass 1 from the summaries in the cache alone (no parsing, no LibCST): the facts every
    cache key of the run holds, handed to the runner on a miss so that pass 1 runs once.

    None as soon as a file pass 1 must read has no summary cached for its text: the runner
    then runs pass 1 itself, checking first the files it must parse and summarizing them from
    the same trees. Never a partial answer: a file left unread would read as having no facts,
    which can equal an older state of the project whose results are cached. The answer is kept
    with what the pass read (`analysis/project/facts_memo.py`): a run over unchanged files reads
    their bytes and looks at the paths the pass probed, and runs no pass."""
    if plan.cache is None:
        return None
    from torchdev_lint.analysis.project.facts_memo import NotCached, kept_facts

    try:
        return kept_facts(paths, None, plan.cache.directory)
    except NotCached:
        return None


def _from_cache(
    paths: Sequence[str], plan: _Plan, config: FileConfig, project: ProjectFacts
) -> list[FileReport] | None:
    """Every file's report from the cache, or None as soon as one file is not there."""
    assert plan.cache is not None  # `project` came from it
    reports = []
    for path in paths:
        codes = codes_for(path, plan.codes, config.per_file_ignores, config.root)
        # A key holds the facts the file takes from other files (their digest).
        report = plan.cache.report(path, codes, plan.settings, plan.with_edits, project.digest(path))
        if report is None:
            return None
        reports.append(report)
    return reports


def _use_color(stream: TextIO) -> bool:
    """Colour only on a terminal, never when NO_COLOR is set (https://no-color.org)."""
    return bool(os.environ.get("NO_COLOR", "") == "" and stream.isatty())


def _check_output_file(path: str) -> str | None:
    """Why the report cannot be written to `path`, found before checking anything; or None."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"--output-file {path!r}: folder {folder!r} does not exist"
    if os.path.isdir(path):
        return f"--output-file {path!r}: is a directory"
    return None


def _conflicting(args: argparse.Namespace, fixer: bool) -> str | None:
    """Why the options asked for cannot go together; or None."""
    if not args.add_noqa:
        return None
    if fixer:
        return "torchdev-fix applies fixes; add noqa directives with `torchdev-lint check --add-noqa`"
    for option, given in (
        ("--fix", args.fix),
        ("--diff", args.diff),
        ("--report-unused-noqa", args.report_unused_noqa),
    ):
        if given:
            return f"--add-noqa cannot be combined with {option}"
    return None


def run_check(args: argparse.Namespace, *, fixer_summary: bool = False) -> int:
    conflict = _conflicting(args, fixer_summary)
    if conflict is not None:
        _error(conflict)
        return EXIT_ERROR
    try:
        config = _file_config(args)
        plan = _plan(args, config, fix=args.fix or fixer_summary)
    except ConfigError as error:
        _error(str(error))
        return EXIT_ERROR
    problem = _check_output_file(args.output_file) if args.output_file else None
    if problem is not None:
        _error(problem)
        return EXIT_ERROR
    for warning in config.warnings:
        _warn(warning)
    exclude = args.exclude if args.exclude is not None else list(config.exclude or ())
    exclude = [*exclude, *config.extend_exclude, *args.extend_exclude]
    paths, errors = discover(
        args.paths,
        exclude,
        root=config.root,
        respect_gitignore=args.respect_gitignore,
        include_notebooks=config.include_notebooks,
    )
    if not paths and not errors:
        _warn(f"no Python files found under {', '.join(args.paths)}")
    if args.add_noqa:
        return _add_noqa(paths, errors, args, config, plan)
    project = None if plan.fix or args.diff else _cached_facts(paths, plan)
    reports = _from_cache(paths, plan, config, project) if project is not None else None
    if reports is None:
        from torchdev_lint.parallel import default_jobs
        from torchdev_lint.runner import process_files_with_facts

        options = _options(args, config, plan, project)
        reports, project = process_files_with_facts(paths, options, jobs=args.jobs or default_jobs())
    if args.report_unused_noqa:
        _add_unused_noqa(reports, args, config, plan, project)
    messages = [str(e) for e in errors] + [r.error for r in reports if r.error]
    for message in messages:
        _error(message)
    diagnostics = [d for r in reports for d in r.diagnostics]
    refused = [d for d in diagnostics if d.fix is not None and d.fix.not_applied is not None]
    if args.diff:
        output = "".join(r.diff for r in reports)
        for diagnostic in refused:  # the diff leaves them out: say so
            print(render_concise(diagnostic), file=sys.stderr)
    elif args.statistics and args.format in ("text", "concise"):
        output = statistics(diagnostics, plan.unsafe_fixes)
    else:
        color = args.output_file is None and _use_color(sys.stdout)
        output = render(
            reports,
            args.format,
            selected=plan.codes,
            color=color,
            show_fixes=args.show_fixes,
            unsafe_fixes=plan.unsafe_fixes,
        )
    if args.output_file:
        try:
            with open(args.output_file, "w", encoding="utf-8") as handle:
                handle.write(output)
        except OSError as error:
            _error(f"{args.output_file}: cannot write: {error.strerror or error}")
            return EXIT_ERROR
    else:
        sys.stdout.write(output)
    if fixer_summary:
        print(_fixed_summary(reports, args.diff, in_files=True), file=sys.stderr)
    elif args.format == "text" and not args.quiet and not args.diff and (paths or errors):
        prefix = _fixed_summary(reports, False, in_files=False) + ".\n" if plan.fix else ""
        text = summary(diagnostics, plan.unsafe_fixes)
        if messages:
            failed = f"{len(messages)} path{'' if len(messages) == 1 else 's'} could not be checked."
            text = failed if not diagnostics else f"{text}\n{failed}"
        print(prefix + text, file=sys.stderr)
    if messages:
        return EXIT_ERROR
    if args.diff:
        return EXIT_FINDINGS if any(r.diff for r in reports) else EXIT_CLEAN
    return EXIT_FINDINGS if diagnostics else EXIT_CLEAN


def _add_noqa(
    paths: Sequence[str], errors: Sequence[object], args: argparse.Namespace, config: FileConfig, plan: _Plan
) -> int:
    """`check --add-noqa`: a directive for every finding, then `Added N noqa directives to M files.`"""
    from functools import partial

    from torchdev_lint.files import remove_stale_temp_files
    from torchdev_lint.noqa_files import add_noqa_file
    from torchdev_lint.parallel import default_jobs, map_files
    from torchdev_lint.runner import with_project

    remove_stale_temp_files(paths)  # left by a writer that was killed while writing
    options = with_project(paths, _options(args, config, plan))
    added = map_files(partial(add_noqa_file, options=options), paths, args.jobs or default_jobs())
    messages = [str(e) for e in errors] + [a.error for a in added if a.error]
    for message in messages:
        _error(message)
    if not args.quiet:
        directives = sum(a.directives for a in added)
        files = sum(1 for a in added if a.directives)
        print(f"Added {plural(directives, 'noqa directive')} to {plural(files, 'file')}.", file=sys.stderr)
    return EXIT_ERROR if messages else EXIT_CLEAN


def _add_unused_noqa(
    reports: Sequence[FileReport],
    args: argparse.Namespace,
    config: FileConfig,
    plan: _Plan,
    project: ProjectFacts | None,
) -> None:
    """`--report-unused-noqa`: each report gets its file's unused directives as findings
    (`project`: the run's facts, None after fixing: pass 1 is then run here again)."""
    from functools import partial

    from torchdev_lint.noqa_files import unused_noqa_file
    from torchdev_lint.parallel import default_jobs, map_files
    from torchdev_lint.runner import with_project

    paths = [r.path for r in reports if r.error is None]
    options = with_project(paths, _options(args, config, plan, project))
    found = map_files(partial(unused_noqa_file, options=options), paths, args.jobs or default_jobs())
    by_path = {extra.path: extra for extra in found}
    for report in reports:
        extra = by_path.get(report.path)
        if extra is not None and extra.diagnostics:
            report.diagnostics = [*report.diagnostics, *extra.diagnostics]
            report.source_lines = {**report.source_lines, **extra.source_lines}


def _fixed_summary(reports: Sequence[FileReport], diff: bool, *, in_files: bool) -> str:
    """`Fixed 28 findings (6 of them follow-ups of other fixes) in 9 files; 3 remain`.

    Follow-ups are findings that fixes gave rise to (and the fixer then fixed):
    `check` cannot count them, so they are named apart for the numbers to add up.
    """
    fixed = sum(r.fixed for r in reports)
    follow_ups = sum(r.follow_ups for r in reports)
    text = f"{'Would fix' if diff else 'Fixed'} {plural(fixed, 'finding')}"
    if follow_ups:
        text += f" ({follow_ups} of them follow-up{'' if follow_ups == 1 else 's'} of other fixes)"
    if not in_files:
        return text
    text += f" in {plural(sum(1 for r in reports if r.fixed), 'file')}"
    remaining = [d for r in reports for d in r.diagnostics]
    text += f"; {len(remaining)} remain{'s' if len(remaining) == 1 else ''}"
    refused = sum(1 for d in remaining if d.fix is not None and d.fix.not_applied is not None)
    if refused:
        text += f" ({refused} of them with a fix not applied: see above)"
    return text


def run_rules() -> int:
    for rule in catalog.RULES:
        status = "on" if rule.default_enabled else "opt-in"
        print(f"{rule.code}  {rule.name:<32} {status:<7} fix: {rule.fix_availability}")
    return EXIT_CLEAN


def _rule_page(word: str) -> str | None:
    """The markdown page of the rule with this code or name; None when no rule has it.

    The catalog and the rule's source answer without importing the rules; a rule
    the catalog does not know yet is looked up among the rules themselves.
    """
    info = catalog.find(word)
    page = catalog.page_from_source(info) if info is not None else None
    if page is not None:
        return page
    wanted = word.strip()
    for rule in all_rules():
        if wanted.upper() == rule.code or wanted.lower() == rule.name:
            return rule.documentation()
    return None


def run_rule(word: str, fmt: str = "text") -> int:
    page = _rule_page(word)
    if page is None:
        known = [name for rule in all_rules() for name in (rule.code, rule.name)]
        hint = did_you_mean(word.upper() if word.upper().startswith("TDL") else word.lower(), known)
        _error(f"unknown rule {word!r}{hint}: expected a rule code or name; `torchdev-lint rules` lists them")
        return EXIT_ERROR
    sys.stdout.write(page if fmt == "markdown" else plain_text(page))
    return EXIT_CLEAN


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(verify_options="verify" in argv).parse_args(argv)
    if args.command == "check":
        return run_check(args)
    if args.command == "rules":
        return run_rules()
    if args.command == "server":
        from torchdev_lint.server.main import run as run_server

        return run_server()
    if args.command == "verify":
        from torchdev_lint.verify.command import run

        return run(args)
    return run_rule(args.code, args.format)


def fix_main(argv: Sequence[str] | None = None) -> int:
    """`torchdev-fix PATHS`: `check --fix` with a one-line summary."""
    parser = _Parser(prog="torchdev-fix", description="Apply torchdev-lint fixes.")
    _add_check_options(parser)
    return run_check(parser.parse_args(argv), fixer_summary=True)


def entry() -> None:
    collect_less_often()
    sys.exit(main())


def fix_entry() -> None:
    collect_less_often()
    sys.exit(fix_main())
