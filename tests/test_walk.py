"""The walker computes each node type's fields once, field-less types (`...`, `*`) included."""

from __future__ import annotations

import libcst as cst
import pytest

from torchdev_lint.analysis import walk as walk_module


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
