"""What project functions return: host data by construction, within a file and across files.

`torch.save(table, f"{out}/f0_{rank}.pt")` writes host data when `table` is filled item by
item from `features(p)` and `features` returns `torch.from_numpy(...)`, perhaps through
project functions of other files. Whether a call returns host data is a fact of its callee:
pass 1 records, for each function, the condition under which its return value is host data
(`host_values.host_condition`: the callees whose return values must be host data too), and
the project's summaries decide it, to a least fixed point (starting from none, so recursion
alone proves nothing; a callee outside the project, or in a file not read, is not known).

- `ReturnedValues`: the summary field `returns` (pass 1, `summaries._Collector`):
  `{"f": [reference, ...]}` for each module-level function and method whose return value
  is host data under that condition (an empty list: by itself); absent: not known. The
  condition's keys are those of `host_facts.PassOneFacts` (a callee reference, or another fact
  of the project).
- `function_condition`, `returns_of`: a function's condition, in pass 1 and in a file's check
  (`host_facts.FileHostFacts` judges the file's own functions on demand).
- `summary_fact`: a condition as the summaries keep it (`saved_files` too).

The propagation over the project's summaries is LibCST-free, in `load_facts`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import libcst as cst

from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name
from torchdev_lint.analysis.syntax.walk import children
from torchdev_lint.analysis.values.host_values import HOST, Condition, HostFacts, all_of, host_condition

Reference = list[Any]
# Nodes whose `return`/`yield` belong to another function.
_NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
# Decorators that leave what the function returns as it is.
_TRANSPARENT = frozenset(
    {
        "staticmethod",
        "classmethod",
        "property",
        "cached_property",
        "cache",
        "lru_cache",
        "no_grad",
        "inference_mode",
    }
)


class ReturnedValues:
    """The `return` statements of a file's functions, noted as the traversal passes."""

    def __init__(self, facts: HostFacts) -> None:
        self._facts = facts
        self._found: dict[str, list[tuple[cst.Return, Scope]]] = {}

    def note(self, node: cst.Return, scope: Scope) -> None:
        """A `return` of the function whose scope is `scope`."""
        qualname = _qualname(scope)
        if qualname is not None:
            self._found.setdefault(qualname, []).append((node, scope))

    def summary(
        self, functions: Iterable[tuple[str, cst.FunctionDef]], generators: set[str]
    ) -> dict[str, Any]:
        """The `returns` field: each function's condition, when it has one."""
        found = {}
        for qualname, function in functions:
            returns = self._found.get(qualname, [])
            condition = function_condition(function, returns, qualname in generators, self._facts)
            if condition is not None:
                found[qualname] = [json.loads(key) for key in sorted(condition)]
        return found


def function_condition(
    function: cst.FunctionDef, returns: list[tuple[cst.Return, Scope]], generator: bool, facts: HostFacts
) -> Condition | None:
    """The condition under which what `function` returns is host data: every `return` is.
    None when it returns no value, or a generator or coroutine, or has a decorator that may
    change what it returns."""
    if not returns or generator or function.asynchronous is not None:
        return None
    if not all(_transparent(decorator) for decorator in function.decorators):
        return None
    return all_of(
        host_condition(node.value, scope, facts, attributes=False) if node.value is not None else HOST
        for node, scope in returns
    )


def _qualname(scope: Scope) -> str | None:
    """`f` or `Class.f` for a module-level function or a method of a module-level class."""
    if scope.kind != "function" or scope.parent is None or not isinstance(scope.node, cst.FunctionDef):
        return None
    name = scope.node.name.value
    if scope.parent.kind == "module":
        return name
    klass = scope.parent
    if klass.kind == "class" and klass.parent is not None and klass.parent.kind == "module":
        assert isinstance(klass.node, cst.ClassDef)
        return f"{klass.node.name.value}.{name}"
    return None


def _transparent(decorator: cst.Decorator) -> bool:
    expression = decorator.decorator
    text = dotted_name(expression.func if isinstance(expression, cst.Call) else expression)
    return text is not None and text.rsplit(".", 1)[-1] in _TRANSPARENT


def summary_fact(condition: Condition | None) -> bool | list[Reference]:
    """A condition as the summaries keep it: True (host data), False (not known), or the
    references whose return values must be host data."""
    if condition is None or condition == HOST:
        return condition is not None
    return [json.loads(key) for key in sorted(condition)]


def returns_of(function: cst.FunctionDef) -> tuple[list[cst.Return], bool]:
    """The function's own `return` statements, and whether it is a generator."""
    returns, generator, stack = [], False, list(children(function.body))
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Return):
            returns.append(node)
        generator = generator or isinstance(node, cst.Yield)
        if not isinstance(node, _NESTED):
            stack.extend(children(node))
    return returns, generator
