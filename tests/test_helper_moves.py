"""A loader's batch handed to a helper of another file that moves it (`to_inputs(batch, dev)`):
pass 1 summarises what each module-level function moves (`moved_arguments`) and where (a device
parameter read at the call, or its default), and the loop's file learns it (`argument_moves`),
so TDL204 sees the batches moved (a callee the loop gives no device is not read). Helpers of the
same file are the rule's own examples."""

from __future__ import annotations

from pathlib import Path

from tests.multifile import findings, write_files

HELPERS = """
    def as_inputs(sample, dev):
        return {name: part.to(dev) for name, part in sample.items()}

    def first_to(parts, where="cuda"):
        return parts[0].to(where), parts[1:]

    def to_host(parts, where="cpu"):
        return parts[0].to(where)

    def rename(parts, dev):
        parts = dict(parts)  # rebound: what it moves is no longer the caller's batch
        return {k: v.to(dev) for k, v in parts.items()}
"""


def _tdl204(root: Path, name: str, loops: str) -> list[str]:
    """TDL204's findings in a project of `HELPERS` and one file of loops using them."""
    write_files(root, {"tools/__init__.py": "", "tools/moves.py": HELPERS, name: loops})
    return findings(root, ["TDL204"])


def test_batches_moved_by_another_files_helper(tmp_path: Path) -> None:
    found = _tdl204(
        tmp_path,
        "fit.py",
        """
                import torch
                from torch.utils.data import DataLoader

                from tools import moves
                from tools.moves import as_inputs, first_to

                def run(net, rows, dev):
                    for sample in DataLoader(rows, batch_size=8):
                        net(**as_inputs(sample, dev))

                def run_default(net, rows):
                    for parts in DataLoader(rows, batch_size=8):
                        head, rest = first_to(parts)
                        net(head)

                def run_module(net, rows, dev):
                    for parts in DataLoader(rows, batch_size=8):
                        net(moves.first_to(parts, where=dev)[0])
        """,
    )
    # `first_to(parts)` passes no device: across files such a callee is not read (a summary of its
    # module for every call a loop makes with a batch would cost more than it finds).
    assert found == ["fit.py:9 TDL204", "fit.py:18 TDL204"]


def test_helpers_that_move_to_the_cpu_or_something_else(tmp_path: Path) -> None:
    found = _tdl204(
        tmp_path,
        "tally.py",
        """
                import torch
                from torch.utils.data import DataLoader

                from tools.moves import first_to, rename, to_host

                def tally(stats, rows, dev):
                    for parts in DataLoader(rows, batch_size=8):
                        stats.add(to_host(parts))
                    for parts in DataLoader(rows, batch_size=8):
                        stats.add(first_to(parts, "cpu"))
                    for parts in DataLoader(rows, batch_size=8):
                        stats.add(first_to(parts, where=torch.float16))
                    for parts in DataLoader(rows, batch_size=8):
                        stats.add(rename(parts, dev))
        """,
    )
    assert found == []
