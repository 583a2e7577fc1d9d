"""Settings that change what rules report, and rule selection."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torchdev_lint.rule import Rule, all_rules


class ConfigError(Exception):
    """A bad setting or code; the message says which and why."""


@dataclass(frozen=True)
class Settings:
    """Knobs the rules read. Part of the cache key, so keep it hashable."""

    target_torch_version: tuple[int, int] = (2, 6)

    @classmethod
    def from_mapping(cls, values: dict[str, object]) -> Settings:
        settings = cls()
        version = values.get("target_torch_version")
        if version is not None:
            settings = cls(target_torch_version=parse_version(str(version)))
        return settings


def parse_version(text: str) -> tuple[int, int]:
    parts = text.strip().split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ConfigError(f"invalid torch version {text!r}: expected MAJOR.MINOR, e.g. 2.6") from None
    return major, minor


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ` (did you mean X?)` hint for a misspelt key or code, or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _matches(code: str, selector: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def validate_selectors(selectors: Iterable[str]) -> list[str]:
    """Upper-cased selectors; a selector matching no rule is an error."""
    codes = [rule.code for rule in all_rules()]
    result = []
    for raw in selectors:
        selector = raw.strip().upper()
        if not selector:
            continue
        if not any(_matches(code, selector) for code in codes):
            hint = did_you_mean(selector, codes)
            raise ConfigError(f"unknown rule selector {raw!r}: no rule code starts with it{hint}")
        result.append(selector)
    return result


def select_rules(
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    extend_select: Sequence[str] = (),
) -> list[type[Rule]]:
    """Rules to run: like ruff, opt-in rules run only when named or chosen by ALL.

    A prefix such as `TDL2` enables the default rules it covers; an opt-in rule
    needs its full code (or `ALL`), so that `--select TDL2` does not turn on
    noisy rules nobody asked for.
    """
    chosen = list(select) if select is not None else ["TDL"]
    chosen += list(extend_select)
    selected = []
    for rule in all_rules():
        picked = [s for s in chosen if _matches(rule.code, s)]
        if not picked:
            continue
        if not rule.default_enabled and not any(s in ("ALL", rule.code) for s in picked):
            continue
        if any(_matches(rule.code, s) for s in ignore):
            continue
        selected.append(rule)
    return selected
