"""Fixing the whole project from the editor (the `torchdev-lint.fixProject` command).

A document's fix-all changes that document only; a fix in one file can make
another file's fix safe (pinning a loader here makes the copies of its batches
there worth making non-blocking). This command is `torchdev-lint check --fix`
run on the project folder, fixed point included, with the unsaved text of open
documents read instead of the disk. Nothing is written here: the client
applies the edits, each bound to the version of the buffer it was made from.
Notebooks are left to the command line (a client edits them as cells, not as
the JSON text).
"""

from __future__ import annotations

import io
import os
import tokenize
from collections.abc import Mapping
from pathlib import Path

from lsprotocol import types

from torchdev_lint.files import read_source
from torchdev_lint.runner import process_files
from torchdev_lint.server.documents import declared_encoding
from torchdev_lint.server.edits import Positions, minimal_edits
from torchdev_lint.server.project import Projects

FIX_PROJECT = "torchdev-lint.fixProject"


class Buffer:
    """An open document's unsaved text and the version it has."""

    def __init__(self, uri: str, text: str, version: int) -> None:
        self.uri, self.text, self.version = uri, text, version


def project_edit(
    path: str, projects: Projects, buffers: Mapping[str, Buffer], encoding: str, versioned: bool
) -> types.WorkspaceEdit | None:
    """The edits that bring every file of the project of `path` to what `--fix` would write
    (None when nothing changes). `buffers`: open documents by absolute path.

    Raises ConfigError when the project's configuration is invalid."""
    project = projects.for_path(path)
    texts: dict[str, bytes] = {}
    for open_path, buffer in buffers.items():
        try:
            texts[open_path] = buffer.text.encode(declared_encoding(buffer.text))
        except UnicodeError:
            continue  # the fixer could not write it either: left out below
    files, options = projects.fix_options(path, project, texts)
    changes: dict[str, tuple[int | None, list[types.TextEdit]]] = {}  # by URI: the version edited
    for report in process_files([os.path.abspath(f) for f in files], options):
        if report.fixed_source is None or (report.path in buffers and report.path not in texts):
            continue
        opened = buffers.get(report.path)
        before = opened.text if opened is not None else _decoded(read_source(report.path))
        edits = minimal_edits(before, _decoded(report.fixed_source), Positions(before, encoding))
        if opened is not None:
            changes[opened.uri] = (opened.version, edits)
        else:
            changes[Path(report.path).as_uri()] = (None, edits)
    if not changes:
        return None
    if not versioned:
        return types.WorkspaceEdit(changes={uri: edits for uri, (_, edits) in changes.items()})
    documents = [
        types.TextDocumentEdit(types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits)
        for uri, (version, edits) in changes.items()
    ]
    return types.WorkspaceEdit(document_changes=documents)


def _decoded(source: bytes) -> str:
    """A file's text as the fixer read it: by its coding cookie (the fixer accepted the file, so
    the cookie names a known encoding), else UTF-8."""
    return source.decode(tokenize.detect_encoding(io.BytesIO(source).readline)[0])
