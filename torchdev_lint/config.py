"""Settings that change what rules report, and rule selection."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchdev_lint.catalog import RULES
from torchdev_lint.rule import Rule, all_rules

if TYPE_CHECKING:
    from torchdev_lint.catalog import RuleFacts
    from torchdev_lint.grammar import PythonVersion


class ConfigError(Exception):
    """A bad setting or code; the message says which and why."""


@dataclass(frozen=True)
class Settings:
    """Knobs the rules read. Part of the cache key, so keep it hashable."""

    target_torch_version: tuple[int, int] = (2, 6)
    # "portable": code should run without CUDA; "cuda-only": the project never runs without a GPU.
    device_policy: str = "portable"
    # The line length the project's formatter keeps to (`configured_line_length`), or None: the
    # fixer wraps the calls its fixes make longer than it. Read by the fixer, not by the rules.
    line_length: int | None = None

    @classmethod
    def from_mapping(cls, values: dict[str, object]) -> Settings:
        settings = cls()
        version = values.get("target_torch_version")
        if version is not None:
            settings = cls(target_torch_version=parse_version(str(version)))
        policy = values.get("device_policy")
        if policy is not None:
            settings = dataclasses.replace(settings, device_policy=parse_device_policy(policy))
        length = values.get("line_length")
        if isinstance(length, int):
            settings = dataclasses.replace(settings, line_length=length)
        return settings


DEVICE_POLICIES = ("portable", "cuda-only")


def parse_device_policy(value: object) -> str:
    """`device-policy`: one of DEVICE_POLICIES."""
    if value not in DEVICE_POLICIES:
        choices = ", ".join(repr(p) for p in DEVICE_POLICIES)
        hint = did_you_mean(value, DEVICE_POLICIES) if isinstance(value, str) else ""
        raise ConfigError(f"invalid device policy {value!r}: expected one of {choices}{hint}")
    return str(value)


_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?")


def parse_version(text: str) -> tuple[int, int]:
    """`MAJOR.MINOR` (a patch number is allowed and ignored) as a tuple."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"invalid torch version {text!r}: expected MAJOR.MINOR, e.g. 2.6")
    return int(match[1]), int(match[2])


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ` (did you mean X?)` hint for a misspelt key or code, or nothing."""
    import difflib  # only on the way to an error

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
    """Upper-cased selectors; a selector matching no rule is an error.

    The catalog answers without importing the rules; only a selector it does not
    know is looked up in the rules themselves (a rule newer than the catalog).
    """
    result = []
    for raw in selectors:
        selector = raw.strip().upper()
        if not selector:
            continue
        if not any(_matches(info.code, selector) for info in RULES):
            codes = [rule.code for rule in all_rules()]
            if not any(_matches(code, selector) for code in codes):
                hint = did_you_mean(selector, codes)
                raise ConfigError(
                    f"unknown rule selector {raw!r}: expected a rule code or prefix (TDL101, TDL1, ALL){hint}"
                )
        result.append(selector)
    return result


def select_codes(
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    extend_select: Sequence[str] = (),
    rules: Sequence[RuleFacts] | None = None,
) -> list[str]:
    """Codes of the rules to run: like ruff, opt-in rules run only when named or chosen by ALL.

    A prefix such as `TDL2` enables the default rules it covers; an opt-in rule
    needs its full code (or `ALL`), so that `--select TDL2` does not turn on
    noisy rules nobody asked for. `rules` defaults to the catalog, which knows
    the rules without importing them.
    """
    chosen = list(select) if select is not None else ["TDL"]
    chosen += list(extend_select)
    selected = []
    for rule in RULES if rules is None else rules:
        picked = [s for s in chosen if _matches(rule.code, s)]
        if not picked:
            continue
        if not rule.default_enabled and not any(s in ("ALL", rule.code) for s in picked):
            continue
        if any(_matches(rule.code, s) for s in ignore):
            continue
        selected.append(rule.code)
    return selected


def select_rules(
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    extend_select: Sequence[str] = (),
) -> list[type[Rule]]:
    """The rule classes `select_codes` picks, decided on the rules themselves."""
    rules = all_rules()
    codes = set(select_codes(select, ignore, extend_select, rules))
    return [rule for rule in rules if rule.code in codes]


# `[tool.torchdev-lint]` in pyproject.toml ---------------------------------

SECTION = "torchdev-lint"
# The spelling with an underscore is a common slip: warned about, never read, so that one
# spelling is the project's everywhere (as ruff reads only [tool.ruff]).
MISSPELT_SECTION = "torchdev_lint"
LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude")
KEYS = (
    *LIST_KEYS,
    "per-file-ignores",
    "target-torch-version",
    "unsafe-fixes",
    "device-policy",
    "include-notebooks",
)


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
    # Whether folder walks find Jupyter notebooks (`.ipynb`); a notebook named on the command line is checked anyway.
    include_notebooks: bool = True
    # Problems that do not stop the run (a misspelt table), for the CLI to print.
    warnings: tuple[str, ...] = ()


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


def _section(data: dict[str, object], name: str = SECTION) -> dict[str, object] | None:
    tool = data.get("tool")
    if isinstance(tool, dict):
        table = tool.get(name)
        if isinstance(table, dict):
            return table
    return None


def find_config(paths: Sequence[str]) -> str | None:
    """The nearest pyproject.toml with a `[tool.torchdev-lint]` table, walking up from the paths.

    Like ruff, the search starts at the folder holding all checked paths, so
    running from a subfolder or naming files finds the project's settings.
    """
    directory = search_start(paths)
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate):
            try:
                data = _load_toml(candidate)
                found = _section(data) is not None or _section(data, MISSPELT_SECTION) is not None
            except ConfigError:
                found = True  # report the broken file rather than skip it silently
            if found:
                return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def search_start(paths: Sequence[str]) -> str:
    """The folder holding all of `paths` (the current one for none), where searches for settings start."""
    absolute = [os.path.abspath(p) for p in paths] or [os.getcwd()]
    try:
        start = os.path.commonpath(absolute)
    except ValueError:  # paths on different drives
        start = os.getcwd()
    return start if os.path.isdir(start) else os.path.dirname(start)


# Where formatters and linters keep a line length, per tool in the order each tool reads its files
# in one folder: (file, section, key); section "" is the top level of a TOML file.
_LINE_LENGTHS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "ruff": (
        (".ruff.toml", "", "line-length"),
        ("ruff.toml", "", "line-length"),
        ("pyproject.toml", "ruff", "line-length"),
    ),
    "black": (("pyproject.toml", "black", "line-length"),),
    "flake8": (
        ("setup.cfg", "flake8", "max-line-length"),
        ("tox.ini", "flake8", "max-line-length"),
        (".flake8", "flake8", "max-line-length"),
    ),
}


# Every file `configured_line_length` may read, for callers that cache its answer by their stamps.
LINE_LENGTH_FILES = tuple(dict.fromkeys(name for places in _LINE_LENGTHS.values() for name, _, _ in places))


def configured_line_length(start: str) -> int | None:
    """The line length the project keeps to, for fixes to wrap what they make longer: the smallest
    of ruff's `line-length` (`.ruff.toml`, `ruff.toml`, `[tool.ruff]`), black's (`[tool.black]`)
    and flake8's `max-line-length` (`[flake8]` of `setup.cfg`, `tox.ini`, `.flake8`), each read
    from the nearest folder at or above `start` holding that tool's settings, as the tool reads
    them (a ruff configuration without `line-length` means ruff's default, not a parent's). None
    when no tool sets one. Files that cannot be read or parsed are skipped: they are another
    tool's to report."""
    found: list[int] = []
    for places in _LINE_LENGTHS.values():
        directory = os.path.abspath(start)
        while True:
            configured = _tool_setting(directory, places)
            if configured is not None:
                if configured[0] is not None:
                    found.append(configured[0])
                break
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
    return min(found, default=None)


def _tool_setting(directory: str, places: Sequence[tuple[str, str, str]]) -> tuple[int | None] | None:
    """(the line length or None) from the first of a tool's files in `directory` that configures the
    tool; None when none does."""
    for name, section, key in places:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        if name.endswith(".toml"):
            try:
                data: dict[str, object] | None = _load_toml(path)
            except ConfigError:
                continue
            table = data if not section else (_section(data, section) if data is not None else None)
        else:
            table = _ini_section(path, section)
        if table is None:
            continue
        value = table.get(key, table.get(key.replace("-", "_")))
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        return (value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None,)
    return None


def _ini_section(path: str, section: str) -> dict[str, object] | None:
    import configparser

    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    return dict(parser.items(section)) if parser.has_section(section) else None


def load_config(path: str, *, required: bool = False) -> FileConfig:
    """Read and validate the table; unknown keys and codes, and values of the wrong form, are errors."""
    data = _load_toml(path)
    table = _section(data)
    misspelt = _section(data, MISSPELT_SECTION) is not None
    warnings: tuple[str, ...] = ()
    if misspelt:
        warnings = (f"{path}: [tool.{MISSPELT_SECTION}] is ignored: the table is spelt [tool.{SECTION}]",)
    if table is None:
        if required:
            hint = f" ([tool.{MISSPELT_SECTION}] is misspelt)" if misspelt else ""
            raise ConfigError(f"{path}: no [tool.{SECTION}] table{hint}")
        table = {}
    where = f"{path}: [tool.{SECTION}]"
    for key in table:
        if key not in KEYS:
            hint = did_you_mean(key, KEYS) or did_you_mean(key.replace("_", "-"), KEYS)
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")

    def strings(key: str, example: str) -> tuple[str, ...] | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key} = {_toml(value)}: expected a list of strings, e.g. {example}")
        return tuple(value)

    def codes(key: str) -> tuple[str, ...] | None:
        value = strings(key, '["TDL1", "TDL201"]')
        try:
            return None if value is None else tuple(validate_selectors(value))
        except ConfigError as error:
            raise ConfigError(f"{where}: {key}: {error}") from None

    per_file: list[tuple[str, tuple[str, ...]]] = []
    raw_per_file = table.get("per-file-ignores", {})
    if not isinstance(raw_per_file, dict):
        raise ConfigError(
            f"{where}: per-file-ignores = {_toml(raw_per_file)}: expected a table of glob = [codes], "
            'e.g. per-file-ignores = { "tests/*" = ["TDL301"] }'
        )
    for glob, value in raw_per_file.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f"{where}: per-file-ignores {glob!r} = {_toml(value)}: expected a list of codes, e.g. "
                '["TDL301"]'
            )
        try:
            per_file.append((glob, tuple(validate_selectors(value))))
        except ConfigError as error:
            raise ConfigError(f"{where}: per-file-ignores {glob!r}: {error}") from None
    version = table.get("target-torch-version")
    if version is not None and not isinstance(version, str):
        # A TOML number loses what matters: 2.10 reads as 2.1.
        raise ConfigError(
            f'{where}: target-torch-version = {_toml(version)}: expected a quoted "MAJOR.MINOR", e.g. "2.6"'
        )
    try:
        parsed_version = None if version is None else parse_version(version)
    except ConfigError as error:
        raise ConfigError(f"{where}: target-torch-version: {error}") from None
    unsafe = table.get("unsafe-fixes")
    if unsafe is not None and not isinstance(unsafe, bool):
        raise ConfigError(f"{where}: unsafe-fixes = {_toml(unsafe)}: expected true or false")
    notebooks = table.get("include-notebooks", True)
    if not isinstance(notebooks, bool):
        raise ConfigError(f"{where}: include-notebooks = {_toml(notebooks)}: expected true or false")
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
        exclude=strings("exclude", '["build/*", "*_pb2.py"]'),
        extend_exclude=strings("extend-exclude", '["build/*", "*_pb2.py"]') or (),
        per_file_ignores=tuple(per_file),
        target_torch_version=parsed_version,
        unsafe_fixes=unsafe,
        device_policy=parsed_policy,
        include_notebooks=notebooks,
        warnings=warnings,
    )


def oldest_python(config: FileConfig) -> PythonVersion:
    """The lower bound of `[project] requires-python` in the configuration's pyproject.toml.

    Fixed files must parse on it; without one, on the oldest Python the tool supports.
    """
    from torchdev_lint.grammar import OLDEST_PYTHON, requires_python_floor  # imports LibCST

    if config.path is None:
        return OLDEST_PYTHON
    project = _load_toml(config.path).get("project")
    specifier = project.get("requires-python") if isinstance(project, dict) else None
    floor = requires_python_floor(specifier) if isinstance(specifier, str) else None
    return floor or OLDEST_PYTHON


def _toml(value: object) -> str:
    """A value as the file reads, near enough (JSON: strings quoted, true/false, lists)."""
    return json.dumps(value, default=str)


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


def codes_for(
    path: str, codes: Sequence[str], per_file_ignores: Sequence[tuple[str, Sequence[str]]], root: str
) -> list[str]:
    """The selected codes minus those `per-file-ignores` turns off for this file."""
    if not per_file_ignores:
        return list(codes)
    off = ignored_for(path, per_file_ignores, root)
    return [code for code in codes if not any(_matches(code, selector) for selector in off)]
