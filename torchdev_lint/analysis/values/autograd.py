"""Autograd facts: where gradients are off, what is a loss, what detaches a value from its graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

Resolver = Callable[[cst.BaseExpression], "str | None"]

GRAD_OFF = frozenset(
    {
        "torch.no_grad",
        "torch.inference_mode",
        "torch.autograd.no_grad",
        "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.inference_mode",
    }
)
# Calls and attributes whose result carries no autograd history.
DETACHING_METHODS = frozenset({"item", "detach", "tolist", "numpy", "detach_"})
DETACHING_FUNCTIONS = frozenset({"float", "int", "bool", "round"})
DETACHING_ATTRIBUTES = frozenset({"data"})
_LOSS_FUNCTIONS = frozenset(
    {
        "cross_entropy",
        "nll_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "ctc_loss",
        "poisson_nll_loss",
        "gaussian_nll_loss",
        "cosine_embedding_loss",
        "hinge_embedding_loss",
        "margin_ranking_loss",
        "triplet_margin_loss",
    }
)


def turns_grad_off(expression: cst.BaseExpression, resolve: Resolver) -> bool:
    """`torch.no_grad()`, `torch.inference_mode()` (also as a bare decorator), `set_grad_enabled(False)`."""
    target = expression.func if isinstance(expression, cst.Call) else expression
    name = resolve(target)
    if name in GRAD_OFF:
        if isinstance(expression, cst.Call) and name.endswith("inference_mode") and expression.args:
            return _is_true_literal(expression.args[0].value)
        return True
    if name in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled"):
        return (
            isinstance(expression, cst.Call) and bool(expression.args) and _is_false(expression.args[0].value)
        )
    return False


def grad_is_off(ancestors: Sequence[cst.CSTNode], resolve: Resolver) -> bool:
    """Whether the last ancestor runs with autograd off: in such a `with`, or a function decorated so."""
    for node in reversed(ancestors):
        if isinstance(node, cst.With) and any(turns_grad_off(item.item, resolve) for item in node.items):
            return True
        if isinstance(node, cst.FunctionDef):
            return any(turns_grad_off(d.decorator, resolve) for d in node.decorators)
        if isinstance(node, (cst.ClassDef, cst.Lambda)):
            return False
    return False


def is_loss_call(call: cst.Call, resolve: Resolver) -> bool:
    """A call of a loss function (`F.cross_entropy(...)`, `F.mse_loss(...)`) or of a criterion
    constructed in place (`nn.MSELoss()(...)`)."""
    func = call.func
    if isinstance(func, cst.Call):
        name = resolve(func.func)
        return name is not None and name.startswith("torch.nn.") and name.endswith("Loss")
    name = resolve(func)
    if name is None or not name.startswith("torch.nn.functional."):
        return False
    short = name.rsplit(".", 1)[1]
    return short in _LOSS_FUNCTIONS or short.endswith("_loss")


def is_criterion(value: cst.BaseExpression, resolve: Resolver) -> bool:
    """A value constructed from a loss module class (`nn.CrossEntropyLoss(...)`)."""
    if not isinstance(value, cst.Call):
        return False
    name = resolve(value.func)
    return name is not None and name.startswith("torch.nn.") and name.endswith("Loss")


def _is_true_literal(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"
