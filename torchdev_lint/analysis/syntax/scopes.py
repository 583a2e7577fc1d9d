"""Scopes and name resolution, built in the engine's own single pass.

Each scope's bindings are collected when the traversal enters it, by the
binding walker (`bindings.walk_bindings`) over its statements only (not its
expressions), which is far cheaper than LibCST's ScopeProvider/QualifiedNameProvider. Resolution follows Python's
rules closely enough for linting: a name bound in a function shadows an
import of the same name, class bodies are skipped by nested functions, and a
name bound several ways resolves only when every binding agrees.
"""

from __future__ import annotations

import builtins
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from torchdev_lint.analysis.syntax.bindings import Bound, paired_elements, unpacked, walk_bindings

BUILTIN_NAMES = frozenset(dir(builtins))
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
# Bindings whose value is unknown here: a loop or `with` target, an exception, `x += v`.
_OPAQUE_TARGETS = frozenset({"for", "with", "except", "aug-assign"})
_MAX_ALIAS_DEPTH = 8
_TYPE_CHECKING = frozenset({"TYPE_CHECKING", "typing.TYPE_CHECKING"})


@dataclass(frozen=True)
class Binding:
    """One way a name gets a value in a scope.

    `import_target` is the dotted name an import binds (``torch.load``);
    `value` is the right-hand side of a plain ``name = value``; a binding
    with neither (a parameter, a loop target, a def) is opaque.
    """

    import_target: str | None = None
    value: cst.BaseExpression | None = None
    node: cst.CSTNode | None = None


class Scope:
    """A module, class, function, lambda or comprehension scope."""

    def __init__(self, node: cst.CSTNode, kind: str, parent: Scope | None) -> None:
        self.node = node
        self.kind = kind
        self.parent = parent
        self.bindings: dict[str, list[Binding]] = defaultdict(list)
        self.globals: set[str] = set()
        # Uses seen during the traversal, keyed by dotted receiver (`model`,
        # `self.model`): method calls `key.attr(...)` and direct calls `key(...)`.
        self.method_calls: dict[str, list[tuple[str, cst.Call]]] = defaultdict(list)
        self.calls: dict[str, list[cst.Call]] = defaultdict(list)
        # What `resolve` found here, by name and by node (id -> the node, kept alive so that its
        # id is not reused, and its name): rules ask the same names and the same call's callee
        # many times. Sound since a scope's bindings are all collected when it opens, before any
        # use in it or in a scope nested in it is resolved; `bind` forgets them all the same.
        self._names: dict[str, str | None] = {}
        self._nodes: dict[int, tuple[cst.BaseExpression, str | None]] = {}
        self._opened: dict[int, tuple[cst.CSTNode, Scope | None]] = {}  # `opened`, by node id

    def opened(self, node: cst.CSTNode) -> Scope | None:
        """`open_scope(node, self)`, made once (the node kept alive so that its id is not reused):
        analyses that follow a value into a method ask for the same method's scope many times."""
        found = self._opened.get(id(node))
        if found is None:
            found = self._opened[id(node)] = (node, open_scope(node, self))
        return found[1]

    @property
    def owner(self) -> Scope:
        """The scope that records uses: comprehensions and lambdas see their enclosing one."""
        scope = self
        while scope.kind in ("comprehension", "lambda") and scope.parent is not None:
            scope = scope.parent
        return scope

    @property
    def enclosing_class(self) -> Scope | None:
        """The innermost class scope around this one (itself when it is a class), if any."""
        scope: Scope | None = self
        while scope is not None and scope.kind != "class":
            scope = scope.parent
        return scope

    @property
    def module(self) -> Scope:
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def bind(self, name: str, binding: Binding) -> None:
        self.bindings[name].append(binding)
        if self._nodes or self._names:
            self._nodes.clear()
            self._names.clear()

    def lookup(self, name: str) -> tuple[Scope, list[Binding]] | None:
        """The bindings that a use of `name` in this scope sees, with their scope."""
        scope: Scope | None = self
        innermost = True
        while scope is not None:
            if name in scope.globals:
                scope = scope.module
            if (innermost or scope.kind != "class") and name in scope.bindings:
                return scope, scope.bindings[name]
            innermost = False
            scope = scope.parent
        return None


def last_name(node: cst.BaseExpression) -> str | None:
    """The name an expression ends in: `init` for `dist.init` or `init`, `dtype` for `batch["x"].dtype`."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return node.value if isinstance(node, cst.Name) else None


def dotted_name(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    # Exact types, not isinstance: LibCST's node classes are ABCs, whose isinstance misses are
    # slow, and no node class derives from Attribute or Name.
    if type(node) is cst.Name:
        return node.value
    parts: list[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def resolve(node: cst.BaseExpression, scope: Scope, depth: int = 0) -> str | None:
    """The fully qualified name an expression refers to, or None when unknown.

    `T.load` with `import torch as T` gives `torch.load`; a local definition
    shadowing an import gives None; a plain alias `DL = torch.utils.data.DataLoader`
    is followed.
    """
    if depth:
        return _resolve(node, scope, depth)
    known = scope._nodes.get(id(node))
    if known is not None and known[0] is node:
        return known[1]
    found = _resolve(node, scope, 0)
    scope._nodes[id(node)] = (node, found)
    return found


def _resolve(node: cst.BaseExpression, scope: Scope, depth: int) -> str | None:
    if type(node) is cst.Attribute:
        base = _resolve(node.value, scope, depth)
        return None if base is None else f"{base}.{node.attr.value}"
    if type(node) is not cst.Name:
        return None
    if depth:
        return _resolve_name(node.value, scope, depth)
    names = scope._names
    if node.value not in names:
        names[node.value] = _resolve_name(node.value, scope, 0)
    return names[node.value]


def _resolve_name(name: str, scope: Scope, depth: int) -> str | None:
    found = scope.lookup(name)
    if found is None:
        return f"builtins.{name}" if name in BUILTIN_NAMES else None
    owner, bindings = found
    # Stop at the first binding that is unknown or disagrees: each binding's value may name the
    # same name again (`df = df.reindex(...)` ten times), and resolving them all at every level
    # of aliases costs bindings ** depth.
    target = None
    for binding in bindings:
        found_target = _binding_target(binding, owner, depth)
        if found_target is None or (target is not None and found_target != target):
            return None
        target = found_target
    return target


def module_reference(scope: Scope, module: str) -> cst.Name | None:
    """A name that refers to `module` (e.g. ``torch``) from `scope`, for fixes that write new code.

    Prefers the module's own name when it resolves there (``torch``), else an
    alias imported at module level (``import torch as T`` gives ``T``).
    """
    checking_only = _type_checking_imports(scope.module.node)
    for name in (module, *scope.module.bindings):
        bindings = scope.module.bindings.get(name, [])
        if name != module and not all(b.import_target == module for b in bindings):
            continue
        if resolve(cst.Name(name), scope) != module:
            continue
        if bindings and all(id(b.node) in checking_only for b in bindings):
            continue  # `if TYPE_CHECKING: import torch`: not bound when the code runs
        return cst.Name(name)
    return None


def _type_checking_imports(module: cst.CSTNode) -> set[int]:
    """The imports the module makes only for type checkers (`if TYPE_CHECKING:` at module level)."""
    found: set[int] = set()
    for statement in getattr(module, "body", ()):
        if not isinstance(statement, cst.If) or dotted_name(statement.test) not in _TYPE_CHECKING:
            continue
        for line in block_statements(statement.body):
            if isinstance(line, cst.SimpleStatementLine):
                found |= {id(small) for small in line.body if isinstance(small, (cst.Import, cst.ImportFrom))}
    return found


def _binding_target(binding: Binding, scope: Scope, depth: int) -> str | None:
    if binding.import_target is not None:
        return binding.import_target
    if binding.value is not None and depth < _MAX_ALIAS_DEPTH:
        if isinstance(binding.value, (cst.Name, cst.Attribute)):
            return resolve(binding.value, scope, depth + 1)
    return None


def assigned_values(node: cst.BaseExpression, scope: Scope) -> tuple[list[cst.BaseExpression], Scope] | None:
    """What every binding of a name assigns, with the scope that binds it.

    None when the expression is not a name, the name is unbound, or any binding
    is opaque (a parameter, a loop target, an import): then its value is unknown.
    """
    if not isinstance(node, cst.Name):
        return None
    found = scope.lookup(node.value)
    if found is None:
        return None
    owner, bindings = found
    values = [b.value for b in bindings if b.value is not None]
    if not values or len(values) != len(bindings):
        return None
    return values, owner


def open_scope(node: cst.CSTNode, parent: Scope) -> Scope | None:
    """The scope `node` opens inside `parent`, with its bindings; None for a node that opens none."""
    kind = type(node)
    if kind is cst.FunctionDef or kind is cst.Lambda:
        scope = Scope(node, "function" if kind is cst.FunctionDef else "lambda", parent)
        collect_function_bindings(scope, node)  # type: ignore[arg-type]
    elif kind is cst.ClassDef:
        scope = Scope(node, "class", parent)
        collect_bindings(scope, node.body.body)  # type: ignore[attr-defined]
    elif kind in COMPREHENSIONS:
        scope = Scope(node, "comprehension", parent)
        collect_comprehension_bindings(scope, node)  # type: ignore[arg-type]
    else:
        return None
    return scope


class EnclosingScopes:
    """The scope names at a node resolve in, for an analysis that walks a module with a parent map
    of its own rather than the engine's scopes: the module's, or the scopes of the functions around
    the node when one of them imports (`def main(): import torch`, told by `note_import`), each
    made once."""

    def __init__(self, module: Scope, parents: dict[int, cst.CSTNode]) -> None:
        self._module = module
        self._parents = parents
        self._importing: set[int] = set()  # ids of the functions that import
        self._imported: set[str] = set()  # the names their imports bind
        self._scopes: dict[int, Scope] = {}
        self._function_of: dict[int, cst.FunctionDef | None] = {}

    def note_import(self, statement: cst.Import | cst.ImportFrom, functions: Iterable[int]) -> None:
        """An import statement inside the functions (ids) around it, outermost first."""
        found = set(functions)
        if found:
            self._importing |= found
            self._imported.update(
                b.target.value for b in walk_bindings([statement]) if isinstance(b.target, cst.Name)
            )

    def at(self, node: cst.CSTNode, head: str | None = None) -> Scope:
        """The scope at `node`; with `head`, for a name only (the module's unless a function imports it)."""
        if not self._importing or (head is not None and head not in self._imported):
            return self._module
        function = self._innermost_function(node)
        if function is None:
            return self._module
        scope = self._scopes.get(id(function))
        if scope is None:
            outer = self.at(function)
            if id(function) in self._importing or outer is not self._module:
                scope = open_scope(function, outer) or outer
            else:
                scope = self._module
            self._scopes[id(function)] = scope
        return scope

    def _innermost_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The function `node` lies in, memoised along the way up (each node is climbed once)."""
        path = []
        current = node
        while True:
            key = id(current)
            if key in self._function_of:
                found = self._function_of[key]
                break
            path.append(key)
            parent = self._parents.get(key)
            if parent is None or type(parent) is cst.FunctionDef:
                found = parent
                break
            current = parent
        for key in path:
            self._function_of[key] = found
        return found


def parameters(node: cst.FunctionDef | cst.Lambda) -> list[cst.Param]:
    """Every parameter of a function, `*args` and `**kwargs` included."""
    params = node.params
    return [
        *params.posonly_params,
        *params.params,
        *params.kwonly_params,
        *(p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)),
    ]


def collect_function_bindings(scope: Scope, node: cst.FunctionDef | cst.Lambda) -> None:
    for param in parameters(node):
        scope.bind(param.name.value, Binding(node=param))
    if isinstance(node, cst.FunctionDef):
        collect_bindings(scope, block_statements(node.body))


def collect_comprehension_bindings(scope: Scope, node: cst.BaseComp) -> None:
    comp_for: cst.CompFor | None = node.for_in
    while comp_for is not None:
        _bind_target(scope, comp_for.target, None)
        comp_for = comp_for.inner_for_in


def collect_bindings(scope: Scope, statements: Iterable[cst.CSTNode]) -> None:
    """Record every name the statements bind, without entering nested scopes or expressions."""
    for bound in walk_bindings(statements, expressions=False):
        kind = bound.kind
        if kind in _OPAQUE_TARGETS:
            _bind_target(scope, bound.target, None)
        elif kind == "assign":
            single = len(bound.node.targets) == 1  # type: ignore[attr-defined]
            _bind_target(scope, bound.target, bound.value if single else None)
        elif kind == "annotation":
            _bind_target(scope, bound.target, bound.value)
        elif kind == "def" or kind == "class":
            scope.bind(bound.target.value, Binding(node=bound.node))  # type: ignore[attr-defined]
        elif kind == "import":
            _bind_import(scope, bound)
        elif kind == "global":
            scope.globals.add(bound.target.value)  # type: ignore[attr-defined]


def _bind_import(scope: Scope, bound: Bound) -> None:
    alias, statement = bound.alias, bound.node
    assert alias is not None and isinstance(bound.target, cst.Name)
    name = dotted_name(alias.name) or ""
    if isinstance(statement, cst.ImportFrom):
        module = dotted_name(statement.module) if statement.module is not None else ""
        target = "." * len(statement.relative) + (module or "") + f".{name}"
    else:
        target = name if alias.asname is not None else bound.target.value  # `import os.path` binds `os`
    scope.bind(bound.target.value, Binding(import_target=target, node=statement))


def _bind_target(scope: Scope, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
    """The names of `target`; the value goes to a plain name, also element by element from a display
    of as many plain elements (`x, y = x.to(d), y.to(d)`); `a, b = pair` binds opaque names."""
    if isinstance(target, cst.Name):
        scope.bind(target.value, Binding(value=value, node=target))
        return
    pairs = paired_elements(target, value)
    if pairs is not None:
        for element, given in pairs:
            _bind_target(scope, element, given)
        return
    for single in unpacked(target):
        if isinstance(single, cst.Name):
            scope.bind(single.value, Binding(node=single))


def scope_body(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of a module, function or class body (nothing for other nodes)."""
    if isinstance(node, cst.Module):
        return list(node.body)
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return list(block_statements(node.body))
    return []


def block_statements(body: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    """The statements of a suite, an indented block or `if x: a; b` alike."""
    if isinstance(body, cst.IndentedBlock):
        return body.body
    if isinstance(body, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=body.body)] if body.body else []
    return []


def small_statements(statements: Sequence[cst.CSTNode]) -> Iterator[cst.BaseSmallStatement]:
    """Every simple statement of a scope, through compound statements, not into nested scopes."""
    stack = list(reversed(statements))
    while stack:
        statement = stack.pop()
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
        elif isinstance(statement, cst.SimpleStatementSuite):
            yield from statement.body
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        else:
            children: list[cst.CSTNode] = []
            for attr in ("body", "handlers", "orelse", "finalbody", "cases"):
                child = getattr(statement, attr, None)
                if child is None:
                    continue
                if isinstance(child, (list, tuple)):
                    children.extend(child)
                elif isinstance(child, cst.BaseSuite):
                    children.extend(block_statements(child))
                else:
                    children.append(child)  # an `else`/`elif`/`finally` clause
            stack.extend(reversed(children))
