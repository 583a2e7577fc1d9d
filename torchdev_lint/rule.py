"""The contract every rule module fulfils, and the registry that finds them.

A rule is one class in one module under `torchdev_lint/rules/`. It carries its
metadata, its documentation and its own examples; its `visit_<Node>` and
`leave_<Node>` methods are called by the engine during the single traversal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, ClassVar

from torchdev_lint.catalog import rule_page
from torchdev_lint.diagnostics import FixAvailability, FixSafety

if TYPE_CHECKING:
    # Only for annotations: importing this module must not import LibCST (see catalog.py).
    import libcst as cst

    from torchdev_lint.analysis.syntax.scopes import Scope
    from torchdev_lint.engine import FileContext

    Replacement = cst.CSTNode | cst.FlattenSentinel | cst.RemovalSentinel

DOC_SECTIONS = ("What it does", "Why it matters", "Example", "Use instead", "Fix safety")


@dataclass(frozen=True)
class Fix:
    """A rewrite proposed by a rule: original nodes mapped to their replacements.

    `message` says what the fix does ("Set `weights_only=True`"). `risk` says, for an unsafe
    fix, what may change in behaviour at this site ("loading fails if the file pickles objects
    other than tensors and containers"), as specifically as the rule knows why it is unsafe
    there: required (not empty) for an unsafe fix, absent for a safe one. Users read both in
    `reported_message`.
    """

    safety: FixSafety
    message: str
    replacements: Mapping[cst.CSTNode, Replacement]
    risk: str | None = None

    def __post_init__(self) -> None:
        if self.safety == "unsafe" and not (self.risk and self.risk.strip()):
            raise ValueError(f"unsafe fix {self.message!r} must say what may change (`risk=`)")
        if self.safety == "safe" and self.risk is not None:
            raise ValueError(f"safe fix {self.message!r} carries a risk: {self.risk!r}")

    @classmethod
    def judged(cls, message: str, replacements: Mapping[cst.CSTNode, Replacement], risk: str | None) -> Fix:
        """A fix that is safe where `risk` is None, and unsafe with that risk otherwise."""
        return cls("safe" if risk is None else "unsafe", message, replacements, risk)

    @property
    def reported_message(self) -> str:
        """What users see: the message, then for an unsafe fix `(unsafe: <risk>)`."""
        return self.message if self.risk is None else f"{self.message} (unsafe: {self.risk})"


@dataclass(frozen=True)
class Invalid:
    """Example code the rule must flag, at `lines` (1-based, after dedent).

    `fixed` is the text after applying the rule's fix (unsafe fixes included);
    None means the finding carries no fix and fixing leaves the code unchanged.
    """

    code: str
    lines: tuple[int, ...]
    fixed: str | None = None
    settings: Mapping[str, object] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return dedent(self.code)

    @property
    def fixed_source(self) -> str | None:
        return None if self.fixed is None else dedent(self.fixed)


@dataclass(frozen=True)
class Valid:
    """Example code the rule must not flag."""

    code: str
    settings: Mapping[str, object] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return dedent(self.code)


@dataclass(frozen=True)
class ProjectExample:
    """A small project whose facts cross files (`check` reads them all): `files` maps each path
    under the project's root to its code, and `findings` lists every `path:line` the rule must
    report there, none for a project it must leave alone."""

    files: Mapping[str, str]
    findings: tuple[str, ...] = ()

    @property
    def sources(self) -> dict[str, str]:
        return {path: dedent(code) for path, code in self.files.items()}


def dedent(code: str) -> str:
    """Examples are written indented inside the rule class; strip that."""
    import textwrap  # here, like the imports below: importing this module stays cheap (catalog.py)

    return textwrap.dedent(code).lstrip("\n")


class Rule:
    """Base of every rule. One instance per rule per file."""

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    default_enabled: ClassVar[bool] = True
    # Whether findings come with a fix; each fix carries its own safety (see `Fix`),
    # and the docs' "Fix safety" section says when it is safe.
    fix_availability: ClassVar[FixAvailability] = "never"
    docs: ClassVar[str]
    # Substrings of which at least one must occur in a file for the rule to
    # possibly fire there (spaced as Python allows: `.to(` covers `x. to (d)`): the engine
    # runs only the rules whose triggers occur, and parses no file where none does.
    triggers: ClassVar[tuple[str, ...]] = ("torch",)
    # Fields of the file's project facts (`analysis.project.project_facts.FileFacts`) that can make the
    # rule fire where none of its triggers occurs (a loader parameter every caller pins): where
    # one of them is not empty, the rule runs whatever the text.
    fact_triggers: ClassVar[tuple[str, ...]] = ()
    invalid: ClassVar[tuple[Invalid, ...]] = ()
    valid: ClassVar[tuple[Valid, ...]] = ()
    projects: ClassVar[tuple[ProjectExample, ...]] = ()  # examples whose facts cross files

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def report(self, node: cst.CSTNode, message: str | None = None, fix: Fix | None = None) -> None:
        self.ctx.report(self, node, message or self.message, fix)

    def leave_scope(self, scope: Scope) -> None:
        """Called when a module, class or function body has been fully traversed."""

    @classmethod
    def documentation(cls) -> str:
        """The rule's page: a title line, then its documentation sections."""
        return rule_page(cls, cls.message, cls.docs)


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class in `torchdev_lint.rules`, sorted by code."""
    import importlib
    import pkgutil

    import torchdev_lint.rules as package

    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found.extend(
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Rule)
            and value is not Rule
            and value.__module__ == module.__name__
        )
    return tuple(sorted(found, key=lambda rule: rule.code))


def rules_by_code() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in all_rules()}
