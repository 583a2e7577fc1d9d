"""Every entry of the library-models table decides a finding: its example program has the
finding the entry names without the entry, and not with it (so no entry is dead, and each one
says in a program what it changes)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchdev_lint.analysis.knowledge import library_models
from torchdev_lint.analysis.knowledge.library_models import (
    MODELS,
    Fact,
    Model,
    apis,
    endings,
    value_libraries,
)
from torchdev_lint.config import select_rules
from torchdev_lint.engine import check_source

RULES = tuple(select_rules(["ALL"]))


def _found(model: Model) -> set[tuple[str, int]]:
    result = check_source("example.py", model.example, RULES)
    return {(d.code, d.line) for d in result.diagnostics if not d.suppressed}


def _forget() -> None:
    for cached in (apis, endings, value_libraries):
        cached.cache_clear()


@pytest.fixture
def table_without() -> Iterator[object]:
    """Call with a model: the table lacks it until the test ends."""

    def drop(model: Model) -> None:
        library_models.MODELS = tuple(m for m in MODELS if m is not model)
        _forget()

    yield drop
    library_models.MODELS = MODELS
    _forget()


@pytest.mark.parametrize("model", MODELS, ids=[f"{m.fact.name}:{m.api}" for m in MODELS])
def test_each_model_decides_its_example(model: Model, table_without) -> None:  # type: ignore[no-untyped-def]
    if model.finds:
        assert model.without in _found(model), "with the entry the finding does not appear"
        table_without(model)
        assert model.without not in _found(model), "without the entry the finding is there: a dead entry"
        return
    assert model.without not in _found(model), "the entry does not keep the finding away"
    table_without(model)
    assert model.without in _found(model), "without the entry the finding does not appear: a dead entry"


def test_no_library_api_outside_the_table() -> None:
    """Rules and the other analysis modules ask the table: no other module's code holds a
    qualified name of a modelled library (`"k2.arc_sort"`, `"numpy.asarray"`, `"deepspeed."`).
    Docstrings may mention them; words of identifiers (`export_tensorrt`) are no API."""
    package = Path(library_models.__file__).parents[1]
    libraries = {m.api.split(".", 1)[0] for m in MODELS if m.fact is not Fact.PLACES_BATCHES} - {"torch"}
    prefixes = tuple(f"{library}." for library in sorted(libraries))
    for path in sorted([*package.glob("analysis/**/*.py"), *package.glob("rules/*.py")]):
        if path.name == "library_models.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        named = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and node.value.startswith(prefixes)
        ]
        assert not named, f"{path.name} names {named}"


_NEEDS_CUDA = [m for m in MODELS if m.fact is Fact.NEEDS_CUDA]


@pytest.mark.parametrize("model", _NEEDS_CUDA, ids=[m.api for m in _NEEDS_CUDA])
def test_needs_cuda_entries_raise_without_cuda(model: Model) -> None:
    """The call each `NEEDS_CUDA` example makes does raise on this machine when it has no CUDA
    (the CPU build of torch, or a CUDA build with no GPU): the table says what torch does."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    body = ast.parse(model.example).body
    function = next(node for node in body if isinstance(node, ast.FunctionDef))
    call = function.body[0]
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    assert ast.unparse(call.value.func) == model.api
    with pytest.raises(Exception):  # noqa: B017 (which exception depends on the build)
        eval(compile(ast.Expression(call.value), "example.py", "eval"), {"torch": torch})
