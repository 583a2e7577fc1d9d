"""The engine's parse (`engine._parse`) builds LibCST's tree without validating the parser's nodes
(valid by construction): the same tree as LibCST's validated parse, and validation back on for
every node built afterwards (fixes build nodes), whether the parse succeeded or failed."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

import torchdev_lint
from torchdev_lint.diagnostics import SourceError
from torchdev_lint.engine import parse

_SOURCES = sorted(Path(torchdev_lint.__file__).parent.rglob("*.py"))[:40]


@pytest.mark.parametrize("path", _SOURCES, ids=lambda path: path.name)
def test_the_tree_is_libcsts_validated_tree(path: Path) -> None:
    source = path.read_bytes()
    tree = parse(str(path), source)
    assert tree.deep_equals(cst.parse_module(source))
    assert tree.bytes == source


@pytest.mark.parametrize("source", [b"x = 1\n", b"def f(:\n"])
def test_nodes_built_after_a_parse_are_validated(source: bytes) -> None:
    try:
        parse("t.py", source)
    except SourceError:
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.SimpleWhitespace("not whitespace")
