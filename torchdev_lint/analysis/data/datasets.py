"""Is a class a torch Dataset? Is a function a collate function?

Dataset methods and collate functions run in DataLoader worker processes, one
sample or batch at a time; rules ask here whether code lives there, and whether
a move there only follows the device the sample's own data already has
(`follows_sample_device`).
"""

from __future__ import annotations

import re

import libcst as cst

from torchdev_lint.analysis.context.device_contexts import is_config
from torchdev_lint.analysis.data.item_moves import chain_root
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, last_name, resolve
from torchdev_lint.analysis.values.kinds import module_by_syntax_or_name
from torchdev_lint.analysis.values.module_classes import instance_name

_TORCH_DATA = "torch.utils.data."
_MAX_DEPTH = 8
# `collate`, `collate_fn`, `pad_collate`, `my_collate_fn`, `collate_batch`.
_COLLATE_NAME = re.compile(r"(^|_)collate($|_)")
# Methods a DataLoader calls in its workers to produce samples.
SAMPLE_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__"})


def is_dataset_class(node: cst.ClassDef, scope: Scope, depth: int = 0) -> bool:
    """Does the class (defined in `scope`) derive from a `torch.utils.data.*Dataset`?

    Bases are resolved, and followed through classes defined in the same file.
    """
    if depth > _MAX_DEPTH:
        return False
    for base in node.bases:
        value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
        name = resolve(value, scope)
        if name is not None and name.startswith(_TORCH_DATA) and name.rsplit(".", 1)[-1].endswith("Dataset"):
            return True
        if isinstance(value, cst.Name):
            found = scope.lookup(value.value)
            if found is None:
                continue
            owner, bindings = found
            if any(
                isinstance(b.node, cst.ClassDef) and is_dataset_class(b.node, owner, depth + 1)
                for b in bindings
            ):
                return True
    return False


def named_like_collate(name: str) -> bool:
    return bool(_COLLATE_NAME.search(name))


def collate_reference(node: cst.BaseExpression) -> str | None:
    """The function name a `collate_fn=` value refers to: `f`, `self.f`, `partial(f, ...)`."""
    if isinstance(node, cst.Call) and node.args:
        if last_name(node.func) == "partial":
            node = node.args[0].value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Name):
        return node.value
    return None


def follows_sample_device(device: cst.BaseExpression | None, scope: Scope) -> bool:
    """`inc.to(value.device)`, `x.to(batch[0].device)`, `y.to(data.x.device)`: the target is the
    device of another value the function holds, so the data stays where the sample already is
    (on the CPU in a worker); not a host-to-accelerator transfer. The `.device` of `self`'s
    attributes, of globals, of a module (`model.device`) or of a setting (`args.device`) is
    where the training runs, and does not count."""
    if not isinstance(device, cst.Attribute) or device.attr.value != "device":
        return False
    holder = device.value
    root = chain_root(holder)
    if root is None:
        return False
    found = scope.lookup(root)
    if found is None or found[0].kind not in ("function", "lambda", "comprehension"):
        return False
    owner = found[0]
    if (
        isinstance(owner.node, cst.FunctionDef)
        and owner.parent is not None
        and owner.parent.kind == "class"
        and instance_name(owner.node) == root
    ):
        return False
    name = dotted_name(holder)
    if name is not None and is_config(f"{name}.device"):
        return False
    return not any(module_by_syntax_or_name(node, scope) for node in (holder, cst.Name(root)))


def dataset_class_of(node: cst.BaseExpression, scope: Scope) -> cst.ClassDef | None:
    """The class of this file a dataset is built from (`MyDataset(...)`)."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name):
        return None
    found = defined_once(node.func.value, scope, cst.ClassDef)
    return found if isinstance(found, cst.ClassDef) else None


def collate_code(node: cst.BaseExpression, scope: Scope) -> cst.CSTNode | None:
    """The lambda, or the function of this file, a `collate_fn=` names (`f`, `partial(f, ...)`, or a
    lambda that only calls it: `lambda x: collate(x, vocab)`)."""
    if isinstance(node, cst.Lambda):
        body = node.body
        called = collate_reference(body.func) if isinstance(body, cst.Call) else None
        return (defined_once(called, scope, cst.FunctionDef) if called is not None else None) or node
    name = collate_reference(node)
    return None if name is None else defined_once(name, scope, cst.FunctionDef)


def defined_once(name: str, scope: Scope, kind: type[cst.CSTNode]) -> cst.CSTNode | None:
    """The one `def`/`class` statement that binds `name`, when that is its only binding."""
    found = scope.lookup(name)
    if found is None or len(found[1]) != 1:
        return None
    node = found[1][0].node
    return node if isinstance(node, kind) else None
