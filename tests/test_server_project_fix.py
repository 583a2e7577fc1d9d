"""The language server's `torchdev-lint.fixProject` command: `check --fix` on the project folder,
fixed point across files included, with open documents' unsaved text read instead of the disk."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the [lsp] extra")

from lsprotocol import types as lsp  # noqa: E402
from test_fix_fixed_point import _project, _texts  # noqa: E402
from test_server import TIMEOUT, apply, line_range, offset, run, session  # noqa: E402

from torchdev_lint.cli import main as cli_main  # noqa: E402

UNSAVED = "# an unsaved edit: the command fixes the buffer, not the file on disk\n"


def _applied(text: str, edits: list[lsp.TextEdit]) -> str:
    spans = sorted(
        ((offset(text, e.range.start), offset(text, e.range.end), e.new_text) for e in edits), reverse=True
    )
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def test_fix_project_reaches_the_fixed_point_of_every_file(tmp_path: Path) -> None:
    edited, expected = tmp_path / "edited", tmp_path / "expected"
    _project(edited)
    main_text = UNSAVED + (edited / "main.py").read_text()
    on_disk = _texts(edited)
    shutil.copytree(edited, expected)
    (expected / "main.py").write_text(main_text)
    cli_main(["check", "--fix", "--select", "ALL", "--no-cache", "-q", str(expected)])

    async def test() -> None:
        received: list[lsp.WorkspaceEdit] = []
        async with session() as server:

            @server.client.feature(lsp.WORKSPACE_APPLY_EDIT)
            def apply_edit(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
                received.append(params.edit)
                return lsp.ApplyWorkspaceEditResult(applied=True)

            uri = server.open(edited / "main.py", on_disk["main.py"])
            server.change(uri, 2, main_text)
            await server.diagnostics(uri, 2)
            params = lsp.ExecuteCommandParams("torchdev-lint.fixProject", [uri])
            changed = await asyncio.wait_for(server.client.workspace_execute_command_async(params), TIMEOUT)
        assert changed == 2
        (edit,) = received
        texts = {"main.py": main_text, "engine.py": on_disk["engine.py"]}
        for change in edit.document_changes or []:
            assert isinstance(change, lsp.TextDocumentEdit)
            name = Path(change.text_document.uri).name
            # The open buffer's edits are bound to its version; a file not open has none.
            assert change.text_document.version == (2 if name == "main.py" else None)
            texts[name] = _applied(texts[name], list(change.edits))
        assert _texts(edited) == on_disk, "the server wrote a file itself"
        assert texts == {k: v for k, v in _texts(expected).items() if k in texts}
        assert "non_blocking=True" in texts["engine.py"]  # only safe once main.py's loader is pinned

    run(test())


ONE_FILE = """\
import torch
from torch.utils.data import DataLoader


def train_one_epoch(model, loader):
    for images, targets in loader:
        images, targets = images.cuda(), targets.cuda()
        model(images, targets).backward()


def main(dataset, model):
    train_loader = DataLoader(dataset, batch_size=32, shuffle=True)
    for epoch in range(3):
        train_one_epoch(model, train_loader)
"""


def test_fix_all_follows_the_document_s_own_facts(tmp_path: Path) -> None:
    """Pinning the loader changes what the project tells the file about `train_one_epoch`'s
    loader: `--fix` fixes the file again, and so does the document's fix-all."""
    for folder in ("open", "cli"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "setup.py").write_text("")
        (tmp_path / folder / "train.py").write_text(ONE_FILE)
    cli_main(["check", "--fix", "--select", "ALL", "--no-cache", "-q", str(tmp_path / "cli")])
    expected = (tmp_path / "cli" / "train.py").read_text()
    assert "non_blocking=True" in expected and "pin_memory=" in expected

    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "open" / "train.py", ONE_FILE)
            await server.diagnostics(uri, 1)
            (fix_all,) = await server.actions(uri, line_range(0), only=[lsp.CodeActionKind.SourceFixAll])
            assert fix_all.edit is not None
            assert apply(ONE_FILE, fix_all.edit, uri, 1) == expected

    run(test())
