"""Name resolution through aliases (`analysis.syntax.scopes.resolve`)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchdev_lint.analysis.syntax import scopes
from torchdev_lint.analysis.syntax.scopes import Scope, collect_bindings, resolve


def _module_scope(code: str) -> Scope:
    module = cst.parse_module(textwrap.dedent(code))
    scope = Scope(module, "module", None)
    collect_bindings(scope, module.body)
    return scope


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import torch as T\nload = T.load\n", "torch.load"),
        ("import torch\nload = torch.load\nload = torch.load\n", "torch.load"),
        ("import torch\nload = torch.load\nload = torch.save\n", None),
        ("import torch\nload = torch.load\nload = make()\n", None),
    ],
)
def test_an_alias_resolves_only_when_every_binding_agrees(code: str, expected: str | None) -> None:
    assert resolve(cst.Name("load"), _module_scope(code)) == expected


def test_a_name_rebound_from_itself_many_times_costs_bindings_not_bindings_to_the_depth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # tsai's data/preparation.py: `df = df.reindex(...)` rebinds one name many times; resolving
    # every binding at every alias level took minutes (bindings ** depth).
    code = "df = load()\n" + "df = df.value\n" * 12
    scope = _module_scope(code)
    calls = 0
    original = scopes._binding_target

    def counting(*args: object) -> str | None:
        nonlocal calls
        calls += 1
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(scopes, "_binding_target", counting)
    assert resolve(cst.Name("df"), scope) is None
    assert calls <= 13
