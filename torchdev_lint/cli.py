"""Command line: `torchdev-lint check|rule|rules` and `torchdev-fix`.

Exit codes follow ruff and flake8: 0 nothing left to report, 1 findings
remain, 2 a usage error or a file that could not be read, parsed or written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from torchdev_lint import __version__
from torchdev_lint.config import (
    ConfigError,
    Settings,
    did_you_mean,
    parse_version,
    select_rules,
    validate_selectors,
)
from torchdev_lint.files import discover
from torchdev_lint.report import FORMATS, render, statistics, summary
from torchdev_lint.rule import all_rules, rules_by_code
from torchdev_lint.runner import Options, process_files

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _codes(text: str) -> list[str]:
    return [part for part in text.replace(" ", ",").split(",") if part]


def _add_check_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    parser.add_argument("--select", type=_codes, help="codes, prefixes (TDL2) or ALL to enable")
    parser.add_argument(
        "--extend-select", type=_codes, default=[], help="codes to enable on top of the selection"
    )
    parser.add_argument("--ignore", type=_codes, default=[], help="codes or prefixes to disable")
    parser.add_argument(
        "--exclude",
        type=lambda s: [p for p in s.split(",") if p],
        default=[],
        help="comma-separated globs of paths to skip",
    )
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("--fix", action="store_true", help="apply safe fixes")
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes")
    parser.add_argument("--diff", action="store_true", help="print the diff --fix would apply; write nothing")
    parser.add_argument("--statistics", action="store_true", help="print the number of findings per code")
    parser.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    parser.add_argument(
        "--target-torch-version",
        type=parse_version,
        default=None,
        help="oldest torch version the code supports (default: 2.6)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchdev-lint", description="Find and fix PyTorch device anti-patterns."
    )
    parser.add_argument("--version", action="version", version=f"torchdev-lint {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_check_options(commands.add_parser("check", help="check files for device anti-patterns"))
    commands.add_parser("rules", help="list all rules")
    rule = commands.add_parser("rule", help="print a rule's documentation")
    rule.add_argument("code", help="rule code, e.g. TDL101")
    rule.add_argument(
        "--format", choices=("text", "markdown"), default="text", help="output format (both are markdown)"
    )
    verify = commands.add_parser("verify", help="run fixtures before and after their fixes and compare")
    from torchdev_lint.verify.command import configure_parser

    configure_parser(verify)
    return parser


def _error(message: str) -> None:
    print(f"torchdev-lint: error: {message}", file=sys.stderr)


def run_check(args: argparse.Namespace, *, fixer_summary: bool = False) -> int:
    try:
        rules = select_rules(
            validate_selectors(args.select) if args.select is not None else None,
            validate_selectors(args.ignore),
            validate_selectors(args.extend_select),
        )
    except ConfigError as error:
        _error(str(error))
        return EXIT_ERROR
    settings = Settings()
    if args.target_torch_version is not None:
        settings = Settings(target_torch_version=args.target_torch_version)
    paths, errors = discover(args.paths, args.exclude)
    options = Options(
        rules=tuple(rules),
        settings=settings,
        fix=args.fix or fixer_summary,
        unsafe_fixes=args.unsafe_fixes,
        diff=args.diff,
    )
    reports = process_files(paths, options)
    messages = [str(e) for e in errors] + [r.error for r in reports if r.error]
    for message in messages:
        _error(message)
    diagnostics = [d for r in reports for d in r.diagnostics]
    out = sys.stdout
    if args.diff:
        out.write("".join(r.diff for r in reports))
    else:
        out.write(render(reports, args.format))
    if args.statistics and args.format == "text":
        out.write(statistics(diagnostics))
    fixed = sum(r.fixed for r in reports)
    if fixer_summary:
        files = sum(1 for r in reports if r.fixed)
        print(f"Fixed {fixed} findings in {files} files; {len(diagnostics)} remain", file=sys.stderr)
    elif args.format == "text" and not args.quiet and not args.diff:
        prefix = f"Fixed {fixed} finding{'' if fixed == 1 else 's'}.\n" if options.fix else ""
        print(prefix + summary(diagnostics), file=sys.stderr)
    if messages:
        return EXIT_ERROR
    if args.diff:
        return EXIT_FINDINGS if any(r.diff for r in reports) else EXIT_CLEAN
    return EXIT_FINDINGS if diagnostics else EXIT_CLEAN


def run_rules() -> int:
    for rule in all_rules():
        status = "on" if rule.default_enabled else "opt-in"
        print(f"{rule.code}  {rule.name:<32} {status:<7} fix: {rule.fix_safety or 'none'}")
    return EXIT_CLEAN


def run_rule(code: str) -> int:
    codes = rules_by_code()
    rule = codes.get(code.strip().upper())
    if rule is None:
        _error(f"unknown rule {code!r}{did_you_mean(code.upper(), codes)}; `torchdev-lint rules` lists them")
        return EXIT_ERROR
    sys.stdout.write(rule.documentation())
    return EXIT_CLEAN


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "check":
        return run_check(args)
    if args.command == "rules":
        return run_rules()
    if args.command == "verify":
        from torchdev_lint.verify.command import run

        return run(args)
    return run_rule(args.code)


def fix_main(argv: Sequence[str] | None = None) -> int:
    """`torchdev-fix PATHS`: `check --fix` with a one-line summary."""
    parser = argparse.ArgumentParser(prog="torchdev-fix", description="Apply torchdev-lint fixes.")
    _add_check_options(parser)
    return run_check(parser.parse_args(argv), fixer_summary=True)


def entry() -> None:
    sys.exit(main())


def fix_entry() -> None:
    sys.exit(fix_main())
