"""flake8 entry point (prefix TDL): flake8's protocol around the same engine.

flake8 handles the final select/ignore decision itself, and `# noqa` too,
though case-sensitively: the plugin leaves out what `check` suppresses, so
`# noqa: tdl1` silences both. Opt-in
rules are added to its default ignore list so they stay off under the default
selection, and the plugin runs only the rules that `torchdev-lint check`
would run for the same `--select`/`--extend-select`: a prefix such as
`--select TDL` enables the default rules, an opt-in rule needs its full code.
That keeps `flake8 --select TDL` and `torchdev-lint check --select TDL`
reporting the same findings.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from torchdev_lint import __version__
from torchdev_lint.config import ConfigError, Settings, parse_version, select_rules
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import check_source
from torchdev_lint.rule import Rule, all_rules

PREFIX = "TDL"


def _ours(selectors: Sequence[str] | None) -> list[str] | None:
    """The flake8 selectors that can match a TDL code (`T`, `TDL`, `TDL2`, `TDL201`)."""
    if selectors is None:
        return None
    chosen = [s.strip().upper() for s in selectors]
    return [s for s in chosen if s and (PREFIX.startswith(s) or s.startswith(PREFIX))]


class TorchDevLintPlugin:
    name = "torchdev-lint"
    version = __version__

    rules: ClassVar[tuple[type[Rule], ...] | None] = None
    settings: ClassVar[Settings] = Settings()
    # flake8 matches noqa codes case-sensitively; `check` does not. The plugin
    # drops what `check` would suppress, so both report the same lines.
    honour_noqa: ClassVar[bool] = True

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        self.tree = tree
        self.filename = filename
        self.lines = lines

    @classmethod
    def add_options(cls, option_manager: Any) -> None:
        option_manager.add_option(
            "--torchdev-target-torch-version",
            default=None,
            parse_from_config=True,
            help="oldest torch version the checked code supports, e.g. 2.4 (default: 2.6)",
        )
        option_manager.extend_default_ignore([r.code for r in all_rules() if not r.default_enabled])

    @classmethod
    def parse_options(cls, options: argparse.Namespace) -> None:
        version = getattr(options, "torchdev_target_torch_version", None)
        try:
            cls.settings = Settings(target_torch_version=parse_version(version)) if version else Settings()
        except ConfigError as error:
            raise SystemExit(f"flake8: torchdev-target-torch-version: {error}") from None
        select = _ours(getattr(options, "select", None))
        extend = _ours(getattr(options, "extend_select", None)) or []
        cls.rules = tuple(select_rules(select, (), extend))
        cls.honour_noqa = not getattr(options, "disable_noqa", False)

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        rules = self.rules if self.rules is not None else select_rules()
        try:
            # The lines are the pre-check: a file without any selected rule's trigger
            # text gets no LibCST tree. flake8's own `ast` tree is reused, not built again.
            tree = self.tree if isinstance(self.tree, ast.Module) else None
            result = check_source(self.filename, "".join(self.lines), rules, self.settings, python_tree=tree)
        except SourceError:
            return  # flake8 reports syntax errors itself (E999)
        for diagnostic in result.diagnostics:
            if diagnostic.suppressed and self.honour_noqa:
                continue
            yield (
                diagnostic.line,
                diagnostic.column - 1,
                f"{diagnostic.code} {diagnostic.message}",
                type(self),
            )
