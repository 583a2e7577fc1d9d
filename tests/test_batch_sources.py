"""Batches drawn with `next()` on each pass of a loop are the loader's batches
(`analysis/data/batch_sources.py`), and so are parts moved in a branch of the loop body
(`if cuda: x = x.cuda()`, `batches._bound_on_the_way`): TDL204 reports the unpinned loader they
come from; a batch drawn once, a name rebound before the move, or an iterator over something
else is no evidence."""

from __future__ import annotations

import textwrap

import pytest

from torchdev_lint.config import Settings
from torchdev_lint.engine import check_source
from torchdev_lint.rules.tdl204_loader_without_pin_memory import LoaderWithoutPinMemory

DRAWN_EACH_STEP = {
    "iter, unpacked": """
        def fit(model, ds, device, steps):
            it = iter(DataLoader(ds, batch_size=4))
            for _ in range(steps):
                x, y = next(it)
                model(x.to(device), y.to(device))
        """,
    "generator around the loader, moved at once": """
        def repeat(loader):
            while True:
                yield from loader

        def fit(model, ds, device):
            stream = repeat(DataLoader(ds, batch_size=4))
            while True:
                model(next(stream).cuda())
        """,
    "a part of the drawn batch, behind a cast": """
        def fit(model, ds, device, steps):
            it = iter(DataLoader(ds, batch_size=4))
            for _ in range(steps):
                batch = next(it)
                pixels = batch["pixels"]
                model(pixels.float().to(device))
        """,
}

MOVED_IN_A_BRANCH = {
    "moved under a flag, rebinding itself": """
        def fit(model, ds, opts):
            for data in DataLoader(ds, batch_size=4):
                tokens, frames = data[0], data[1]
                if opts.use_cuda:
                    tokens = tokens.cuda()
                    frames = frames.cuda()
                model(tokens, frames)
        """,
    "moved in a with block": """
        def fit(model, ds, device, timer):
            for tokens, frames in DataLoader(ds, batch_size=4):
                with timer:
                    frames = frames.to(device)
                model(tokens, frames)
        """,
}

NO_EVIDENCE = {
    "one batch drawn outside any loop": """
        def shapes(model, ds, device):
            x, y = next(iter(DataLoader(ds, batch_size=4)))
            model(x.to(device))
        """,
    "rebound between the draw and the move": """
        def fit(model, ds, device, steps, fallback):
            it = iter(DataLoader(ds, batch_size=4))
            for _ in range(steps):
                x, y = next(it)
                x = fallback(x)
                model(x.to(device))
        """,
    "an iterator over something else": """
        def fit(model, ds, device, steps, tensors):
            loader = DataLoader(ds, batch_size=4)
            it = iter(tensors)
            for _ in range(steps):
                model(next(it).to(device))
            return loader
        """,
    "rebound in the branch before the move": """
        def fit(model, ds, opts):
            for tokens, frames in DataLoader(ds, batch_size=4):
                if opts.use_cuda:
                    tokens = opts.augment(tokens)
                    tokens = tokens.cuda()
                model(tokens)
        """,
    "rebound in an inner loop": """
        def fit(model, ds, device, rounds):
            for tokens, frames in DataLoader(ds, batch_size=4):
                for _ in range(rounds):
                    model(tokens.to(device))
                    tokens = model.refine(tokens)
        """,
    "the drawn batch only moved to the CPU": """
        def fit(model, ds, steps):
            it = iter(DataLoader(ds, batch_size=4))
            for _ in range(steps):
                x, y = next(it)
                model(x.cpu())
        """,
}


def _findings(body: str) -> list[int]:
    source = "from torch.utils.data import DataLoader\n" + textwrap.dedent(body)
    result = check_source(
        "train.py", source.encode(), [LoaderWithoutPinMemory], Settings(), skip_filter=False
    )
    return [d.line for d in result.diagnostics]


@pytest.mark.parametrize("body", DRAWN_EACH_STEP.values(), ids=DRAWN_EACH_STEP.keys())
def test_a_batch_drawn_each_step_is_a_moved_batch_of_its_loader(body: str) -> None:
    assert len(_findings(body)) == 1


@pytest.mark.parametrize("body", MOVED_IN_A_BRANCH.values(), ids=MOVED_IN_A_BRANCH.keys())
def test_a_batch_moved_in_a_branch_of_the_loop_body_is_a_moved_batch(body: str) -> None:
    assert len(_findings(body)) == 1


@pytest.mark.parametrize("body", NO_EVIDENCE.values(), ids=NO_EVIDENCE.keys())
def test_no_draw_in_a_loop_no_finding(body: str) -> None:
    assert _findings(body) == []
