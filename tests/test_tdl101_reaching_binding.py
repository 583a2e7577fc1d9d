"""TDL101 and names bound more than once: the binding that reaches a use decides.

`bounds = torch.from_numpy(bounds[n])` after the load (fairseq's pgslm decoder) and
`buffer = io.BytesIO(buffer)` after a loop over bytes (e3nn's code-generation mixin) are
silent, and so is a `self` cache its class fills with `.cpu()` items only, saved and loaded
back (speechbrain's aligner); each has a look-alike that is still flagged.
A name bound to itself (`x = x`) before `torch.save(x, ...)` is checked without error.
"""

from __future__ import annotations

from textwrap import dedent

import libcst as cst
import pytest

from torchdev_lint.analysis.provenance.checkpoint_loads import UseIndex
from torchdev_lint.analysis.syntax.reaching_bindings import reaching_assignment
from torchdev_lint.engine import check_source
from torchdev_lint.rules.tdl101_load_without_map_location import LoadWithoutMapLocation

REBOUND_TO_ARRAY = """
    import torch

    def codebook(path, n):
        table = torch.load(path)
        {before}
        table = torch.from_numpy(table[n])
        {after}
        return table.cuda()
"""
BYTES_ROUND_TRIP = """
    import io
    import torch

    class Scripted:
        def __getstate__(self):
            out = io.BytesIO()
            torch.jit.save(self.module, out)
            return {{"ts": out.getvalue()}}

        def __setstate__(self, state):
            for kind, buffer in state.items():
                {before}
                buffer = io.BytesIO(buffer)
                {after}
"""
LOAD = "self.module = torch.jit.load(buffer)"
HOST_CACHE = """
    import torch

    class Aligner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = {{}}

        def store(self, ids, alignments):
            for i, key in enumerate(ids):
                alignment = alignments[i]
                {before}
                self.cache[key] = alignment
                {after}

        def get(self, key):
            return self.cache[key] if key in self.cache else None

        def _save(self, path):
            torch.save(self.cache, path)

        def _load(self, path):
            self.cache = torch.load(path)
"""
TO_HOST = "alignment = torch.tensor(alignment, dtype=torch.int16).cpu()"


def _flagged(template: str, before: str = "pass", after: str = "pass") -> bool:
    source = dedent(template).format(before=before, after=after)
    return bool(check_source("pkg/model.py", source, [LoadWithoutMapLocation]).diagnostics)


def test_rebinding_before_the_use_silences() -> None:
    assert not _flagged(REBOUND_TO_ARRAY)
    assert not _flagged(BYTES_ROUND_TRIP, after=LOAD)
    assert not _flagged(HOST_CACHE, before=TO_HOST)


@pytest.mark.parametrize(
    ("template", "before", "after"),
    [
        (REBOUND_TO_ARRAY, "model.register_buffer('table', table)", "pass"),  # used before
        (REBOUND_TO_ARRAY, "pass", "table = table if n else torch.load(path)"),  # reads the load
        (BYTES_ROUND_TRIP, LOAD, "pass"),  # loads the bytes object before wrapping it
        (BYTES_ROUND_TRIP, "pass", "buffer = kind\n            " + LOAD),  # rebound again
        (HOST_CACHE, "pass", "pass"),  # device tensors stored
        (HOST_CACHE, "pass", TO_HOST),  # moved to the host after the store
        (HOST_CACHE, TO_HOST, "self.cache[key] += 1"),  # changed in place
        (HOST_CACHE, TO_HOST, "self.cache.update(alignments)"),  # other items put in
    ],
)
def test_rebinding_that_does_not_reach_the_use_still_flags(template: str, before: str, after: str) -> None:
    assert _flagged(template, before, after)


def _reaching(source: str) -> str | None:
    """The value reaching the `x` of the last `use(..., x)` call in `source`."""
    module = cst.parse_module(dedent(source))
    index = UseIndex(module)
    uses = [
        node.args[-1].value
        for node in _walk(module)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "use"
    ]
    assert isinstance(uses[-1], cst.Name)
    found = reaching_assignment(uses[-1], index.parent)
    return None if found is None or found.value is None else module.code_for_node(found.value)


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found = [node]
    for child in node.children:
        found += _walk(child)
    return found


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("x = 1\nx = f(x)\nuse(x)\n", "f(x)"),
        ("x = 1\nif c:\n    x = 2\nuse(x)\n", None),  # a branch may rebind it
        ("x = 1\nif c:\n    use(x)\n", "1"),
        ("x = 1\nfor i in r:\n    use(x)\n    x = 2\n", None),  # the next iteration reads 2
        ("x = 1\nfor x in r:\n    pass\nuse(x)\n", None),
        ("x = 1\ntry:\n    x = 2\nexcept E:\n    use(x)\n", None),
        ("x = 1\nuse((x := 2), x)\n", None),
        ("x = 1\ny, x = 2, 3\nuse(x)\n", None),
        ("x = 1\ndef g():\n    use(x)\n", None),  # a closure reads it when called
        ("x = 1\nz = [use(x) for _ in r]\n", None),
        ("x = 1; x = 2; use(x)\n", "2"),
        ("use(x)\n", None),
    ],
)
def test_reaching_assignment(source: str, value: str | None) -> None:
    assert _reaching(source) == value


SELF_BOUND = """
    import torch

    {module_binding}

    def save(path):
        {binding}
        torch.save(x, path)

    def restore(path):
        return torch.load(path)
"""


@pytest.mark.parametrize(
    ("module_binding", "binding"),
    [
        ("x = x", "pass"),
        ("pass", "x = x"),
        ("pass", "x = {'state': x}"),
        ("x = y\ny = x", "pass"),  # each binding leads to the other
    ],
)
def test_a_name_bound_to_itself_is_not_followed_without_end(module_binding: str, binding: str) -> None:
    """`x = x` before `torch.save(x, path)`: `saved_on_cpu` stops at a name met again, so the
    file is checked (no "too deeply nested" error) and the load of what it saved is reported."""
    source = dedent(SELF_BOUND).format(module_binding=module_binding, binding=binding)
    diagnostics = check_source("pkg/model.py", source, [LoadWithoutMapLocation]).diagnostics
    assert [diagnostic.code for diagnostic in diagnostics] == ["TDL101"]
