"""The walker computes each node type's fields once, field-less types (`...`, `*`) included."""

from __future__ import annotations

import libcst as cst
import pytest

from torchdev_lint.analysis.syntax import walk as walk_module


def test_field_less_nodes_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    module = cst.parse_module("from x import *\n" + "def f(a=...): ...\n" * 50)
    walk_module.walk(module, lambda node: None, lambda node: None)  # fills the caches
    looked_up: list[type] = []
    original = walk_module._child_fields
    monkeypatch.setattr(walk_module, "_child_fields", lambda t: looked_up.append(t) or original(t))
    seen: list[cst.CSTNode] = []
    walk_module.walk(module, seen.append, lambda node: None)
    assert looked_up == []
    assert sum(isinstance(node, cst.Ellipsis) for node in seen) == 100
    assert sum(isinstance(node, cst.ImportStar) for node in seen) == 1


def test_first_stops_at_the_first_match_in_source_order_and_prunes() -> None:
    module = cst.parse_module("def f():\n    return 1\nx = (2)\ny = 3\n")

    def integers(node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Integer)

    found = walk_module.first(module, integers)
    assert isinstance(found, cst.Integer) and found.value == "1"
    found = walk_module.first(module, integers, prune=(cst.FunctionDef,))
    assert isinstance(found, cst.Integer) and found.value == "2"
    assert walk_module.first(module, lambda node: isinstance(node, cst.Float)) is None
    assert walk_module.first(module, lambda node: node is module) is module
    assert walk_module.contains(module, found) and not walk_module.contains(found, module)
