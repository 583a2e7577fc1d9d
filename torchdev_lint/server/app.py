"""The language server: keeps the open documents, checks them off the reader, answers code actions.

Messages are read and handled on pygls' event loop; checking and fixing run
on one worker thread, so reading never waits for a check. A change is
checked after a short pause (`DEBOUNCE_S`) in which no newer change came;
each change cancels the document's scheduled check, and a check whose
version a newer change overtook is dropped, never published.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from torchdev_lint import __version__
from torchdev_lint.config import ConfigError
from torchdev_lint.parallel import collect_less_often
from torchdev_lint.server.actions import (
    FIX_ALL,
    KINDS,
    SOURCE,
    fix_all_action,
    lsp_diagnostic,
    quick_fixes,
    wanted,
)
from torchdev_lint.server.documents import Document, Lint, fix_all, lint, path_of
from torchdev_lint.server.edits import Positions
from torchdev_lint.server.project import Projects, inside
from torchdev_lint.server.project_fix import FIX_PROJECT, Buffer, project_edit

DEBOUNCE_S = 0.15
T = TypeVar("T")


class TorchDevLintServer(LanguageServer):
    """pygls' server plus the documents it has open and the thread that checks them."""

    def __init__(self) -> None:
        super().__init__(SOURCE, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self.documents: dict[str, Document] = {}
        self.projects = Projects()
        self.checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchdev-lint-check")
        self.shut_down = False

    @property
    def encoding(self) -> str:
        return str(self.workspace.position_encoding or types.PositionEncodingKind.Utf16)

    @property
    def versioned_edits(self) -> bool:
        workspace = self.client_capabilities.workspace
        edit = workspace.workspace_edit if workspace is not None else None
        return bool(edit is not None and edit.document_changes)

    def schedule(self, document: Document, delay: float) -> None:
        """Check the document's current text after `delay` seconds, replacing any check not yet published."""
        if isinstance(document.pending, asyncio.Task):
            document.pending.cancel()
        document.pending = asyncio.get_running_loop().create_task(self._check(document, delay))

    async def current(self, document: Document) -> Lint | None:
        """The check of the document's current text (made now if it is not there yet); None when a newer
        change overtakes it meanwhile."""
        if document.lint is not None and document.lint.version == document.version:
            return document.lint
        self.schedule(document, 0)
        try:
            await asyncio.shield(document.pending)  # type: ignore[arg-type]
        except asyncio.CancelledError:
            return None
        return (
            document.lint if document.lint is not None and document.lint.version == document.version else None
        )

    async def in_worker(self, function: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.checker, function, *args)

    async def _check(self, document: Document, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        version, text = document.version, document.text
        result = await self.in_worker(self._lint_if_current, document, version, text)
        if result is None or self.documents.get(document.uri) is not document or document.version != version:
            return  # overtaken by a newer change, or closed
        document.lint = result
        if result.error is not None:
            self.window_log_message(
                types.LogMessageParams(types.MessageType.Info, f"{document.uri}: not checked: {result.error}")
            )
        positions = Positions(text, self.encoding)
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=document.uri,
                version=version,
                diagnostics=[lsp_diagnostic(d, positions) for d in result.diagnostics],
            )
        )

    def _lint_if_current(self, document: Document, version: int, text: str) -> Lint | None:
        """On the worker: a check queued behind another one may be stale by the time it starts."""
        if document.version != version:
            return None
        return lint(document, version, text, self.projects)

    def stop_checking(self) -> None:
        for document in self.documents.values():
            if isinstance(document.pending, asyncio.Task):
                document.pending.cancel()
        self.checker.shutdown(wait=False, cancel_futures=True)
        self.projects.close()


def _actions(
    document: Document,
    result: Lint,
    params: types.CodeActionParams,
    server: TorchDevLintServer,
) -> list[types.CodeAction]:
    """On the worker: the actions asked for (a fix's edits and the fix-all cost code generation)."""
    encoding, versioned = server.encoding, server.versioned_edits
    positions = Positions(result.text, encoding)
    only = params.context.only
    actions: list[types.CodeAction] = []
    if wanted(types.CodeActionKind.QuickFix, only):
        actions += quick_fixes(document, result, params, positions, versioned)
    if wanted(FIX_ALL, only) and any(
        d.fix is not None and d.fix.safety == "safe" for d in result.diagnostics
    ):
        fixed = fix_all(document, result, server.projects)
        if fixed is not None:
            actions.append(fix_all_action(document, result, fixed, positions, versioned))
    return actions


def build() -> TorchDevLintServer:
    server = TorchDevLintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TorchDevLintServer, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        document = Document(item.uri, path_of(item.uri), item.text, item.version)
        ls.documents[item.uri] = document
        ls.schedule(document, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TorchDevLintServer, params: types.DidChangeTextDocumentParams) -> None:
        document = ls.documents.get(params.text_document.uri)
        if document is None:
            return
        for change in params.content_changes:  # full sync: each change is the whole text
            document.text = change.text
        document.version = params.text_document.version
        ls.schedule(document, DEBOUNCE_S)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TorchDevLintServer, params: types.DidSaveTextDocumentParams) -> None:
        path = path_of(params.text_document.uri)
        # What the other files of its project take from it may have changed: check them again too.
        projects = ls.projects.saved(path) if path is not None else []
        for document in ls.documents.values():
            if document.uri == params.text_document.uri or any(
                document.path is not None and inside(document.path, folder) for folder in projects
            ):
                ls.schedule(document, 0)  # the project's settings may have changed on disk too

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TorchDevLintServer, params: types.DidCloseTextDocumentParams) -> None:
        document = ls.documents.pop(params.text_document.uri, None)
        if document is not None and isinstance(document.pending, asyncio.Task):
            document.pending.cancel()
        ls.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=list(KINDS)))
    async def code_action(ls: TorchDevLintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        document = ls.documents.get(params.text_document.uri)
        if document is None:
            return []
        result = await ls.current(document)
        if result is None or result.error is not None:
            return []
        return await ls.in_worker(_actions, document, result, params, ls)

    @server.command(FIX_PROJECT)
    async def fix_project(ls: TorchDevLintServer, uri: str) -> int:
        """Fix every file of the project of the document at `uri` as `check --fix` would; the number
        of files the client was asked to change."""
        path = path_of(uri)
        if path is None:
            return 0
        buffers = {
            os.path.abspath(d.path): Buffer(d.uri, d.text, d.version)
            for d in ls.documents.values()
            if d.path is not None
        }
        try:
            edit = await ls.in_worker(
                project_edit, os.path.abspath(path), ls.projects, buffers, ls.encoding, ls.versioned_edits
            )
        except ConfigError as error:
            ls.window_show_message(types.ShowMessageParams(types.MessageType.Error, str(error)))
            return 0
        if edit is None:
            return 0
        label = "torchdev-lint: fix the project"
        await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit, label=label))
        return len(edit.document_changes or ()) or len(edit.changes or {})

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: TorchDevLintServer, *args: object) -> None:
        ls.shut_down = True
        ls.stop_checking()

    return server


def serve() -> int:
    """Serve stdin/stdout until `exit` or until stdin closes; 0 after a `shutdown` request, else 1 (LSP)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="torchdev-lint server: %(message)s")
    server = build()
    collect_less_often()  # the open documents' trees are long-lived too
    server.start_io()
    server.stop_checking()
    code = 0 if server.shut_down else 1
    sys.stderr.flush()
    # pygls' reader thread may still wait on stdin after `exit`: end without joining it.
    os._exit(code)
