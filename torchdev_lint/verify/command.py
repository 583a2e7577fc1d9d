"""`torchdev-lint verify`: argument parsing and entry point (implementation in progress)."""

from __future__ import annotations

import argparse
import sys


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add verify's options; must not import torch."""
    parser.add_argument("paths", nargs="*", default=["fixtures"], help="fixture files or folders")


def run(args: argparse.Namespace) -> int:
    print("torchdev-lint: error: verify is not implemented yet", file=sys.stderr)
    return 2
