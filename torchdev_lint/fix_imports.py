"""Imports a round of fixes leaves unused, removed, so that what the fixer writes passes ruff's F401.

A fix that rewrites `autocast(...)` (from `from torch.cuda.amp import autocast`)
into `torch.amp.autocast("cuda", ...)` may remove the last use of the imported
name. After a round's fixes are applied, an imported name that was used before
them and is used nowhere after them is removed from its import statement, and
the statement with it when no name is left. Use is LibCST's verdict
(`GatherUnusedImportsVisitor`: scope analysis, string annotations, `__all__`),
asked of the text before and after the fixes; a name also spelt as a string
(`getattr(module, "name")`) counts as used.

Left alone: names that were unused before (re-exports), names an import
inserted by a fix binds, `__future__` and `*` imports, `import x as x`
(an explicit re-export), every import of a `try` that catches `ImportError`
(a feature probe), `import a.b` while `a` is still used, and every import of
a package's `__init__.py` or a stub (`imports=False` from the fixer). Layout
is kept: a name leaves with its comma, the line a removed statement stood on
disappears with it (the blank and comment lines above stay, a block left empty
gets `pass`), and an import whose removal would drop a comment on or in it
stays as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper

from torchdev_lint.analysis.syntax.bindings import walk_bindings
from torchdev_lint.analysis.syntax.scopes import dotted_name
from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.syntax import comments

Imports = cst.Import | cst.ImportFrom
# What an `except` clause names that catches a failed import.
_CATCHES_IMPORT_ERROR = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def names_read(nodes: Iterable[object]) -> set[str]:
    """The names the nodes use or bind, attribute and keyword-argument names left out (a fix's
    replacements: statements, expressions, or the sentinels holding them)."""
    found: set[str] = set()
    skipped: set[int] = set()

    def enter(child: cst.CSTNode) -> None:
        if isinstance(child, cst.Attribute):
            skipped.add(id(child.attr))
        elif isinstance(child, cst.Arg) and child.keyword is not None:
            skipped.add(id(child.keyword))
        elif isinstance(child, cst.Name) and id(child) not in skipped:
            found.add(child.value)

    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.FlattenSentinel):
            stack.extend(node.nodes)
        elif isinstance(node, cst.CSTNode):
            walk(node, enter, lambda child: None)
    return found


def imported_names(module: cst.Module) -> set[str]:
    """Every name an import statement anywhere in the module binds."""
    return {
        bound.target.value
        for bound in walk_bindings([module], expressions=False, nested_scopes=True)
        if bound.kind == "import" and isinstance(bound.target, cst.Name)
    }


def _unused(module: cst.Module) -> set[cst.ImportAlias]:
    """The imported names of `module` it does not use (LibCST's scope analysis)."""
    # Imported here: libcst.codemod brings libcst.matchers, whose import costs more than a warm
    # run checking one file; only a fix that removes a use asks.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import GatherUnusedImportsVisitor

    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    wrapper.resolve_many(GatherUnusedImportsVisitor.METADATA_DEPENDENCIES)
    visitor = GatherUnusedImportsVisitor(CodemodContext(wrapper=wrapper))
    module.visit(visitor)
    return {alias for alias, _ in visitor.unused_imports}


def remove_unused_imports(
    before: cst.Module, after: cst.Module, became: dict[int, object], candidates: set[str]
) -> tuple[cst.Module, dict[int, object]] | None:
    """`after` (what fixes made of `before`; `became` maps each node of `before` to what it
    became) without the imports of `candidates` (names the fixes removed uses of) that it no
    longer uses and `before` did; with the map from `after`'s nodes to the result's. None when
    nothing is to be removed."""
    unused_after = [alias for alias in _unused(after) if _bound_name(alias) in candidates]
    if not unused_after:
        return None
    placed = {id(node): original for original, node in became.items() if isinstance(node, cst.ImportAlias)}
    unused_before = {id(alias) for alias in _unused(before)}
    doomed = [
        alias
        for alias in unused_after
        if placed.get(id(alias)) is not None
        and placed[id(alias)] not in unused_before
        and not _explicit_reexport(alias)
    ]
    spelt = _spelt_as_strings(after, {_bound_name(alias) for alias in doomed})
    plan = _plan(after, {id(alias) for alias in doomed if _bound_name(alias) not in spelt})
    if plan.empty:
        return None
    remover = _Remover(plan)
    result = after.visit(remover)
    if comments(result) != comments(after):  # never: the plan keeps every comment; but be sure
        return None
    return result, remover.became


def _bound_name(alias: cst.ImportAlias) -> str:
    """The name an import alias binds: `y` for `x as y`, `a` for `import a.b`."""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return (dotted_name(alias.name) or "").split(".")[0]


def _explicit_reexport(alias: cst.ImportAlias) -> bool:
    """`import x as x`, `from m import x as x`: the conventional mark of a re-export."""
    asname = alias.asname
    return (
        asname is not None
        and isinstance(asname.name, cst.Name)
        and dotted_name(alias.name) == asname.name.value
    )


def _spelt_as_strings(module: cst.Module, names: set[str]) -> set[str]:
    """The names of `names` that a string literal spells (`"autocast"`, `"amp.autocast"`): code
    may look them up by name (`getattr`, `globals()[...]`)."""
    spelt: set[str] = set()
    if not names:
        return spelt

    def enter(node: cst.CSTNode) -> None:
        if isinstance(node, cst.SimpleString):
            head = node.raw_value.split(".")[0]
            if head in names:
                spelt.add(head)

    walk(module, enter, lambda node: None)
    return spelt


@dataclass
class _Plan:
    """What the remover changes, by id of the nodes of the tree it transforms."""

    trim: dict[int, frozenset[int]] = field(default_factory=dict)  # import -> indices of names to drop
    drop: set[int] = field(default_factory=set)  # import statements to drop from their line
    lines: set[int] = field(default_factory=set)  # lines and suites holding a dropped statement
    removed: set[int] = field(default_factory=set)  # lines removed whole

    @property
    def empty(self) -> bool:
        return not self.trim and not self.drop


def _plan(module: cst.Module, doomed: set[int]) -> _Plan:
    plan = _Plan()
    for line, statement, probe in _import_statements(module):
        names = statement.names
        if probe or isinstance(names, cst.ImportStar):
            continue
        drop = frozenset(i for i, alias in enumerate(names) if id(alias) in doomed)
        if not drop:
            continue
        if len(drop) < len(names):
            trimmed = statement.with_changes(names=_without(names, drop))
            if comments(trimmed) == comments(statement):
                plan.trim[id(statement)] = drop
            continue
        if comments(statement):
            continue  # a comment inside the parentheses would go with it
        alone = all(id(other) in plan.drop or other is statement for other in line.body)
        if (
            isinstance(line, cst.SimpleStatementLine)
            and alone
            and line.trailing_whitespace.comment is not None
        ):
            continue  # the comment on its line would go with it
        plan.drop.add(id(statement))
        plan.lines.add(id(line))
        if isinstance(line, cst.SimpleStatementLine) and all(id(other) in plan.drop for other in line.body):
            plan.removed.add(id(line))
    return plan


def _import_statements(
    module: cst.Module,
) -> Iterator[tuple[cst.SimpleStatementLine | cst.SimpleStatementSuite, Imports, bool]]:
    """Each import statement with the line or suite holding it, and whether it lies in a `try`
    that catches ImportError (a feature probe), in source order."""
    stack: list[tuple[cst.CSTNode, bool]] = [(module, False)]
    while stack:
        node, probe = stack.pop()
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in node.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    yield node, small, probe
            continue
        if isinstance(node, cst.Try) and _probes_imports(node):
            probe = True
        inner: list[cst.CSTNode] = []
        for name in ("body", "handlers", "orelse", "finalbody", "cases"):
            child = getattr(node, name, None)
            if isinstance(child, (list, tuple)):
                inner.extend(child)
            elif isinstance(child, cst.CSTNode):
                inner.append(child)
        stack.extend((child, probe) for child in reversed(inner))


def _probes_imports(node: cst.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        if caught is None:
            return True
        elements = caught.elements if isinstance(caught, cst.Tuple) else [cst.Element(caught)]
        for element in elements:
            name = dotted_name(element.value) or ""
            if name.split(".")[-1] in _CATCHES_IMPORT_ERROR:
                return True
    return False


def _without(names: Sequence[cst.ImportAlias], drop: frozenset[int]) -> list[cst.ImportAlias]:
    """The names less those at the indices `drop`, the last one kept taking the last one's comma
    (`a, b` less `b` is `a`; a trailing comma and the line break before `)` stay)."""
    kept = [alias for index, alias in enumerate(names) if index not in drop]
    if len(names) - 1 in drop and kept:
        kept[-1] = kept[-1].with_changes(comma=names[-1].comma)
    return kept


class _Remover(cst.CSTTransformer):
    """Carries out a plan, remembering what each node became (the fixer follows findings by it)."""

    def __init__(self, plan: _Plan) -> None:
        super().__init__()
        self.plan = plan
        self.became: dict[int, object] = {}
        self.left: dict[int, Sequence[cst.EmptyLine]] = {}  # the leading lines of removed lines

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        result = super().on_leave(original_node, updated_node)
        self.became[id(original_node)] = result
        return result

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        drop = self.plan.trim.get(id(original_node))
        return (
            updated_node
            if drop is None
            else updated_node.with_changes(names=_without(updated_node.names, drop))
        )

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        drop = self.plan.trim.get(id(original_node))
        if drop is None or isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        return updated_node.with_changes(names=_without(updated_node.names, drop))

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if id(original_node) not in self.plan.lines:
            return updated_node
        if id(original_node) in self.plan.removed:
            # Its blank and comment lines go to the next statement (`_close`).
            self.left[id(original_node)] = updated_node.leading_lines
            return cst.RemovalSentinel.REMOVE
        return updated_node.with_changes(body=self._kept(original_node.body, updated_node.body))

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.SimpleStatementSuite:
        if id(original_node) not in self.plan.lines:
            return updated_node
        return updated_node.with_changes(
            body=self._kept(original_node.body, updated_node.body) or [cst.Pass()]
        )

    def _kept(
        self, original: Sequence[cst.BaseSmallStatement], updated: Sequence[cst.BaseSmallStatement]
    ) -> list[cst.BaseSmallStatement]:
        kept = [new for old, new in zip(original, updated, strict=True) if id(old) not in self.plan.drop]
        if kept and id(original[-1]) in self.plan.drop:
            kept[-1] = kept[-1].with_changes(semicolon=updated[-1].semicolon)
        return kept

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body, left = self._close(original_node.body, updated_node.body)
        if not body:  # every statement was a removed import: the block needs one
            return updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()], leading_lines=left)])
        return updated_node.with_changes(body=body, footer=_joined(left, updated_node.footer))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body, left = self._close(original_node.body, updated_node.body)
        return updated_node.with_changes(body=body, footer=_joined(left, updated_node.footer))

    def _close(
        self, original: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]
    ) -> tuple[list[cst.BaseStatement], list[cst.EmptyLine]]:
        """The statements (the removed lines already out), the blank and comment lines of each
        removed line joined to those of the statement after it; those left after the last one."""
        body: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        remaining = iter(updated)
        for old in original:
            if id(old) in self.left:
                carried = _joined(carried, self.left[id(old)])
                continue
            new = next(remaining)
            if carried:
                leading: Sequence[cst.EmptyLine] = getattr(new, "leading_lines", ())
                new = new.with_changes(leading_lines=_joined(carried, leading))
                self.became[id(old)] = new
                carried = []
            body.append(new)
        return body, carried


def _joined(first: Sequence[cst.EmptyLine], second: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """Two runs of leading lines made one where a line between them went: the blank lines that
    meet there count as many as the longer side had (no new run of blank lines appears)."""
    if not first or not second:
        return [*first, *second]
    ending = _blank_run(reversed(first))
    starting = _blank_run(second)
    return [*first[: len(first) - min(ending, starting)], *second]


def _blank_run(lines: Iterable[cst.EmptyLine]) -> int:
    count = 0
    for line in lines:
        if line.comment is not None:
            break
        count += 1
    return count
