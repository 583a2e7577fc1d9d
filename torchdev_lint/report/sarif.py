"""SARIF 2.1.0 for GitHub code scanning and other SARIF viewers.

Every selected rule is listed with its short description (the message),
full description and help (its documentation), so `ruleIndex` is stable for
a given selection and `ruleId` is the rule code forever.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from torchdev_lint import __version__
from torchdev_lint.diagnostics import Diagnostic
from torchdev_lint.noqa import UnusedNoqa
from torchdev_lint.rule import Rule, rules_by_code

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _uri(path: str) -> dict[str, str]:
    """A relative URI against the checkout root (what code scanning expects) or a file: URI."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": relative.as_posix(), "uriBaseId": "%SRCROOT%"}


def _rule(rule: type[Rule]) -> dict[str, object]:
    docs = rule.documentation()
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.message},
        "fullDescription": {"text": docs},
        "help": {"text": docs, "markdown": docs},
        "defaultConfiguration": {"level": "error", "enabled": rule.default_enabled},
        "properties": {"tags": ["pytorch", "device"], "fixAvailability": rule.fix_availability},
    }


def _result(diagnostic: Diagnostic, index: int) -> dict[str, object]:
    if diagnostic.cell is not None:
        return _notebook_result(diagnostic, index)
    location = _uri(diagnostic.path)
    result: dict[str, object] = {
        "ruleId": diagnostic.code,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": diagnostic.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": location,
                    "region": {
                        "startLine": diagnostic.line,
                        "startColumn": diagnostic.column,
                        "endLine": diagnostic.end_line,
                        "endColumn": diagnostic.end_column,
                    },
                }
            }
        ],
    }
    if diagnostic.fix is not None and diagnostic.fix.edits:
        result["fixes"] = [
            {
                "description": {"text": f"{diagnostic.fix.message} ({diagnostic.fix.safety} fix)"},
                "artifactChanges": [
                    {
                        "artifactLocation": location,
                        "replacements": [
                            {
                                "deletedRegion": {
                                    "startLine": edit.line,
                                    "startColumn": edit.column,
                                    "endLine": edit.end_line,
                                    "endColumn": edit.end_column,
                                },
                                "insertedContent": {"text": edit.content},
                            }
                            for edit in diagnostic.fix.edits
                        ],
                    }
                ],
            }
        ]
    return result


def _notebook_result(diagnostic: Diagnostic, index: int) -> dict[str, object]:
    """A finding in a notebook: its lines are counted in a cell, not in the file's JSON, so the
    location names the file without a region, and the message and properties give the cell,
    line and column (and no fix is attached: its edits are cell-relative too)."""
    where = f"cell {diagnostic.cell}, line {diagnostic.line}, column {diagnostic.column}"
    return {
        "ruleId": diagnostic.code,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": f"{where}: {diagnostic.message}"},
        "locations": [{"physicalLocation": {"artifactLocation": _uri(diagnostic.path)}}],
        "properties": {
            "cell": diagnostic.cell,
            "line": diagnostic.line,
            "column": diagnostic.column,
            "endLine": diagnostic.end_line,
            "endColumn": diagnostic.end_column,
        },
    }


def sarif(diagnostics: Sequence[Diagnostic], selected: Sequence[str]) -> dict[str, object]:
    """The run as a SARIF log; `selected` are the codes of the rules run (this imports the rules,
    whose documentation the log carries)."""
    # --report-unused-noqa's findings too
    known: dict[str, type[Rule]] = {**rules_by_code(), UnusedNoqa.code: UnusedNoqa}
    codes = [*selected, *sorted({d.code for d in diagnostics} - set(selected))]
    listed = [known[code] for code in codes]
    index = {rule.code: i for i, rule in enumerate(listed)}
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "torchdev-lint",
                        "version": __version__,
                        "rules": [_rule(rule) for rule in listed],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": [_result(d, index[d.code]) for d in diagnostics],
            }
        ],
    }
