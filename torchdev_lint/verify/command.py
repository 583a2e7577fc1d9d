"""`torchdev-lint verify`: options, progress on stderr (a terminal only), report, exit status.

Exit status: 0 every fixture reports its codes and keeps its results after the
fix (or, raising before the fix, runs after it); 1 a declared code is not
reported, results differ, or a run failed or was blocked; 2 a usage error.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchdev_lint.verify.session import Fixer

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add verify's options; must not import torch."""
    parser.add_argument(
        "paths", nargs="*", default=["fixtures"], help="fixture files or folders (default: fixtures)"
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="auto (CUDA when available, else CUDA emulated on CPU), cpu, cuda or cuda:N",
    )
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes")
    parser.add_argument("--rtol", type=_non_negative, default=0.0, help="relative tolerance (default: exact)")
    parser.add_argument("--atol", type=_non_negative, default=0.0, help="absolute tolerance (default: exact)")
    parser.add_argument(
        "--min-time", type=_non_negative, default=0.2, help="seconds of timed runs per version (default: 0.2)"
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before timing (default: 1)")
    parser.add_argument(
        "--n", type=_positive_int, default=None, help="size for every fixture (default: DEFAULT_N)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed set before every call of main (default: 0)")
    parser.add_argument(
        "--timeout", type=_non_negative, default=300.0, help="seconds allowed per run (default: 300)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads per run (default: 1, steady timings on a shared machine; 0: torch's default)",
    )
    parser.add_argument(
        "-k",
        dest="patterns",
        metavar="PATTERN",
        action="append",
        default=[],
        help="run only fixtures whose file name contains PATTERN or matches it as a glob (repeatable)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every figure and the environment as JSON")
    parser.add_argument(
        "--plot", metavar="PATH.png", help="plot speedups and transfer counts (needs matplotlib)"
    )


def run(args: argparse.Namespace, fixer: Fixer | None = None) -> int:
    """Verify the fixtures; `fixer` replaces the project's codemod (tests inject wrong fixes)."""
    if importlib.util.find_spec("torch") is None:
        print(
            "torchdev-lint: error: verify needs torch: pip install 'torchdev-lint[verify]'", file=sys.stderr
        )
        return EXIT_USAGE
    from torchdev_lint.verify.report import table, write_json, write_plot
    from torchdev_lint.verify.session import UsageError, VerifyOptions, project_fixer, verify

    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "torchdev-lint: error: --plot needs matplotlib: pip install 'torchdev-lint[verify]'",
                file=sys.stderr,
            )
            return EXIT_USAGE
    options = VerifyOptions(
        device=args.device,
        unsafe_fixes=args.unsafe_fixes,
        rtol=args.rtol,
        atol=args.atol,
        min_time=args.min_time,
        warmup=max(0, args.warmup),
        seed=args.seed,
        n=args.n,
        timeout=args.timeout or 300.0,
        threads=max(0, args.threads),
        patterns=tuple(args.patterns),
    )
    show_progress = sys.stderr.isatty()

    def progress(message: str) -> None:
        if show_progress:
            print(message, file=sys.stderr, flush=True)

    try:
        environment, results = verify(args.paths, options, fixer or project_fixer, progress)
    except UsageError as error:
        print(f"torchdev-lint: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not results:
        matching = f" matching {' or '.join(args.patterns)}" if args.patterns else ""
        print(
            f"torchdev-lint: error: no fixtures{matching} found in {', '.join(args.paths)}", file=sys.stderr
        )
        return EXIT_USAGE
    sys.stdout.write(table(environment, results))
    if args.json:
        write_json(args.json, environment, results)
    if args.plot:
        write_plot(args.plot, environment, results)
    return EXIT_OK if all(result.ok for result in results) else EXIT_FAILED
