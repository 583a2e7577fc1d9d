"""Settings that change what rules report, and rule selection."""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torchdev_lint.rule import Rule, all_rules


class ConfigError(Exception):
    """A bad setting or code; the message says which and why."""


@dataclass(frozen=True)
class Settings:
    """Knobs the rules read. Part of the cache key, so keep it hashable."""

    target_torch_version: tuple[int, int] = (2, 6)
    # "portable": code should run without CUDA; "cuda-only": the project never runs without a GPU.
    device_policy: str = "portable"

    @classmethod
    def from_mapping(cls, values: dict[str, object]) -> Settings:
        settings = cls()
        version = values.get("target_torch_version")
        if version is not None:
            settings = cls(target_torch_version=parse_version(str(version)))
        policy = values.get("device_policy")
        if policy is not None:
            settings = dataclasses.replace(settings, device_policy=parse_device_policy(policy))
        return settings


DEVICE_POLICIES = ("portable", "cuda-only")


def parse_device_policy(value: object) -> str:
    """`device-policy`: one of DEVICE_POLICIES."""
    if value not in DEVICE_POLICIES:
        choices = ", ".join(repr(p) for p in DEVICE_POLICIES)
        hint = did_you_mean(value, DEVICE_POLICIES) if isinstance(value, str) else ""
        raise ConfigError(f"invalid device policy {value!r}: expected one of {choices}{hint}")
    return str(value)


def parse_version(text: str) -> tuple[int, int]:
    parts = text.strip().split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ConfigError(f"invalid torch version {text!r}: expected MAJOR.MINOR, e.g. 2.6") from None
    return major, minor


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ` (did you mean X?)` hint for a misspelt key or code, or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=5, cutoff=0.6)
    if not close:
        return ""
    # difflib ties TDL1O1 between TDL101 and TDL311; a typo usually changes the fewest characters.
    best = min(
        close, key=lambda c: sum(a != b for a, b in zip(word, c, strict=False)) + abs(len(word) - len(c))
    )
    return f" (did you mean {best!r}?)"


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


# `[tool.torchdev-lint]` in pyproject.toml ---------------------------------

SECTION = "torchdev-lint"
LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude")
KEYS = (*LIST_KEYS, "per-file-ignores", "target-torch-version", "unsafe-fixes", "device-policy")


@dataclass(frozen=True)
class FileConfig:
    """The validated `[tool.torchdev-lint]` table and the folder its globs are relative to."""

    path: str | None = None
    root: str = "."
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] | None = None
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    target_torch_version: tuple[int, int] | None = None
    unsafe_fixes: bool | None = None
    device_policy: str | None = None


def _load_toml(path: str) -> dict[str, object]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None


def _section(data: dict[str, object]) -> dict[str, object] | None:
    tool = data.get("tool")
    if isinstance(tool, dict):
        table = tool.get(SECTION)
        if isinstance(table, dict):
            return table
    return None


def find_config(paths: Sequence[str]) -> str | None:
    """The nearest pyproject.toml with a `[tool.torchdev-lint]` table, walking up from the paths.

    Like ruff, the search starts at the folder holding all checked paths, so
    running from a subfolder or naming files finds the project's settings.
    """
    absolute = [os.path.abspath(p) for p in paths] or [os.getcwd()]
    try:
        start = os.path.commonpath(absolute)
    except ValueError:  # paths on different drives
        start = os.getcwd()
    if not os.path.isdir(start):
        start = os.path.dirname(start)
    directory = start
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate):
            try:
                found = _section(_load_toml(candidate)) is not None
            except ConfigError:
                found = True  # report the broken file rather than skip it silently
            if found:
                return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def load_config(path: str, *, required: bool = False) -> FileConfig:
    """Read and validate the table; unknown keys and codes are errors with a did-you-mean."""
    table = _section(_load_toml(path))
    if table is None:
        if required:
            raise ConfigError(f"{path}: no [tool.{SECTION}] table")
        table = {}
    where = f"{path}: [tool.{SECTION}]"
    for key in table:
        if key not in KEYS:
            hint = did_you_mean(key, KEYS) or did_you_mean(key.replace("_", "-"), KEYS)
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")

    def strings(key: str) -> tuple[str, ...] | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key!r} must be a list of strings")
        return tuple(value)

    def codes(key: str) -> tuple[str, ...] | None:
        value = strings(key)
        try:
            return None if value is None else tuple(validate_selectors(value))
        except ConfigError as error:
            raise ConfigError(f"{where}: {key}: {error}") from None

    per_file: list[tuple[str, tuple[str, ...]]] = []
    raw_per_file = table.get("per-file-ignores", {})
    if not isinstance(raw_per_file, dict):
        raise ConfigError(f"{where}: 'per-file-ignores' must be a table of glob = [codes]")
    for glob, value in raw_per_file.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: per-file-ignores {glob!r} must be a list of codes")
        try:
            per_file.append((glob, tuple(validate_selectors(value))))
        except ConfigError as error:
            raise ConfigError(f"{where}: per-file-ignores {glob!r}: {error}") from None
    version = table.get("target-torch-version")
    unsafe = table.get("unsafe-fixes")
    if unsafe is not None and not isinstance(unsafe, bool):
        raise ConfigError(f"{where}: 'unsafe-fixes' must be true or false")
    try:
        parsed_version = None if version is None else parse_version(str(version))
    except ConfigError as error:
        raise ConfigError(f"{where}: target-torch-version: {error}") from None
    policy = table.get("device-policy")
    try:
        parsed_policy = None if policy is None else parse_device_policy(policy)
    except ConfigError as error:
        raise ConfigError(f"{where}: device-policy: {error}") from None
    return FileConfig(
        path=path,
        root=os.path.dirname(os.path.abspath(path)),
        select=codes("select"),
        ignore=codes("ignore") or (),
        extend_select=codes("extend-select") or (),
        exclude=strings("exclude"),
        extend_exclude=strings("extend-exclude") or (),
        per_file_ignores=tuple(per_file),
        target_torch_version=parsed_version,
        unsafe_fixes=unsafe,
        device_policy=parsed_policy,
    )


def relative_posix(path: str, root: str) -> str:
    """`path` relative to `root` with forward slashes (as given when outside it)."""
    absolute, base = os.path.abspath(path), os.path.abspath(root)
    inside = absolute == base or absolute.startswith(base.rstrip(os.sep) + os.sep)
    relative = os.path.relpath(absolute, base) if inside else os.path.normpath(path)
    return relative.replace(os.sep, "/").removeprefix("./")


def glob_matches(path: str, pattern: str, root: str = ".") -> bool:
    """gitignore-like glob test: a pattern without `/` matches any path component or the name."""
    relative = relative_posix(path, root)
    pattern = pattern.replace(os.sep, "/").removeprefix("./").rstrip("/")
    if "/" in pattern:
        return fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(relative, pattern + "/*")
    return any(fnmatch.fnmatch(part, pattern) for part in relative.split("/"))


def ignored_for(path: str, per_file_ignores: Sequence[tuple[str, Sequence[str]]], root: str) -> set[str]:
    """The selectors that `per-file-ignores` turns off for this file."""
    return {code for glob, codes in per_file_ignores if glob_matches(path, glob, root) for code in codes}
