"""Loop context: which loops enclose a node, what a loop (re)binds, hoisting out of it.

Performance rules ask whether work inside a loop body repeats needlessly; that
depends on what changes from one iteration to the next, i.e. on the names the
loop binds. Everything here is syntactic and per loop, cached by node identity.
Whether a move repeats unchanged on every iteration is in `invariant_moves`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import libcst as cst

from torchdev_lint.analysis.syntax.bindings import unpacked, walk_bindings
from torchdev_lint.analysis.syntax.scopes import dotted_name
from torchdev_lint.analysis.syntax.walk import children, visit

Loop = cst.For | cst.While
# Exact node types (LibCST's are final): `type(node) in` a set costs far less than `isinstance`
# with LibCST's abstract base classes, and `enclosing_loops` runs for most calls of a file.
_SCOPE_TYPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_LOOP_TYPES = frozenset({cst.For, cst.While})
# Per loop (LibCST nodes hash and compare by identity); bounded, as no file context is at hand here.
_bound_cache: dict[Loop, frozenset[str]] = {}


def enclosing_loops(ancestors: Sequence[cst.CSTNode]) -> list[Loop]:
    """Loops whose *body* holds the last ancestor, innermost first, within its function.

    A node in a `for` loop's iterable or `else` clause runs once, so that loop
    does not enclose it; the search stops at a function, class or lambda.
    """
    loops: list[Loop] = []
    for index in range(len(ancestors) - 2, -1, -1):
        node = ancestors[index]
        kind = type(node)
        if kind in _SCOPE_TYPES:
            break
        if (
            kind in _LOOP_TYPES
            and isinstance(node, (cst.For, cst.While))
            and ancestors[index + 1] is node.body
        ):
            loops.append(node)
    return loops


def innermost_loop(ancestors: Sequence[cst.CSTNode]) -> Loop | None:
    loops = enclosing_loops(ancestors)
    return loops[0] if loops else None


def path_inside(ancestors: Sequence[cst.CSTNode], loop: cst.CSTNode) -> list[cst.CSTNode]:
    """The ancestors strictly below `loop` (outermost first)."""
    for index, node in enumerate(ancestors):
        if node is loop:
            return list(ancestors[index + 1 :])
    return []


def is_conditional_in(ancestors: Sequence[cst.CSTNode], loop: cst.CSTNode) -> bool:
    """Does the last ancestor run only on some iterations (inside an `if`/`try`/`with`... body)?

    An `if` test runs every iteration, its branches do not; exception handlers
    likewise. Nested loops count as conditional too (they may run zero times).
    """
    below = path_inside(ancestors, loop)
    for node, child in zip(below, below[1:], strict=False):
        if isinstance(node, cst.If) and child is not node.test:
            return True
        if isinstance(node, (cst.Try, cst.TryStar, cst.ExceptHandler, cst.Match, cst.For, cst.While)):
            if not (isinstance(node, (cst.For, cst.While)) and child is getattr(node, "iter", None)):
                return True
        if isinstance(node, cst.IfExp) and child is not node.test:
            return True
        if isinstance(node, cst.BooleanOperation) and child is node.right:
            return True
    return False


def target_names(target: cst.BaseExpression) -> frozenset[str]:
    """Names a `for` target binds (`x`, `(i, (x, y))`, `*rest`)."""
    return frozenset(single.value for single in unpacked(target) if isinstance(single, cst.Name))


def comprehension_targets(nodes: Sequence[cst.CSTNode]) -> frozenset[str]:
    """Names bound by the comprehensions among `nodes` (`v` in `{k: v.to(d) for k, v in ...}`)."""
    names: frozenset[str] = frozenset()
    for node in nodes:
        if isinstance(node, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            comp: cst.CompFor | None = node.for_in
            while comp is not None:
                names |= target_names(comp.target)
                comp = comp.inner_for_in
    return names


def loop_target_names(loop: Loop) -> frozenset[str]:
    return target_names(loop.target) if isinstance(loop, cst.For) else frozenset()


# Bindings that do not rebind a name of the statements' own scope (or, for a bare annotation, bind nothing).
_NOT_REBINDING = frozenset({"comprehension", "global", "nonlocal"})


def _rebound(statements: Iterable[cst.CSTNode]) -> frozenset[str]:
    """Dotted names the statements (re)bind, nested scopes left out; `buf[i] = v` rebinds `buf`."""
    names: set[str] = set()
    for bound in walk_bindings(statements):
        if bound.kind in _NOT_REBINDING or (bound.kind == "annotation" and bound.value is None):
            continue
        for target in unpacked(bound.target):
            while isinstance(target, cst.Subscript):
                target = target.value  # `buf[i] = v` changes buf's contents
            name = dotted_name(target)
            if name is not None:
                names.add(name)
    return frozenset(names)


def bound_in_body(loop: Loop) -> frozenset[str]:
    """Dotted names assigned anywhere in the loop body (not counting the loop's own target)."""
    names = _bound_cache.get(loop)
    if names is None:
        if len(_bound_cache) > 4096:
            _bound_cache.clear()
        names = _bound_cache[loop] = _rebound([loop.body])
    return names


def bound_in(statements: Sequence[cst.CSTNode]) -> frozenset[str]:
    """Dotted names the statements assign (not entering nested scopes)."""
    return _rebound(statements)


def loop_bound_names(loop: Loop) -> frozenset[str]:
    """Every dotted name that may differ between iterations: the target and body assignments."""
    return loop_target_names(loop) | bound_in_body(loop)


def names_in(node: cst.CSTNode) -> set[str]:
    """Dotted names read by an expression: `a`, `a.b`, with every prefix (`a` for `a.b`)."""
    found: set[str] = set()
    stack = [node]  # one pass of the walker's child lists, no visitor dispatch
    pop, extend = stack.pop, stack.extend
    while stack:
        current = pop()
        if type(current) is cst.Name:
            found.add(current.value)
        elif type(current) is cst.Attribute:
            name = dotted_name(current)
            if name is None:
                stack.append(current.value)  # `f().x`: the `x` is no name read
                continue
            parts = name.split(".")
            found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        else:
            extend(children(current))
    return found


def depends_on(node: cst.CSTNode, names: frozenset[str] | set[str]) -> bool:
    """Does the expression read any of `names` (a dotted name counts through its prefixes)?"""
    read = names_in(node)
    return any(name in read for name in names)


def hoist(loop: Loop, statement: cst.BaseStatement) -> cst.FlattenSentinel[cst.BaseStatement]:
    """`statement` moved out of the loop body, placed just before the loop.

    Every comment moves with the code it sits next to: the statement takes its
    own comment lines along, the loop keeps the comments above it. An emptied
    body gets `pass`.
    """
    body = loop.body
    assert isinstance(body, cst.IndentedBlock)
    remaining = [s for s in body.body if s is not statement]
    if not remaining:
        remaining = [cst.SimpleStatementLine(body=[cst.Pass()])]
    return insert_before(loop.with_changes(body=body.with_changes(body=remaining)), statement)


def insert_before(loop: Loop, statement: cst.BaseStatement) -> cst.FlattenSentinel[cst.BaseStatement]:
    """`statement` placed just before `loop`, taking the blank lines above the loop.

    The statement keeps its own comment lines; the comments above the loop stay
    with the loop.
    """
    lines = list(loop.leading_lines)
    blank = 0
    while blank < len(lines) and lines[blank].comment is None:
        blank += 1
    assert isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement))  # all statements
    own = list(statement.leading_lines)
    while own and own[0].comment is None:
        own.pop(0)
    placed = statement.with_changes(leading_lines=[*lines[:blank], *own])
    return cst.FlattenSentinel([placed, loop.with_changes(leading_lines=lines[blank:])])


def body_statement(ancestors: Sequence[cst.CSTNode], loop: Loop) -> cst.BaseStatement | None:
    """The statement directly in `loop`'s body that holds the last ancestor, if any."""
    below = path_inside(ancestors, loop)
    if len(below) >= 2 and below[0] is loop.body and isinstance(below[1], cst.BaseStatement):
        return below[1]
    return None


def statements_before(loop: Loop, statement: cst.BaseStatement) -> list[cst.BaseStatement]:
    body = loop.body
    if not isinstance(body, cst.IndentedBlock):
        return []
    result = []
    for item in body.body:
        if item is statement:
            break
        result.append(item)
    return result


_all_calls_cache: dict[Loop, list[cst.Call]] = {}


def calls_in(loop: Loop) -> list[cst.Call]:
    """Every call in the loop body in source order, nested scopes excluded."""
    calls = _all_calls_cache.get(loop)
    if calls is None:
        if len(_all_calls_cache) > 4096:
            _all_calls_cache.clear()
        calls = _all_calls_cache[loop] = []
        stack: list[cst.CSTNode] = [loop.body]  # one pass of the walker's child lists, in source order
        pop, extend = stack.pop, stack.extend
        while stack:
            node = pop()
            if type(node) is cst.Call:
                calls.append(node)
            elif type(node) is cst.FunctionDef or type(node) is cst.Lambda:
                continue
            extend(reversed(children(node)))
    return calls


def iteration_calls(loop: Loop) -> list[cst.Call]:
    """The calls one iteration runs itself: the loop body's calls outside its nested loops (and
    nested scopes). An epoch loop whose inner loop trains does not train once per iteration."""
    found = []
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call:
            found.append(node)
        elif type(node) in (cst.FunctionDef, cst.Lambda, cst.For, cst.While):
            continue
        stack.extend(reversed(children(node)))
    return found


def used_outside_loop(ancestors: Sequence[cst.CSTNode], loop: Loop, name: str) -> bool:
    """Is `name` read or bound anywhere in the enclosing function other than in `loop`?"""
    function = next((a for a in reversed(ancestors) if isinstance(a, cst.FunctionDef)), ancestors[0])
    total = count_name(function, name)
    inside = count_name(loop, name)
    return total != inside or name in bound_in_body(loop)


def count_name(node: cst.CSTNode, name: str) -> int:
    """How often the name `name` appears under `node` (read, bound or declared; nested scopes too)."""
    counter = _NameCounter(name)
    visit(node, counter)
    return counter.count


class _NameCounter(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0

    def visit_Name(self, node: cst.Name) -> None:
        self.count += node.value == self.name
