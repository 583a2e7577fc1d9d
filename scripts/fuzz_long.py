"""Run the fuzz tests with the long hypothesis profile: fresh randomness, shrinking, many examples.

    .venv/bin/python scripts/fuzz_long.py [SCALE] [pytest args...]

SCALE (default 100) multiplies each test's bounded example count, so 100
runs about 30,000 generated torch programs. Same as
`TDL_FUZZ_PROFILE=long TDL_FUZZ_SCALE=100 pytest tests/test_fuzz.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    scale = argv[0] if argv and argv[0].isdigit() else "100"
    extra = argv[1:] if argv and argv[0].isdigit() else argv
    env = {**os.environ, "TDL_FUZZ_PROFILE": "long", "TDL_FUZZ_SCALE": scale}
    command = [sys.executable, "-m", "pytest", "-q", str(ROOT / "tests" / "test_fuzz.py"), *extra]
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
