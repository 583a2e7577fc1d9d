"""flake8 entry point (prefix TDL): flake8's protocol around the same engine.

flake8 handles selection and `# noqa` itself; opt-in rules are added to its
default ignore list so they stay off unless selected, as with the CLI.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from torchdev_lint import __version__
from torchdev_lint.config import Settings
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source
from torchdev_lint.rule import all_rules


class TorchDevLintPlugin:
    name = "torchdev-lint"
    version = __version__

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        self.filename = filename
        self.lines = lines

    @classmethod
    def add_options(cls, option_manager: Any) -> None:
        option_manager.extend_default_ignore([r.code for r in all_rules() if not r.default_enabled])

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        try:
            result = check_source(self.filename, "".join(self.lines), all_rules(), Settings())
        except SourceError:
            return  # flake8 reports syntax errors itself (E999)
        for diagnostic in result.diagnostics:
            yield (
                diagnostic.line,
                diagnostic.column - 1,
                f"{diagnostic.code} {diagnostic.message}",
                type(self),
            )
