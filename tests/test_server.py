"""The language server, driven by pygls' own LSP client over a real stdio subprocess.

Every wait is for a message (with a generous timeout), never for time to
pass, so the tests say nothing about speed: `benchmarks/lsp_latency.py` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the [lsp] extra")

from lsprotocol import types as lsp  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from torchdev_lint.cli import main as cli_main  # noqa: E402

SERVER = (sys.executable, "-m", "torchdev_lint", "server")
TIMEOUT = 90  # seconds for any one message: a loaded CI machine is slow, a hung server is not


class Session:
    """A client connected to a server process, collecting what the server publishes."""

    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.published: dict[str, list[lsp.PublishDiagnosticsParams]] = {}
        self.arrived = asyncio.Event()

    @property
    def process(self) -> asyncio.subprocess.Process:
        assert self.client._server is not None
        return self.client._server

    def receive(self, params: lsp.PublishDiagnosticsParams) -> None:
        self.published.setdefault(params.uri, []).append(params)
        self.arrived.set()

    async def diagnostics(self, uri: str, version: int | None = None) -> list[lsp.Diagnostic]:
        """The diagnostics published for `uri` at `version` (the first publish for it if None)."""
        while True:
            for params in self.published.get(uri, []):
                if version is None or params.version == version:
                    return list(params.diagnostics)
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), TIMEOUT)

    async def publish(self, uri: str, number: int) -> lsp.PublishDiagnosticsParams:
        """The `number`th publish for `uri` (1-based)."""
        while len(self.published.get(uri, [])) < number:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), TIMEOUT)
        return self.published[uri][number - 1]

    def open(self, path: Path, text: str, version: int = 1) -> str:
        uri = path.as_uri()
        self.client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, "python", version, text))
        )
        return uri

    def change(self, uri: str, version: int, text: str) -> None:
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                [lsp.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    async def actions(
        self,
        uri: str,
        at: lsp.Range,
        only: Sequence[str] | None = None,
        diagnostics: Sequence[lsp.Diagnostic] = (),
    ) -> list[lsp.CodeAction]:
        params = lsp.CodeActionParams(
            lsp.TextDocumentIdentifier(uri), at, lsp.CodeActionContext(list(diagnostics), only=only)
        )
        result = await asyncio.wait_for(self.client.text_document_code_action_async(params), TIMEOUT)
        return [a for a in result or [] if isinstance(a, lsp.CodeAction)]


@contextlib.asynccontextmanager
async def session(encodings: Sequence[str] | None = None) -> AsyncIterator[Session]:
    client = LanguageClient("torchdev-lint-tests", "1")
    connected = Session(client)

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def receive(params: lsp.PublishDiagnosticsParams) -> None:
        connected.receive(params)

    await client.start_io(*SERVER)
    capabilities = lsp.ClientCapabilities(
        workspace=lsp.WorkspaceClientCapabilities(
            workspace_edit=lsp.WorkspaceEditClientCapabilities(document_changes=True)
        ),
        general=lsp.GeneralClientCapabilities(position_encodings=list(encodings)) if encodings else None,
    )
    await asyncio.wait_for(
        client.initialize_async(lsp.InitializeParams(capabilities=capabilities, process_id=os.getpid())),
        TIMEOUT,
    )
    client.initialized(lsp.InitializedParams())
    try:
        yield connected
    finally:
        if connected.process.returncode is None:
            await asyncio.wait_for(client.shutdown_async(None), TIMEOUT)
            client.exit(None)
            await asyncio.wait_for(connected.process.wait(), TIMEOUT)
        await client.stop()


def run(test: object) -> None:
    asyncio.run(asyncio.wait_for(test, 10 * TIMEOUT))  # type: ignore[arg-type]


# Applying edits as a client does -------------------------------------------------

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def offset(text: str, position: lsp.Position) -> int:
    """The string offset of a UTF-16 position (LSP's default encoding)."""
    lines = _LINE.findall(text)
    start = sum(len(line) for line in lines[: position.line])
    line = lines[position.line] if position.line < len(lines) else ""
    units = 0
    for index, char in enumerate(line):
        if units >= position.character:
            return start + index
        units += 2 if ord(char) > 0xFFFF else 1
    return start + len(line.rstrip("\r\n")) if units >= position.character else start + len(line)


def apply(text: str, edit: lsp.WorkspaceEdit, uri: str, version: int) -> str:
    """The text after a versioned workspace edit of one document."""
    assert edit.document_changes is not None and len(edit.document_changes) == 1
    change = edit.document_changes[0]
    assert isinstance(change, lsp.TextDocumentEdit)
    assert change.text_document.uri == uri and change.text_document.version == version
    spans = sorted(
        ((offset(text, e.range.start), offset(text, e.range.end), e.new_text) for e in change.edits),
        reverse=True,
    )
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def cli_fixed(tmp_path: Path, text: str, *flags: str) -> str:
    """What `torchdev-lint check --fix` makes of a file holding `text`."""
    path = tmp_path / "cli" / "fixed.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="")
    cli_main(["check", "--fix", "--no-cache", "-q", *flags, str(path)])
    return path.read_bytes().decode("utf-8")


def cli_findings(tmp_path: Path, text: str) -> list[tuple[str, int, int, int, int]]:
    """(code, line, column, end line, end column) of `check --format json`, 0-based as LSP counts."""
    path = tmp_path / "cli" / "checked.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="")
    out = tmp_path / "cli" / "report.json"
    cli_main(["check", "--no-cache", "--format", "json", "-o", str(out), str(path)])
    return [
        (d["code"], d["line"] - 1, d["column"] - 1, d["end_line"] - 1, d["end_column"] - 1)
        for d in json.loads(out.read_text())
    ]


def found(diagnostics: Sequence[lsp.Diagnostic]) -> list[tuple[str, int, int, int, int]]:
    return [
        (str(d.code), d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character)
        for d in diagnostics
    ]


def line_range(line: int) -> lsp.Range:
    return lsp.Range(lsp.Position(line, 0), lsp.Position(line, 0))


MOVES = textwrap.dedent(
    """\
    import torch


    def load(path):
        return torch.load(path)


    def make():
        x = torch.zeros(3).cuda()
        return x
    """
)


# Diagnostics ------------------------------------------------------------------------


def test_diagnostics_are_of_the_buffer_not_the_file_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text("x = 1\n")

    async def test() -> None:
        async with session() as server:
            uri = server.open(path, MOVES)
            diagnostics = await server.diagnostics(uri, 1)
            assert found(diagnostics) == cli_findings(tmp_path, MOVES)
            assert {d.code for d in diagnostics} == {"TDL101", "TDL203", "TDL301"}
            for diagnostic in diagnostics:
                assert diagnostic.source == "torchdev-lint"
                assert diagnostic.severity == lsp.DiagnosticSeverity.Warning
                page = Path(__file__).resolve().parents[1] / "docs" / "rules" / f"{diagnostic.code}.md"
                if page.is_file():
                    assert diagnostic.code_description is not None
                    assert diagnostic.code_description.href == page.as_uri()

    run(test())


@pytest.mark.parametrize(
    ("encodings", "wider"),
    [(None, 1), ([lsp.PositionEncodingKind.Utf8], 3), ([lsp.PositionEncodingKind.Utf32], 0)],
)
def test_columns_are_in_the_agreed_position_encoding(
    tmp_path: Path, encodings: list[str] | None, wider: int
) -> None:
    """The emoji before the finding is one code point (the CLI's columns), two UTF-16 code units
    (LSP's default) and four UTF-8 bytes."""
    text = 'import torch\nlabel = "\U0001f600"; x = torch.zeros(3).cuda()\n'

    async def test() -> None:
        async with session(encodings) as server:
            diagnostics = await server.diagnostics(server.open(tmp_path / "emoji.py", text))
            by_cli = cli_findings(tmp_path, text)
            assert found(diagnostics) == [
                (c, line, col + wider, end, end_col + wider) for c, line, col, end, end_col in by_cli
            ]

    run(test())


def test_a_change_publishes_the_new_text_s_diagnostics_and_drops_stale_ones(tmp_path: Path) -> None:
    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", MOVES)
            assert "TDL101" in {d.code for d in await server.diagnostics(uri, 1)}
            edited = MOVES.replace("torch.load(path)", 'torch.load(path, map_location="cpu")')
            server.change(uri, 2, edited)
            assert "TDL101" not in {d.code for d in await server.diagnostics(uri, 2)}
            for version in range(3, 9):  # a burst of keystrokes: only the last text matters
                server.change(uri, version, MOVES if version % 2 else edited)
            last = await server.diagnostics(uri, 8)
            assert found(last) == cli_findings(tmp_path, edited)
            await server.actions(uri, line_range(0))  # a round trip: any stale publish came before
            versions = [p.version for p in server.published[uri]]
            assert versions == sorted(versions) and versions[-1] == 8

    run(test())


def test_a_buffer_that_does_not_parse_clears_its_diagnostics(tmp_path: Path) -> None:
    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", MOVES)
            assert await server.diagnostics(uri, 1)
            server.change(uri, 2, MOVES + "def broken(:\n")
            assert await server.diagnostics(uri, 2) == []
            server.change(uri, 3, MOVES)
            assert found(await server.diagnostics(uri, 3)) == cli_findings(tmp_path, MOVES)

    run(test())


def test_the_project_s_settings_apply(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torchdev-lint]\nignore = ["TDL301"]\nextend-exclude = ["generated"]\n'
    )
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)

    async def test() -> None:
        async with session() as server:
            uri = server.open(package / "model.py", MOVES)
            assert {d.code for d in await server.diagnostics(uri)} == {"TDL101", "TDL203"}
            excluded = server.open(tmp_path / "generated" / "model.py", MOVES)
            assert await server.diagnostics(excluded) == []

    run(test())


def test_saving_checks_again_with_settings_changed_on_disk(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.torchdev-lint]\n")

    async def test() -> None:
        async with session() as server:
            path = tmp_path / "model.py"
            path.write_text(MOVES)
            uri = server.open(path, MOVES)
            assert "TDL101" in {d.code for d in (await server.publish(uri, 1)).diagnostics}
            config.write_text('[tool.torchdev-lint]\nignore = ["TDL101"]\n# longer: a new size\n')
            server.client.text_document_did_save(
                lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri))
            )
            again = await server.publish(uri, 2)
            assert again.version == 1 and {d.code for d in again.diagnostics} == {"TDL203", "TDL301"}

    run(test())


GATE = textwrap.dedent(
    """\
    import sys
    import torch


    def init_distributed_mode(args):
        if not torch.cuda.is_available():
            sys.exit("this program needs a GPU")
    """
)
# The same helper used so that the program may go on without CUDA.
WARNS = GATE.replace('sys.exit("this program needs a GPU")', 'print("no GPU: running on the CPU")')
TRAIN = textwrap.dedent(
    """\
    import torch
    import utils


    def main(args):
        utils.init_distributed_mode(args)
        return torch.nn.Linear(2, 2).cuda()
    """
)


def cli_project_findings(path: Path) -> list[str]:
    """The codes `torchdev-lint check` reports for `path` when checking its whole folder."""
    out = path.parent / "report.json"
    cli_main(["check", "--no-cache", "--format", "json", "-o", str(out), str(path.parent)])
    report = json.loads(out.read_text())
    out.unlink()
    return [d["code"] for d in report if Path(d["path"]).name == path.name]


@pytest.mark.parametrize(("helper", "expected"), [(GATE, []), (WARNS, ["TDL301"])], ids=["gates", "warns"])
def test_a_gate_in_another_file_of_the_project_is_seen(
    tmp_path: Path, helper: str, expected: list[str]
) -> None:
    """Pass 1 over the project, as `check` makes it: a helper in utils.py that exits without CUDA
    leaves train.py's `.cuda()` after calling it unflagged; one that only warns does not."""
    (tmp_path / "utils.py").write_text(helper)
    train = tmp_path / "train.py"
    train.write_text(TRAIN)
    assert [c for c in cli_project_findings(train) if c == "TDL301"] == expected

    async def test() -> None:
        async with session() as server:
            uri = server.open(train, TRAIN)
            assert [str(d.code) for d in await server.diagnostics(uri) if d.code == "TDL301"] == expected

    run(test())


def test_the_buffer_s_own_calls_and_saved_helpers_count(tmp_path: Path) -> None:
    """The unsaved buffer's calls come from its text; a helper's save re-checks the open buffer."""
    (tmp_path / "utils.py").write_text(WARNS)
    train = tmp_path / "train.py"
    without_call = TRAIN.replace("    utils.init_distributed_mode(args)\n", "")
    train.write_text(without_call)

    async def test() -> None:
        async with session() as server:
            uri = server.open(train, without_call)
            assert "TDL301" in {d.code for d in await server.diagnostics(uri, 1)}
            server.change(uri, 2, TRAIN)  # calls the helper, which only warns: still flagged
            assert "TDL301" in {d.code for d in await server.diagnostics(uri, 2)}
            (tmp_path / "utils.py").write_text(GATE)  # the helper now exits without CUDA
            utils = server.open(tmp_path / "utils.py", GATE)
            server.client.text_document_did_save(
                lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(utils))
            )
            publishes = len(server.published[uri])
            again = await server.publish(uri, publishes + 1)
            assert again.version == 2 and "TDL301" not in {d.code for d in again.diagnostics}

    run(test())


def test_closing_a_document_clears_its_diagnostics(tmp_path: Path) -> None:
    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", MOVES)
            assert await server.diagnostics(uri, 1)
            server.client.text_document_did_close(
                lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri))
            )
            while server.published[uri][-1].diagnostics:
                server.arrived.clear()
                await asyncio.wait_for(server.arrived.wait(), TIMEOUT)

    run(test())


# Code actions -----------------------------------------------------------------------


def test_the_quick_fix_gives_what_check_fix_gives(tmp_path: Path) -> None:
    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", MOVES)
            diagnostics = await server.diagnostics(uri, 1)
            moved = next(d for d in diagnostics if d.code == "TDL203")
            actions = await server.actions(uri, line_range(moved.range.start.line), diagnostics=[moved])
            fix = next(a for a in actions if a.title.startswith("TDL203:"))
            assert fix.kind == lsp.CodeActionKind.QuickFix and fix.is_preferred
            assert "(unsafe" not in fix.title
            assert fix.edit is not None
            (change,) = fix.edit.document_changes or []
            assert all(e.range.start.line == moved.range.start.line for e in change.edits)  # not the file
            assert apply(MOVES, fix.edit, uri, 1) == cli_fixed(tmp_path, MOVES)

    run(test())


def test_an_unsafe_fix_is_labelled(tmp_path: Path) -> None:
    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", MOVES)
            loads = next(d for d in await server.diagnostics(uri, 1) if d.code == "TDL101")
            actions = await server.actions(uri, loads.range)
            fix = next(a for a in actions if a.title.startswith("TDL101:"))
            assert "(unsafe: " in fix.title and fix.title.endswith(")") and not fix.is_preferred
            assert fix.edit is not None
            expected = cli_fixed(tmp_path, MOVES, "--unsafe-fixes", "--select", "TDL101")
            assert apply(MOVES, fix.edit, uri, 1) == expected

    run(test())


def test_suppressing_adds_or_merges_a_noqa_directive(tmp_path: Path) -> None:
    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", MOVES)
            diagnostics = await server.diagnostics(uri, 1)
            moved = next(d for d in diagnostics if d.code == "TDL203")
            actions = await server.actions(uri, moved.range, only=[lsp.CodeActionKind.QuickFix])
            suppress = next(a for a in actions if a.title == "Suppress TDL203 on this line")
            assert suppress.edit is not None
            text = apply(MOVES, suppress.edit, uri, 1)
            assert "x = torch.zeros(3).cuda()  # noqa: TDL203\n" in text
            server.change(uri, 2, text)
            codes = {d.code for d in await server.diagnostics(uri, 2)}
            assert "TDL203" not in codes and "TDL301" in codes
            hardcoded = next(d for d in await server.diagnostics(uri, 2) if d.code == "TDL301")
            actions = await server.actions(uri, hardcoded.range)
            suppress = next(a for a in actions if a.title == "Suppress TDL301 on this line")
            assert suppress.edit is not None
            text = apply(text, suppress.edit, uri, 2)
            assert "x = torch.zeros(3).cuda()  # noqa: TDL203, TDL301\n" in text

    run(test())


def test_fix_all_gives_what_check_fix_gives_in_minimal_edits(tmp_path: Path) -> None:
    text = MOVES + textwrap.dedent(
        """\


        def more(n):
            for _ in range(n):
                y = torch.ones(n).cuda()
                z = torch.rand(n, n).to("cuda")
            return y, z
        """
    )

    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", text)
            await server.diagnostics(uri, 1)
            actions = await server.actions(uri, line_range(0), only=[lsp.CodeActionKind.SourceFixAll])
            (fix_all,) = actions
            assert fix_all.kind == "source.fixAll.torchdev-lint"
            assert fix_all.edit is not None
            (change,) = fix_all.edit.document_changes or []
            assert len(change.edits) >= 2
            assert all(
                e.range.start.line == e.range.end.line for e in change.edits
            )  # no line rewritten whole
            assert apply(text, fix_all.edit, uri, 1) == cli_fixed(tmp_path, text)
            only_quick = await server.actions(uri, line_range(0), only=[lsp.CodeActionKind.QuickFix])
            assert all(a.kind == lsp.CodeActionKind.QuickFix for a in only_quick)

    run(test())


# Process life -----------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def test_shutdown_then_exit_ends_the_process_with_0(tmp_path: Path) -> None:
    async def test() -> None:
        async with session() as server:
            uri = server.open(tmp_path / "model.py", MOVES)
            await server.diagnostics(uri, 1)
            if sys.platform == "linux":
                assert _children(server.process.pid) == []
            await asyncio.wait_for(server.client.shutdown_async(None), TIMEOUT)
            server.client.exit(None)
            assert await asyncio.wait_for(server.process.wait(), TIMEOUT) == 0

    run(test())


def _message(payload: dict[str, object]) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_the_server_ends_when_stdin_closes(tmp_path: Path) -> None:
    """A client that dies mid-session (its end of the pipe closes) leaves no server behind."""
    process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdin is not None
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
        opened = {
            "jsonrpc": "2.0",
            "method": "textDocument/didOpen",
            "params": {
                "textDocument": {
                    "uri": (tmp_path / "model.py").as_uri(),
                    "languageId": "python",
                    "version": 1,
                    "text": MOVES,
                }
            },
        }
        process.stdin.write(_message(initialize) + _message(opened))
        process.stdin.close()
        assert process.wait(timeout=TIMEOUT) == 1  # LSP: ending without `shutdown` exits with 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_without_pygls_the_server_names_the_extra() -> None:
    blocked = "import sys; sys.modules['pygls'] = None; from torchdev_lint.cli import main; sys.exit(main(['server']))"
    result = subprocess.run(
        [sys.executable, "-c", blocked],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "torchdev-lint[lsp]" in line and "pygls" in line


# Edits in the client's terms (no server process) ------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("a = 1\nb = 2\n", "a = 1\nb = 3\n"),
        ("a = 1\r\nb = 2\r\n", "a = 1\r\nc = 0\r\nb = 2\r\n"),
        ("a = 1\r\nb = 2", "a = 1\nb = 2"),  # a line break changed, not the text around it
        ("x = '\U0001f600'; y = f(1)\n", "x = '\U0001f600'; y = f(1, 2)\n"),
        ("one\rtwo\rthree\r", "one\rthree\r"),
        ("keep\n", ""),
        ("", "new\n"),
    ],
)
def test_minimal_edits_reproduce_the_new_text(before: str, after: str) -> None:
    from torchdev_lint.server.edits import Positions, minimal_edits

    edits = minimal_edits(before, after, Positions(before, lsp.PositionEncodingKind.Utf16))
    change = lsp.TextDocumentEdit(lsp.OptionalVersionedTextDocumentIdentifier(uri="u", version=1), edits)
    assert apply(before, lsp.WorkspaceEdit(document_changes=[change]), "u", 1) == after
    changed = sum(len(e.new_text) for e in edits)
    assert changed <= abs(len(after) - len(before)) + 2  # only what differs, not whole lines
