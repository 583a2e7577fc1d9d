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
    """The annotation of one finding. A notebook's finding is annotated on the file, with the cell,
    line and column in the message: its lines are counted in the cell, not in the file's JSON."""
    properties = {"file": diagnostic.path}
    message = f"{diagnostic.code} {diagnostic.message}"
    if diagnostic.cell is None:
        properties.update(
            line=str(diagnostic.line),
            col=str(diagnostic.column),
            endLine=str(diagnostic.end_line),
            endColumn=str(diagnostic.end_column),
        )
    else:
        message = f"cell {diagnostic.cell}, line {diagnostic.line}, column {diagnostic.column}: {message}"
    properties["title"] = f"{diagnostic.code} {diagnostic.name}"
    joined = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
    return f"::error {joined}::{escape_data(message)}"
