"""Language server latency: from `didChange` to the `publishDiagnostics` of that version.

    .venv/bin/python benchmarks/lsp_latency.py [--lines 2000] [--changes 20] [--file PATH]

Starts `torchdev-lint server` under pygls' LSP client (as an editor would, over
stdio), opens a buffer of about `--lines` lines of PyTorch training code (with
findings in every block), then makes `--changes` edits one after another (each
types a comment at the end of one line), and for each one
measures the wall time from sending the change to receiving the diagnostics
published for its version. The time includes the server's debounce pause
(`DEBOUNCE_S`), which an editor user waits for too, and is reported with it
subtracted as well, and the server's CPU time per change (user + system, which
the machine's load does not inflate). `--file` opens a real file instead, each
change adding a comment line at its end. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from torchdev_lint import __version__
from torchdev_lint.server.app import DEBOUNCE_S

BLOCK = '''

class Net{n}(torch.nn.Module):
    """A small classifier: two hidden layers and a head."""

    def __init__(self, width={n} + 8, classes=10):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x))


def train{n}(loader, device, epochs=3):
    model = Net{n}().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(epochs):
        for inputs, targets in loader:
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            scale = torch.ones(1).to(device)
            loss = torch.nn.functional.cross_entropy(model(inputs) * scale, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return model, sum(losses) / max(len(losses), 1)


def evaluate{n}(model, batches, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, targets in batches:
            predictions = model(inputs.to(device)).argmax(1)
            correct += (predictions.cpu() == targets).sum().item()
            total += targets.numel()
    return correct / max(total, 1)


def restore{n}(path, device):
    state = torch.load(path)
    model = Net{n}()
    model.load_state_dict(state)
    return model.to(device)
'''


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc), to see the check's cost apart from the
    machine's load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def buffer(lines: int) -> str:
    text, n = "import torch\n", 0  # about one finding in 25 lines: a busy file, not a pathological one
    while text.count("\n") < lines:
        text += BLOCK.format(n=n)
        n += 1
    return text


async def measure(opened: str, changes: int) -> tuple[list[float], list[float], int, int]:
    client = LanguageClient("lsp-latency", "1")
    arrived: dict[int, float] = {}
    counts: dict[int, int] = {}
    event = asyncio.Event()

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(params: lsp.PublishDiagnosticsParams) -> None:
        if params.version is not None:
            arrived[params.version] = time.perf_counter()
            counts[params.version] = len(params.diagnostics)
            event.set()

    async def wait_for(version: int) -> None:
        while version not in arrived:
            event.clear()
            await asyncio.wait_for(event.wait(), 120)

    await client.start_io(sys.executable, "-m", "torchdev_lint", "server")
    await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
    client.initialized(lsp.InitializedParams())
    text = opened
    synthetic = "lr=0.1)\n" in opened
    with tempfile.TemporaryDirectory() as folder:
        uri = (Path(folder) / "train.py").as_uri()
        client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, "python", 1, text))
        )
        await wait_for(1)
        times, cpu = [], []
        assert client._server is not None
        pid = client._server.pid
        for number in range(2, changes + 2):
            if synthetic:  # a comment typed at the end of a line
                text = opened.replace("lr=0.1)\n", f"lr=0.1)  # edit {number}\n", 1)
            else:
                text = f"{opened.rstrip()}\n# edit {number}\n"
            sent, used = time.perf_counter(), cpu_seconds(pid)
            client.text_document_did_change(
                lsp.DidChangeTextDocumentParams(
                    lsp.VersionedTextDocumentIdentifier(uri=uri, version=number),
                    [lsp.TextDocumentContentChangeWholeDocument(text=text)],
                )
            )
            await wait_for(number)
            times.append(arrived[number] - sent)
            cpu.append(cpu_seconds(pid) - used)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times, cpu, text.count("\n"), counts[changes + 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--file", type=Path, help="open this file's text instead of the generated buffer")
    args = parser.parse_args()
    opened = args.file.read_text(encoding="utf-8") if args.file else buffer(args.lines)
    times, cpu, lines, findings = asyncio.run(measure(opened, args.changes))
    times_ms = sorted(t * 1000 for t in times)
    p90 = times_ms[max(0, round(0.9 * len(times_ms)) - 1)]
    median = statistics.median(times_ms)
    print(
        f"torchdev-lint {__version__}, pygls {version('pygls')}, lsprotocol {version('lsprotocol')}, "
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"buffer: {args.file or 'generated'}, {lines} lines, {findings} findings; {len(times_ms)} changes")
    debounce = DEBOUNCE_S * 1000
    print(
        f"didChange -> publishDiagnostics: median {median:.0f} ms, p90 {p90:.0f} ms, max {times_ms[-1]:.0f} ms"
    )
    print(f"server CPU per change (user + sys): median {statistics.median(cpu) * 1000:.0f} ms")
    print(
        f"  of which the debounce pause: {debounce:.0f} ms; check and publish: median {median - debounce:.0f} ms"
    )


if __name__ == "__main__":
    main()
