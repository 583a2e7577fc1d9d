"""Code that runs once, at setup, where one allocation or copy more cannot matter.

`runs_once(ctx)` answers for the node being visited: inside a function named for setup
(`__init__`, `_init_weights`, `_setup_train`, an availability probe), in a first-use
branch (`if not hasattr(self, "queue"):`, `if len(state) == 0:`), a dummy input for an
export or trace (made in an exporter, or passed to `export_onnx(model, im)`,
`torch.jit.trace(model, im)`), or a tensor registered as model state on the spot
(`register_buffer(name, ...)`, `nn.Parameter(...)`).
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.guards import name_words
from torchdev_lint.analysis.scopes import Scope, resolve
from torchdev_lint.analysis.walk import children

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# Words of a function's name that say it runs once, at setup: `_setup_train`, `initialize`,
# availability probes (`_is_fp16_available`).
_SETUP_WORDS = frozenset({"initialize", "initialise", "setup", "available"})
# With "init", words that say what is set up once: `_init_weights`, `distributed_init`
# (`init_hidden`, `init_state` run per batch).
_INITIALIZED_ONCE = frozenset({"weights", "weight", "params", "parameters", "distributed", "model", "module"})
# Words of a function, class or callee that say a tensor is a dummy input for one export or
# trace: `export_onnx(model, im)`, `torch.jit.trace(model, im)`, `class Exporter`, `convert_to_trt`.
_EXPORT_WORDS = frozenset({"export", "exporter", "trace", "onnx", "trt", "tensorrt", "torchscript"})
# Calls that register a tensor as model state once: `register_buffer(name, t)`, `nn.Parameter(t)`.
_STATE_REGISTRATIONS = frozenset({"register_buffer", "register_parameter", "Parameter", "Buffer"})


def runs_once(ctx: FileContext) -> bool:
    """Whether the node being visited is setup code run once (see the module docstring)."""
    ancestors = ctx.ancestors
    functions = [node for node in ancestors if isinstance(node, cst.FunctionDef)]
    if any(_names_setup(function.name.value) for function in functions):
        return True
    owners = [node.name.value for node in ancestors if isinstance(node, (cst.FunctionDef, cst.ClassDef))]
    if any(_EXPORT_WORDS & name_words(owner) for owner in owners):
        return True
    innermost = next((i for i, node in enumerate(ancestors) if functions and node is functions[-1]), 0)
    for branch, body in pairwise(ancestors[innermost:]):
        if isinstance(branch, cst.If) and body is branch.body and _first_use(branch.test, ctx.scope):
            return True
    # Climb the chain the visited node's result goes through: `.to(d).type_as(p)`, `[... .to(d)]`.
    depth = 1
    while True:
        parent, grandparent = ctx.parent(depth), ctx.parent(depth + 1)
        if (
            isinstance(parent, cst.Attribute)
            and isinstance(grandparent, cst.Call)
            and grandparent.func is parent
        ):
            depth += 2
        elif isinstance(parent, cst.Element) and isinstance(grandparent, (cst.List, cst.Tuple)):
            depth += 2
        else:
            break
    holder = ctx.parent(depth)
    if isinstance(holder, cst.Arg):
        registration = ctx.parent(depth + 1)
        return isinstance(registration, cst.Call) and _callee_name(registration) in _STATE_REGISTRATIONS
    if not functions or not isinstance(holder, cst.Assign) or len(holder.targets) != 1:
        return False
    target = holder.targets[0].target
    return isinstance(target, cst.Name) and _passed_to_export(target.value, functions[-1])


def _callee_name(call: cst.Call) -> str | None:
    """The last part of the called name: `register_buffer` of `self.register_buffer(...)`."""
    func = call.func
    return (
        func.attr.value
        if isinstance(func, cst.Attribute)
        else func.value
        if isinstance(func, cst.Name)
        else None
    )


def _names_setup(name: str) -> bool:
    """`__init__`, `_init_weights`, `distributed_init`, `_setup_train`, `_is_fp16_available`."""
    words = name_words(name)
    return (
        name == "__init__"
        or bool(_SETUP_WORDS & words)
        or ("init" in words and bool(_INITIALIZED_ONCE & words))
    )


def _first_use(test: cst.BaseExpression, scope: Scope) -> bool:
    """`not hasattr(self, "queue")`, `self.cache is None`, `len(state) == 0`: state made on first use."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        return isinstance(inner, cst.Call) and resolve(inner.func, scope) == "builtins.hasattr"
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, (comparison,) = test.left, test.comparisons
    right = comparison.comparator
    if isinstance(comparison.operator, cst.Is) and isinstance(right, cst.Name) and right.value == "None":
        return (
            isinstance(left, cst.Attribute)
            and isinstance(left.value, cst.Name)
            and left.value.value == "self"
        )
    return (
        isinstance(comparison.operator, cst.Equal)
        and isinstance(right, cst.Integer)
        and right.value == "0"
        and isinstance(left, cst.Call)
        and resolve(left.func, scope) == "builtins.len"
    )


def _passed_to_export(name: str, function: cst.FunctionDef) -> bool:
    """Is `name` handed (alone or in a list or tuple) to an export or trace call in `function`?"""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        stack.extend(children(node))
        if not isinstance(node, cst.Call):
            continue
        callee = _callee_name(node)
        if callee is None or not _EXPORT_WORDS & name_words(callee):
            continue
        for arg in node.args:
            items = (
                [e.value for e in arg.value.elements]
                if isinstance(arg.value, (cst.List, cst.Tuple))
                else [arg.value]
            )
            if any(isinstance(item, cst.Name) and item.value == name for item in items):
                return True
    return False
