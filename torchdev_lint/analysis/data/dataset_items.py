"""Which constructor arguments a dataset class hands out as its items.

`PredictDataset(X)` whose `__getitem__` returns `self.x[index]` after `self.x = x` yields
slices of whatever its caller passed: tensors already on a device if the caller passed one.
Pinning such a loader's batches raises (`cannot pin 'torch.cuda.FloatTensor'`), so TDL204's fix
is safe only where the arguments so handed out are known to be host data. A fact of the class,
found in its file (the rule, for a class of the checked file) and carried across files by the
summaries (`dataset_items`, `analysis/project/summaries.py`; `FileFacts.item_passing`).
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.syntax.scopes import block_statements

_PASSING = (cst.Tuple, cst.List)


def item_parameters(klass: cst.ClassDef) -> list[tuple[int | None, str]]:
    """The `__init__` parameters (call position, `self` not counted, and name) that the class
    stores unchanged (`self.x = x`) and whose items `__getitem__` returns as they are
    (`return self.x[i]`, `x = self.x[i]; return x`, `return self.x[i], self.y[i]`)."""
    methods = {
        member.name.value: member
        for member in block_statements(klass.body)
        if isinstance(member, cst.FunctionDef)
    }
    init, getitem = methods.get("__init__"), methods.get("__getitem__")
    if init is None or getitem is None:
        return []
    stored = _stored_parameters(init)
    found: list[tuple[int | None, str]] = []
    for attribute in _returned_items(getitem):
        parameter = stored.get(attribute)
        if parameter is not None and parameter not in found:
            found.append(parameter)
    return found


def _stored_parameters(init: cst.FunctionDef) -> dict[str, tuple[int | None, str]]:
    """`self.<attribute>` -> the parameter `__init__` assigns to it unchanged, at its top level."""
    params = init.params
    positional = [*params.posonly_params, *params.params]
    where: dict[str, int | None] = {p.name.value: index - 1 for index, p in enumerate(positional) if index}
    where.update({p.name.value: None for p in params.kwonly_params})
    stored: dict[str, tuple[int | None, str]] = {}
    for statement in block_statements(init.body):
        for target, value in _assignments(statement):
            attribute = _self_attribute(target)
            if attribute is not None and isinstance(value, cst.Name) and value.value in where:
                stored[attribute] = (where[value.value], value.value)
    return stored


def _returned_items(getitem: cst.FunctionDef) -> list[str]:
    """The attributes whose items `__getitem__` returns unchanged, at its top level."""
    sliced: dict[str, str] = {}  # local name -> attribute it holds an item of
    found: list[str] = []
    for statement in block_statements(getitem.body):
        for target, value in _assignments(statement):
            attribute = _item_of(value)
            if isinstance(target, cst.Name) and attribute is not None:
                sliced[target.value] = attribute
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Return) and small.value is not None:
                value = small.value
                parts = [e.value for e in value.elements] if isinstance(value, _PASSING) else [value]
                for part in parts:
                    attribute = _item_of(part)
                    if attribute is None and isinstance(part, cst.Name):
                        attribute = sliced.get(part.value)
                    if attribute is not None:
                        found.append(attribute)
    return found


def _assignments(statement: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    return [
        (target.target, small.value)
        for small in statement.body
        if isinstance(small, cst.Assign)
        for target in small.targets
    ]


def _item_of(value: cst.BaseExpression) -> str | None:
    """`self.x[i]`: the attribute `x`."""
    return _self_attribute(value.value) if isinstance(value, cst.Subscript) else None


def _self_attribute(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None
