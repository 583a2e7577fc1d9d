"""The one binding walker (`analysis.syntax.bindings`) and the askers built on it."""

from __future__ import annotations

import textwrap

import libcst as cst

from torchdev_lint.analysis.syntax.bindings import own_bindings, unpacked, walk_bindings
from torchdev_lint.analysis.syntax.loops import bound_in
from torchdev_lint.analysis.syntax.scopes import Scope, collect_bindings

CODE = textwrap.dedent(
    """
    import os.path, a.b as c
    from . import x as y
    v = w = 1
    a.b[0], *rest = pair
    q: int
    for i, (j, k) in items:
        with open(f) as fh, lock():
            del m
        def f(inner=(d := 1)):
            hidden = 1
        class C:
            attr = 1
        fn = lambda: (lam := 1)
    try:
        pass
    except E as err:
        global G
    match value:
        case 1:
            matched = 3
    n = [(u := 1) for t in s]
    total += 1
    """
)


def _kinds_and_targets(module: cst.Module, **options: bool) -> list[tuple[str, str]]:
    return [(b.kind, module.code_for_node(b.target)) for b in walk_bindings(module.body, **options)]


def test_every_kind_in_source_order() -> None:
    module = cst.parse_module(CODE)
    assert _kinds_and_targets(module) == [
        ("import", "os"),
        ("import", "c"),
        ("import", "y"),
        ("assign", "v"),
        ("assign", "w"),
        ("assign", "a.b[0], *rest"),
        ("annotation", "q"),
        ("for", "i, (j, k)"),
        ("with", "fh"),
        ("del", "m"),
        ("def", "f"),
        ("class", "C"),
        ("assign", "fn"),
        ("except", "err"),
        ("global", "G"),
        ("assign", "matched"),
        ("assign", "n"),
        ("walrus", "u"),
        ("comprehension", "t"),
        ("aug-assign", "total"),
    ]


def test_statements_only_leave_expressions_out() -> None:
    found = _kinds_and_targets(cst.parse_module(CODE), expressions=False)
    assert ("walrus", "u") not in found and ("comprehension", "t") not in found
    assert ("assign", "n") in found and ("with", "fh") in found and ("except", "err") in found


def test_nested_scopes_on_request() -> None:
    module = cst.parse_module(CODE)
    nested = _kinds_and_targets(module, nested_scopes=True)
    assert {("assign", "hidden"), ("assign", "attr"), ("walrus", "d"), ("walrus", "lam")} <= set(nested)
    assert not {"hidden", "attr", "d", "lam"} & {target for _, target in _kinds_and_targets(module)}


def test_values_imports_and_unpacking() -> None:
    module = cst.parse_module("import a.b as c\nx = y = f()\nz: int\n(p, [q.r, *s[0]]) = t\n")
    imported, x, y, z, unpack = (b for statement in module.body for b in own_bindings(statement.body[0]))
    assert imported.alias is not None and module.code_for_node(imported.alias.name) == "a.b"
    assert x.value is y.value and isinstance(x.value, cst.Call)
    assert z.value is None
    assert [module.code_for_node(t) for t in unpacked(unpack.target)] == ["p", "q.r", "s[0]"]


def test_scope_table_from_the_walker() -> None:
    module = cst.parse_module(CODE)
    scope = Scope(module, "module", None)
    collect_bindings(scope, module.body)
    assert scope.bindings["os"][0].import_target == "os"
    assert scope.bindings["c"][0].import_target == "a.b"
    assert scope.bindings["y"][0].import_target == "..x"
    assert scope.bindings["v"][0].value is None  # `v = w = 1`: not a single plain assignment
    assert "rest" in scope.bindings and "u" not in scope.bindings and "hidden" not in scope.bindings
    assert scope.globals == {"G"}


def test_loop_rebinding_reads_subscripts_and_attributes() -> None:
    module = cst.parse_module("buf[i] = v\nself.total += 1\nq: int\nimport os.path\ndef g(): inner = 1\n")
    assert bound_in(module.body) == frozenset({"buf", "self.total", "os", "g"})
