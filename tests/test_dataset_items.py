"""`dataset_items.item_parameters`: which constructor arguments a dataset class hands out as its
items unchanged (their tensors reach the loader's batches as the caller passed them)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst
import pytest

from torchdev_lint.analysis.data.dataset_items import item_parameters


def _parameters(source: str) -> list[tuple[int | None, str]]:
    (klass,) = [s for s in cst.parse_module(dedent(source)).body if isinstance(s, cst.ClassDef)]
    return item_parameters(klass)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            """
            class Rows:
                def __init__(self, table):
                    self.table = table
                def __getitem__(self, i):
                    return self.table[i]
            """,
            [(0, "table")],
        ),
        (  # through a local name, a tuple of items, a keyword-only parameter
            """
            class Pairs:
                def __init__(self, inputs, labels=None, *, weights):
                    self.inputs, self.labels = inputs, labels
                    self.labels = labels
                    self.weights = weights
                def __getitem__(self, index):
                    x = self.inputs[index]
                    return x, self.labels[index], self.weights[index]
            """,
            [(1, "labels"), (None, "weights")],
        ),
        (  # items built from the argument, not handed out: the class decides where they live
            """
            class Converted:
                def __init__(self, array):
                    self.array = array
                def __getitem__(self, i):
                    return torch.from_numpy(self.array[i])
            """,
            [],
        ),
        (  # stored after a conversion: not the caller's object
            """
            class Copied:
                def __init__(self, data):
                    self.data = torch.as_tensor(data)
                def __getitem__(self, i):
                    return self.data[i]
            """,
            [],
        ),
        (  # no `__getitem__`: an iterable dataset builds its items itself
            """
            class Stream:
                def __init__(self, source):
                    self.source = source
                def __iter__(self):
                    return iter(self.source)
            """,
            [],
        ),
    ],
    ids=["direct", "local-tuple-keyword", "converted", "copied", "iterable"],
)
def test_item_parameters(source: str, expected: list[tuple[int | None, str]]) -> None:
    assert _parameters(source) == expected
