"""The anatomy of a class's methods: `self`, `self.<name>`, `__init__`'s statements, its locals.

Small syntactic questions that rules about nn.Module subclasses ask of a
method: what it calls its instance, which `self.<name>` an expression is,
its statements in order (through `if`/`for`/`with`/`try`), whether a
statement initialises the base module (`super().__init__()`), and the names
a method binds itself.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import places_on_device
from torchdev_lint.analysis.knowledge.library_models import Fact, apis
from torchdev_lint.analysis.syntax.scopes import Scope, block_statements, resolve
from torchdev_lint.analysis.syntax.units import definition_owners, imported_roots, remember
from torchdev_lint.analysis.syntax.walk import children, visit

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


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


# Per class (LibCST nodes hash by identity): each attribute's assignments; bounded, as no file
# context is at hand here (a class's table is asked for once per `self.<attr>` a rule follows).
_tables: dict[cst.ClassDef, dict[str, list[tuple[cst.FunctionDef, cst.BaseExpression]] | None]] = {}
_MAX_TABLES = 256


def attribute_assignments(
    node: cst.ClassDef, attribute: str
) -> list[tuple[cst.FunctionDef, cst.BaseExpression]] | None:
    """Each `self.<attribute> = value` of the class's own methods, with the method; None when the
    class also defines the name itself (`def is_cuda(self)`, a class attribute), whose value is unknown."""
    table = _tables.get(node)
    if table is None:
        if len(_tables) >= _MAX_TABLES:
            _tables.clear()
        table = _tables[node] = _assignment_table(node)
    found = table.get(attribute, [])
    return None if found is None else list(found)


def _assignment_table(
    node: cst.ClassDef,
) -> dict[str, list[tuple[cst.FunctionDef, cst.BaseExpression]] | None]:
    """`attribute_assignments` of every attribute of the class, in one pass over its methods."""
    found: dict[str, list[tuple[cst.FunctionDef, cst.BaseExpression]]] = {}
    unknown: set[str] = set()
    for statement in block_statements(node.body):
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            unknown.add(statement.name.value)
        for assignment in value_assignments(statement):
            for target in _targets(assignment):
                unknown |= _plain_names(target.target)
        if not isinstance(statement, cst.FunctionDef):
            continue
        self_name = instance_name(statement)
        if self_name is None:
            continue
        for line in init_statements(statement.body):
            for assignment in value_assignments(line):
                for target in _targets(assignment):
                    name = self_attribute(target.target, self_name)
                    if name is not None and assignment.value is not None:
                        found.setdefault(name, []).append((statement, assignment.value))
                    elif isinstance(target.target, (cst.Tuple, cst.List)):
                        # `self.is_cuda, self.x = ...`: one part of a value, unknown unless the
                        # value is a library call handing back its arguments placed (see below)
                        parts = [self_attribute(e.value, self_name) for e in target.target.elements]
                        handed = _handed_back(assignment.value, len(parts))
                        for index, part in enumerate(parts):
                            if part is None:
                                continue
                            if handed is None:
                                unknown.add(part)
                            elif self_attribute(handed[index], self_name) != part:
                                found.setdefault(part, []).append((statement, handed[index]))
    table: dict[str, list[tuple[cst.FunctionDef, cst.BaseExpression]] | None] = dict(found)
    table.update(dict.fromkeys(unknown))
    return table


def _handed_back(value: cst.BaseExpression | None, count: int) -> list[cst.BaseExpression] | None:
    """The arguments of `accelerator.prepare(model, loader)` unpacked into `count` parts: the
    library hands back each argument, in order, placed on its device. A part that gets back the
    attribute it is assigned to (`self.dl, ... = prepare(self.dl, ...)`) keeps its other values."""
    if not (
        places_on_device(value)
        and len(value.args) == count
        and all(arg.keyword is None and not arg.star for arg in value.args)
    ):
        return None
    return [arg.value for arg in value.args]


def _targets(assignment: cst.Assign | cst.AnnAssign) -> list[cst.AssignTarget]:
    if isinstance(assignment, cst.Assign):
        return list(assignment.targets)
    return [cst.AssignTarget(target=assignment.target)]


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


def keeps_state_in_param_store(node: cst.ClassDef, scope: Scope, ctx: FileContext) -> bool:
    """A method creates its learnable state with `pyro.param(...)`: Pyro's param store holds it,
    `model.to()` never moves it, so the module runs wherever the default device puts every tensor."""
    stores = apis(Fact.PARAM_STORE)
    if not {name.split(".", 1)[0] for name in stores} & set(imported_roots(ctx)):
        return False  # only an import of the library binds a name that resolves to it (no walk of the class)
    finder = _ParamStoreCalls(scope)
    visit(node.body, finder)
    return finder.found


class _ParamStoreCalls(cst.CSTVisitor):
    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        self.found = self.found or resolve(node.func, self.scope) in apis(Fact.PARAM_STORE)
        return not self.found


def built_only_for_export(class_name: str, ctx: FileContext) -> bool:
    """Every mention of the class in its file is a call inside a function named for export
    (`export_coreml`): a wrapper built to be traced once on the host, never moved to a device."""
    calls = remember(ctx, "calls in export functions", ctx.module, lambda: _export_calls(ctx))
    export_calls = calls[class_name]
    if not export_calls:
        return False  # most files: no export function calls the class, so no count of every name
    names = remember(ctx, "name counts", ctx.module, lambda: _name_counts(ctx.module))
    return names[class_name] == export_calls + 1  # and its `class` line


def _export_calls(ctx: FileContext) -> Counter[str]:
    """How often each name is called inside export functions (a function whose name holds
    `export`, or anything nested in one), from the file's definitions, not a walk of the file."""
    definitions = definition_owners(ctx)
    calls: Counter[str] = Counter()
    for definition in definitions:
        if not (isinstance(definition, cst.FunctionDef) and _exports(definition)):
            continue
        owner = definitions.get(definition)
        while owner is not None and not (isinstance(owner, cst.FunctionDef) and _exports(owner)):
            owner = definitions.get(owner)
        if owner is not None:
            continue  # nested in an export function, whose own walk counts it
        stack: list[cst.CSTNode] = [definition]
        pop, extend = stack.pop, stack.extend
        while stack:
            node = pop()
            if type(node) is cst.Call and isinstance(node.func, cst.Name):
                calls[node.func.value] += 1
            extend(children(node))
    return calls


def _exports(function: cst.FunctionDef) -> bool:
    return "export" in function.name.value.lower()


def _name_counts(module: cst.Module) -> Counter[str]:
    """How often each name occurs in the module: one pass of the walker's child lists, no visitor
    dispatch (this runs on a whole module)."""
    found: list[str] = []  # counted at the end, in one `Counter.update`
    stack: list[cst.CSTNode] = [module]
    pop, extend = stack.pop, stack.extend
    while stack:
        node = pop()
        if type(node) is cst.Name:
            found.append(node.value)
        else:
            extend(children(node))
    return Counter(found)
