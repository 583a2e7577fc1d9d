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
  is host data under that condition (an empty list: by itself); absent: not known.
- `project_calls`: pass 1's view of a call: a project function's call waits on its callee.
- `summary_fact`: a condition as the summaries keep it (`saved_files` too).
- `FileReturns`: a file's check's view of a call: the file's own functions judged on
  demand, imported ones by what its `FileFacts` say.

The propagation over the project's summaries is LibCST-free, in `load_facts`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdev_lint.analysis.host_values import HOST, Calls, Condition, all_of, host_condition
from torchdev_lint.analysis.scopes import Scope, block_statements, dotted_name, open_scope
from torchdev_lint.analysis.walk import children

if TYPE_CHECKING:
    from torchdev_lint.analysis.project_facts import FileFacts

Reference = list[Any]
References = Callable[[str, Scope], Reference | None]
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


def project_calls(references: References) -> Calls:
    """A call of a project function (any callee written as a name `references` knows) is host
    data when that function returns host data: a condition on its reference."""

    def calls(call: cst.Call, scope: Scope) -> Condition | None:
        text = dotted_name(call.func)
        reference = references(text, scope) if text is not None else None
        return frozenset({json.dumps(reference)}) if reference is not None else None

    return calls


class ReturnedValues:
    """The `return` statements of a file's functions, noted as the traversal passes."""

    def __init__(self, references: References) -> None:
        self._calls = project_calls(references)
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
            condition = function_condition(function, returns, qualname in generators, self._calls)
            if condition is not None:
                found[qualname] = [json.loads(key) for key in sorted(condition)]
        return found


def function_condition(
    function: cst.FunctionDef, returns: list[tuple[cst.Return, Scope]], generator: bool, calls: Calls
) -> Condition | None:
    """The condition under which what `function` returns is host data: every `return` is.
    None when it returns no value, or a generator or coroutine, or has a decorator that may
    change what it returns."""
    if not returns or generator or function.asynchronous is not None:
        return None
    if not all(_transparent(decorator) for decorator in function.decorators):
        return None
    return all_of(
        host_condition(node.value, scope, calls, attributes=False) if node.value is not None else HOST
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


class FileReturns:
    """A file's check: a call returns host data when its callee is a function of the file
    whose every `return` is host data (judged on demand, through the file's other functions),
    or an imported function the project facts (`FileFacts.host_returns`) say returns host data."""

    def __init__(self, module: Scope, facts: FileFacts | None) -> None:
        self._module = module
        self._imported = facts.host_returns if facts is not None else frozenset()
        self._judged: dict[int, Condition | None] = {}

    def __call__(self, call: cst.Call, scope: Scope) -> Condition | None:
        text = dotted_name(call.func)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        found = self._function(head, rest, scope)
        if found is not None:
            return self._returns(*found)
        bound = scope.lookup(head)
        imported = bound is not None and bound[0].kind == "module" and bound[1][0].import_target is not None
        return HOST if imported and text in self._imported else None

    def _function(self, head: str, rest: str, scope: Scope) -> tuple[cst.FunctionDef, Scope] | None:
        """The module-level function (`f`) or method (`self.f`, `cls.f`, `C.f`) a callee names."""
        if head in ("self", "cls"):
            klass = scope.enclosing_class
            node = klass.node if klass is not None and klass.parent is self._module else None
        else:
            bound = scope.lookup(head)
            if bound is None or bound[0] is not self._module or len(bound[1]) != 1:
                return None
            node = bound[1][0].node
        if isinstance(node, cst.FunctionDef) and not rest:
            return node, self._module
        if not isinstance(node, cst.ClassDef) or not rest or "." in rest:
            return None
        methods = [
            m for m in block_statements(node.body) if isinstance(m, cst.FunctionDef) and m.name.value == rest
        ]
        klass_scope = open_scope(node, self._module)
        return (methods[0], klass_scope) if len(methods) == 1 and klass_scope is not None else None

    def _returns(self, function: cst.FunctionDef, parent: Scope) -> Condition | None:
        if id(function) not in self._judged:
            self._judged[id(function)] = None  # a recursion proves nothing
            scope = open_scope(function, parent)
            returns, generator = _returns_of(function)
            if scope is not None:
                self._judged[id(function)] = function_condition(
                    function, [(node, scope) for node in returns], generator, self
                )
        return self._judged[id(function)]


def _returns_of(function: cst.FunctionDef) -> tuple[list[cst.Return], bool]:
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
