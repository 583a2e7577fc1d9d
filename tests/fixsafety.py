"""The safety of each fix a rule offers on a snippet: what the fix-safety tests compare, since
`torchdev-fix` applies the safe ones without a person reading them."""

from __future__ import annotations

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rule import Rule, dedent


def safeties(rule: type[Rule], code: str, path: str = "example.py") -> list[str | None]:
    """`safe`/`unsafe` (None: no fix) of each finding of `rule` in `code` (dedented), checked alone."""
    result = check_source(path, dedent(code).encode(), [rule], Settings())
    return [d.fix.safety if d.fix else None for d in result.diagnostics]
