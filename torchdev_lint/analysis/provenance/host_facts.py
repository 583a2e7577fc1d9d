"""The project's facts a host-data judgement needs (`host_values.HostFacts`), as pass 1 and a
file's check know them.

Whether `torch.save(L.as_dict(), d / "L.pt")` writes host data can depend on other files: `L`
is what a project function returns; `k2.arc_sort(...)` is k2's only if the `k2` that
`from . import k2` binds is the third-party module its package's `__init__` imports (speechbrain);
`k2.Fsa.from_dict(torch.load(d / "L.pt"))` is host data when the project writes `L.pt` only
from host memory.

- `PassOneFacts` (pass 1, one file's summary): none of that is known yet, so each answer is a
  condition the project's summaries decide later (`load_facts`, LibCST-free): a callee
  reference (it returns host data), `["external", level, dotted, library]` (that import names
  the third-party module `library`), `["loaded", shape]` (the project saves the path only from
  host memory: a second-order fact, decided in the same least fixed point).
- `FileHostFacts` (a file's check): the file's own functions judged on demand, the rest as
  its `FileFacts` say (`host_returns`, `external_modules`, `host_saved`). Without facts (a file
  alone, flake8 without a cache) only the file's own functions are known: never a guess.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import libcst as cst

from torchdev_lint.analysis.knowledge.library_models import value_libraries
from torchdev_lint.analysis.provenance.load_facts import EXTERNAL, LOADED, local_key
from torchdev_lint.analysis.provenance.returned_values import function_condition, returns_of
from torchdev_lint.analysis.provenance.saved_files import distinctive, path_shape
from torchdev_lint.analysis.syntax.scopes import Scope, block_statements, dotted_name, open_scope
from torchdev_lint.analysis.values.host_values import HOST, Condition

if TYPE_CHECKING:
    from torchdev_lint.analysis.project.file_facts import FileFacts

References = Callable[[str, Scope], list[Any] | None]


class PassOneFacts:
    """Pass 1's answers: conditions on the project (see the module doc)."""

    def __init__(self, references: References) -> None:
        self._references = references

    def returns(self, call: cst.Call, scope: Scope) -> Condition | None:
        """A call of a project function (a callee `references` knows) waits on its callee."""
        text = dotted_name(call.func)
        reference = self._references(text, scope) if text is not None else None
        return frozenset({json.dumps(reference)}) if reference is not None else None

    def libraries(self, head: str, scope: Scope) -> Iterable[tuple[str, Condition]]:
        """A name bound only by `from <project package> import name`: any library the tables
        know, on the condition that the import names it."""
        found = scope.lookup(head)
        if found is None or len(found[1]) != 1 or not isinstance(found[1][0].node, cst.ImportFrom):
            return ()
        reference = self._references(head, scope)
        if reference is None or reference[0] != "module":
            return ()
        return [
            (library, frozenset({json.dumps([EXTERNAL, reference[1], reference[2], library])}))
            for library in value_libraries()
        ]

    def loaded(self, path: cst.BaseExpression, scope: Scope) -> Condition | None:
        shape = path_shape(path, scope, self._references)
        return frozenset({json.dumps([LOADED, shape])}) if distinctive(shape) else None


class FileHostFacts:
    """A file's check: a call returns host data when its callee is a function of the file whose
    every `return` is host data (judged on demand, through the file's other functions), or an
    imported function the project facts say returns host data; the rest as `FileFacts` say."""

    def __init__(self, module: Scope, facts: FileFacts | None) -> None:
        self._module = module
        self._facts = facts
        self._judged: dict[int, Condition | None] = {}

    def returns(self, call: cst.Call, scope: Scope) -> Condition | None:
        text = dotted_name(call.func)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        found = self._function(head, rest, scope)
        if found is not None:
            return self._returns(*found)
        if self._facts is None or self._import(head, scope) is None:
            return None
        return HOST if text in self._facts.host_returns else None

    def libraries(self, head: str, scope: Scope) -> Iterable[tuple[str, Condition]]:
        if self._facts is None or not isinstance(self._import(head, scope), cst.ImportFrom):
            return ()  # `import k2` itself: the name resolves to the module already
        modules = self._facts.external_modules  # looked up member by member (the runner records them)
        return [(library, HOST) for library in value_libraries() if (head, library) in modules]

    def loaded(self, path: cst.BaseExpression, scope: Scope) -> Condition | None:
        known = self._facts is not None and local_key(path_shape(path, scope)) in self._facts.host_saved
        return HOST if known else None

    def _import(self, head: str, scope: Scope) -> cst.CSTNode | None:
        """The import statement binding `head` where it is used, when it is one at module level."""
        bound = scope.lookup(head)
        if bound is None or bound[0].kind != "module" or bound[1][0].import_target is None:
            return None
        return bound[1][0].node

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
            returns, generator = returns_of(function)
            if scope is not None:
                self._judged[id(function)] = function_condition(
                    function, [(node, scope) for node in returns], generator, self
                )
        return self._judged[id(function)]
