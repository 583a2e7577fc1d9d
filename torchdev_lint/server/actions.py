"""What the client is sent: diagnostics, and code actions built from a document's latest check."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from lsprotocol import types

from torchdev_lint.diagnostics import Diagnostic
from torchdev_lint.noqa import NoqaError, noqa_edits
from torchdev_lint.server.documents import Document, Lint
from torchdev_lint.server.edits import Positions, minimal_edits

SOURCE = "torchdev-lint"
FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.{SOURCE}"
KINDS = (types.CodeActionKind.QuickFix, FIX_ALL)
_DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"


@functools.cache
def docs_uri(code: str) -> str | None:
    """The rule's documentation page, where the installation has it (a source checkout)."""
    page = _DOCS / f"{code}.md"
    return page.as_uri() if page.is_file() else None


def lsp_diagnostic(diagnostic: Diagnostic, positions: Positions) -> types.Diagnostic:
    href = docs_uri(diagnostic.code)
    return types.Diagnostic(
        range=positions.diagnostic_range(diagnostic),
        message=diagnostic.message,
        severity=types.DiagnosticSeverity.Warning,
        code=diagnostic.code,
        code_description=types.CodeDescription(href=href) if href else None,
        source=SOURCE,
    )


def wanted(kind: str, only: Sequence[str] | None) -> bool:
    """Whether the client asked for actions of `kind` (`source` covers `source.fixAll.torchdev-lint`)."""
    return only is None or any(kind == o or kind.startswith(f"{o}.") for o in only)


def quick_fixes(
    document: Document,
    lint: Lint,
    context: types.CodeActionParams,
    positions: Positions,
    versioned: bool,
) -> list[types.CodeAction]:
    """For each finding the request names (in its context, or by a range touching the requested
    one): its fix (if any), then a `# noqa` directive for it."""
    named = {_identity(d) for d in context.context.diagnostics if d.source == SOURCE}
    actions = []
    for index, diagnostic in enumerate(lint.diagnostics):
        shown = lsp_diagnostic(diagnostic, positions)
        if _identity(shown) not in named and not _touches(shown.range, context.range):
            continue
        fix = diagnostic.fix
        edits = lint.fix_edits(index) if fix is not None else ()
        if fix is not None and edits:
            unsafe = fix.safety == "unsafe"
            actions.append(
                types.CodeAction(
                    # An unsafe fix's message ends with `(unsafe: <what may change>)`.
                    title=f"{diagnostic.code}: {fix.message}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[shown],
                    is_preferred=not unsafe,
                    edit=_workspace_edit(
                        document.uri,
                        lint.version,
                        positions.edits_of_fix(edits),
                        versioned,
                    ),
                )
            )
        noqa = _noqa_edit(diagnostic, positions)
        if noqa is not None:
            actions.append(
                types.CodeAction(
                    title=f"Suppress {diagnostic.code} on this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[shown],
                    edit=_workspace_edit(document.uri, lint.version, [noqa], versioned),
                )
            )
    return actions


def fix_all_action(
    document: Document, lint: Lint, fixed: str, positions: Positions, versioned: bool
) -> types.CodeAction:
    """`source.fixAll.torchdev-lint`: the fixer's result as edits of only what it changed."""
    return types.CodeAction(
        title="torchdev-lint: fix all safe fixes",
        kind=FIX_ALL,
        edit=_workspace_edit(
            document.uri, lint.version, minimal_edits(lint.text, fixed, positions), versioned
        ),
    )


def _identity(diagnostic: types.Diagnostic) -> tuple[object, ...]:
    start, end = diagnostic.range.start, diagnostic.range.end
    return (diagnostic.code, start.line, start.character, end.line, end.character)


def _touches(shown: types.Range, within: types.Range) -> bool:
    def key(position: types.Position) -> tuple[int, int]:
        return position.line, position.character

    return key(shown.start) <= key(within.end) and key(within.start) <= key(shown.end)


def _workspace_edit(
    uri: str, version: int, edits: list[types.TextEdit], versioned: bool
) -> types.WorkspaceEdit:
    """Edits of one document; with `versioned` (the client supports it) bound to the version checked."""
    if not versioned:
        return types.WorkspaceEdit(changes={uri: edits})
    document = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(document, edits)])


def _noqa_edit(diagnostic: Diagnostic, positions: Positions) -> types.TextEdit | None:
    """The directive `--add-noqa` would add for this finding alone (or the codes it would merge in)."""
    try:
        edits = noqa_edits(positions.lines.text, [(diagnostic.line, diagnostic.code)])
    except NoqaError:
        return None
    if not edits:
        return None
    (edit,) = edits
    return types.TextEdit(
        types.Range(positions.at(edit.line, edit.start + 1), positions.at(edit.line, edit.end + 1)), edit.text
    )
