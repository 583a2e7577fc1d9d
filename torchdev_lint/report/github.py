"""GitHub Actions workflow commands: one `::error` annotation per finding."""

from __future__ import annotations

from torchdev_lint.diagnostics import Diagnostic


def escape_data(value: str) -> str:
    """The message part of a workflow command: `%`, CR and LF are escaped."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """A property value: also `:` and `,`, which separate properties."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def github(diagnostic: Diagnostic) -> str:
    properties = {
        "file": diagnostic.path,
        "line": str(diagnostic.line),
        "col": str(diagnostic.column),
        "endLine": str(diagnostic.end_line),
        "endColumn": str(diagnostic.end_column),
        "title": f"{diagnostic.code} {diagnostic.name}",
    }
    joined = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::error {joined}::{escape_data(f'{diagnostic.code} {diagnostic.message}')}"
