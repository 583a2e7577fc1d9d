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
- `known_calls`: a file's check's view of a call: what its `FileFacts` say.

The propagation over the project's summaries is LibCST-free, in `load_facts`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdev_lint.analysis.host_values import HOST, Calls, Condition, all_of, host_condition
from torchdev_lint.analysis.scopes import Scope, dotted_name

if TYPE_CHECKING:
    from torchdev_lint.analysis.project_facts import FileFacts

Reference = list[Any]
References = Callable[[str, Scope], Reference | None]
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
            returns = self._found.get(qualname)
            if not returns or qualname in generators or function.asynchronous is not None:
                continue  # no value returned, or calling it returns a generator or coroutine
            if not all(_transparent(decorator) for decorator in function.decorators):
                continue
            condition = all_of(
                host_condition(node.value, scope, self._calls) if node.value is not None else HOST
                for node, scope in returns
            )
            if condition is not None:
                found[qualname] = [json.loads(key) for key in sorted(condition)]
        return found


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


def known_calls(facts: FileFacts | None) -> Calls | None:
    """A file's check: a call returns host data when the project facts say its callee does
    (the callee written as a name of the module, an import, `self.f` or `cls.f`)."""
    if facts is None or not facts.host_returns:
        return None
    host = facts.host_returns

    def calls(call: cst.Call, scope: Scope) -> Condition | None:
        text = dotted_name(call.func)
        if text is None or text not in host:
            return None
        head = text.split(".", 1)[0]
        found = scope.lookup(head)
        return HOST if head in ("self", "cls") or (found is not None and found[0].kind == "module") else None

    return calls
