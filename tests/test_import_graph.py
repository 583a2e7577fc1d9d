"""The package's modules import each other without cycles (ARCHITECTURE.md, "No cycles").

The graph is built from the sources with `ast`, not by importing: every
`import`/`from ... import` at any nesting level counts, including those inside
functions, because a deferred import is still a dependency (it only hides the
cycle from the interpreter until the function runs). Imports under
`if TYPE_CHECKING:` are left out: they never run, and annotations naming a
higher module (a rule's `ctx: FileContext`) do not make the lower one depend on
its behaviour. `from package import name` is an edge to `package.name` when that
is a module, else to `package`. Importing `a.b.c` also runs `a/__init__` and
`a/b/__init__`; those implicit edges to parent packages are left out (the
package `__init__` files import nothing of the package), so that a cycle found
here is one written in the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "torchdev_lint"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def _module_names() -> dict[str, Path]:
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module name -> the package's modules it imports."""
    modules = _module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path `a -> b -> ... -> a`, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


def test_graph_sees_imports_inside_functions_and_skips_type_checking() -> None:
    graph = import_graph()
    assert "torchdev_lint.runner" in graph["torchdev_lint.cli"]
    # rule.py imports the rules package inside `all_rules`, and FileContext only under TYPE_CHECKING.
    assert "torchdev_lint.rules" in graph["torchdev_lint.rule"]
    assert "torchdev_lint.engine" not in graph["torchdev_lint.rule"]


def test_find_cycle_reports_the_path() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
