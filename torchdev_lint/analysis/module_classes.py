"""The anatomy of a class's methods: `self`, `self.<name>`, `__init__`'s statements, its locals.

Small syntactic questions that rules about nn.Module subclasses ask of a
method: what it calls its instance, which `self.<name>` an expression is,
its statements in order (through `if`/`for`/`with`/`try`), whether a
statement initialises the base module (`super().__init__()`), and the names
a method binds itself.
"""

from __future__ import annotations

from collections import Counter

import libcst as cst

from torchdev_lint.analysis.scopes import Scope, block_statements, resolve
from torchdev_lint.analysis.walk import children, visit

# Creating learnable state in a store of its own, outside the module's parameters.
_PARAM_STORE_CALLS = frozenset({"pyro.param", "pyro.primitives.param"})


def local_names(method: cst.FunctionDef) -> set[str]:
    """The method's parameters and the names it assigns (its inputs and what it derives from them)."""
    params = method.params
    names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            names.add(star.name.value)

    class _Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            names.update(_plain_names(node.target))

        def visit_For(self, node: cst.For) -> None:
            names.update(_plain_names(node.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            names.update(_plain_names(node.target))

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is method

    method.visit(_Targets())
    return names


def _plain_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for element in target.elements for n in _plain_names(element.value)}
    return set()


def instance_name(method: cst.FunctionDef) -> str | None:
    """The name a plain method calls its instance (`self`); None for static and class methods."""
    if any(
        isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod", "classmethod")
        for d in method.decorators
    ):
        return None
    params = method.params.posonly_params or method.params.params
    return params[0].name.value if params else None


def self_attribute(node: cst.BaseExpression, self_name: str) -> str | None:
    """`name` for `self.name`, else None."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == self_name:
        return node.attr.value
    return None


def init_statements(body: cst.BaseSuite) -> list[cst.BaseStatement]:
    """A method's statements in order, those nested in `if`/`for`/`with`/`try` included."""
    found: list[cst.BaseStatement] = []
    for statement in block_statements(body):
        found.append(statement)
        if isinstance(statement, (cst.If, cst.For, cst.While, cst.With, cst.Try)):
            found += init_statements(statement.body)
            orelse = getattr(statement, "orelse", None)
            while orelse is not None:
                found += init_statements(orelse.body)
                orelse = getattr(orelse, "orelse", None)
            if isinstance(statement, cst.Try):
                for handler in statement.handlers:
                    found += init_statements(handler.body)
                if statement.finalbody is not None:
                    found += init_statements(statement.finalbody.body)
    return found


def value_assignments(statement: cst.BaseStatement) -> list[cst.Assign | cst.AnnAssign]:
    """The assignments of a simple statement line that assign a value (`x = v`, `x: T = v`)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    return [
        s
        for s in statement.body
        if isinstance(s, cst.Assign) or (isinstance(s, cst.AnnAssign) and s.value is not None)
    ]


def initialises_module(statement: cst.BaseStatement) -> bool:
    """`super().__init__(...)`, `super(C, self).__init__(...)` or `Base.__init__(self, ...)`."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        value = small.value if isinstance(small, cst.Expr) else None
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "__init__"
        ):
            return True
    return False


def keeps_state_in_param_store(node: cst.ClassDef, scope: Scope) -> bool:
    """A method creates its learnable state with `pyro.param(...)`: Pyro's param store holds it,
    `model.to()` never moves it, so the module runs wherever the default device puts every tensor."""
    module = scope.module.node
    if isinstance(module, cst.Module) and not _name_mentions(module).names["pyro"]:
        return False  # only an import that names `pyro` resolves a call to Pyro (no walk of the class)
    finder = _ParamStoreCalls(scope)
    visit(node.body, finder)
    return finder.found


class _ParamStoreCalls(cst.CSTVisitor):
    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        self.found = self.found or resolve(node.func, self.scope) in _PARAM_STORE_CALLS
        return not self.found


def built_only_for_export(class_name: str, module: cst.Module) -> bool:
    """Every mention of the class in its file is a call inside a function named for export
    (`export_coreml`): a wrapper built to be traced once on the host, never moved to a device."""
    mentions = _name_mentions(module)
    export_calls = mentions.export_calls[class_name]
    return export_calls > 0 and mentions.names[class_name] == export_calls + 1  # and its `class` line


# The last module counted: every module class of a file asks about the same tree.
_counted: list[tuple[cst.Module, _NameMentions]] = []


def _name_mentions(module: cst.Module) -> _NameMentions:
    if _counted and _counted[0][0] is module:
        return _counted[0][1]
    mentions = _NameMentions()
    mentions.count(module)
    _counted[:] = [(module, mentions)]
    return mentions


class _NameMentions:
    """How often each name occurs in a module, and how often it is called inside export functions
    (a function whose name holds `export`, or anything nested in one)."""

    def __init__(self) -> None:
        self.names: Counter[str] = Counter()
        self.export_calls: Counter[str] = Counter()

    def count(self, module: cst.Module) -> None:
        # One pass of the walker's child lists, no visitor dispatch: this runs on a whole module.
        found: list[str] = []  # counted at the end, in one `Counter.update`
        stack: list[cst.CSTNode] = [module]
        pop, extend = stack.pop, stack.extend
        while stack:
            node = pop()
            if type(node) is cst.Name:
                found.append(node.value)
            elif type(node) is cst.FunctionDef and "export" in node.name.value.lower():
                self._count_export(node, found)
            else:
                extend(children(node))
        self.names.update(found)

    def _count_export(self, function: cst.FunctionDef, found: list[str]) -> None:
        stack: list[cst.CSTNode] = [function]
        pop, extend = stack.pop, stack.extend
        while stack:
            node = pop()
            if type(node) is cst.Name:
                found.append(node.value)
                continue
            if type(node) is cst.Call and isinstance(node.func, cst.Name):
                self.export_calls[node.func.value] += 1
            extend(children(node))
