"""Is an expression built in a method a tensor of known rank above 0, left on the default device?

`self.mask = torch.ones(3, 3)` in `__init__` is such a tensor; `torch.tensor(0.5)`
and `torch.zeros(())` are 0-dim; `torch.ones(3, device=d)` or `.to(d)` is
placed by hand. Only "tensor" is evidence; unknown stays unknown.
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.knowledge.torch_api import (
    DATA_FACTORIES,
    HOST_RESULT_METHODS,
    PLACING_METHODS,
    TENSOR_FUNCTION_MODULES,
    WINDOW_FACTORIES,
)
from torchdev_lint.analysis.syntax.scopes import Scope, resolve
from torchdev_lint.analysis.values.kinds import is_tensor_factory_call
from torchdev_lint.analysis.values.module_classes import self_attribute


class TensorRank:
    """Is an `__init__` expression a tensor of known rank > 0, left on the default device?

    `rank` answers "tensor", "scalar" (0-dim, or a number) or None (unknown, or
    placed by hand with `device=`/`.to()`): only "tensor" is evidence.
    """

    def __init__(
        self, scope: Scope, locals_: dict[str, list[cst.BaseExpression]], self_name: str, attributes: set[str]
    ) -> None:
        self.scope = scope
        self.locals = locals_
        self.self_name = self_name
        self.attributes = attributes
        # A local being judged: how many of its values come before the one read (`_name_rank`).
        self._bound_before: dict[str, int] = {}

    def rank(self, node: cst.BaseExpression, depth: int = 0) -> str | None:
        if depth > 8:
            return None
        if isinstance(node, (cst.Integer, cst.Float)):
            return "scalar"
        if isinstance(node, cst.Name):
            return self._name_rank(node.value, depth)
        if isinstance(node, cst.Attribute):
            return "tensor" if self_attribute(node, self.self_name) in self.attributes else None
        if isinstance(node, cst.UnaryOperation):
            return self.rank(node.expression, depth + 1)
        if isinstance(node, cst.BinaryOperation):
            ranks = {self.rank(node.left, depth + 1), self.rank(node.right, depth + 1)}
            if "tensor" in ranks:
                return "tensor"
            return "scalar" if ranks == {"scalar"} else None
        if isinstance(node, cst.Subscript):
            return "tensor" if self.rank(node.value, depth + 1) == "tensor" else None
        if isinstance(node, cst.Call):
            return self._call_rank(node, depth)
        return None

    def _name_rank(self, name: str, depth: int) -> str | None:
        """The rank every value bound to the local `name` so far agrees on; in a value that reads
        `name` itself (`pe = pe.unsqueeze(0)`), `name` is what was bound before it."""
        values = self.locals.get(name, [])[: self._bound_before.get(name)]
        if not values:
            return None
        ranks = set()
        outer = self._bound_before.get(name)
        for index, value in enumerate(values):
            self._bound_before[name] = index
            ranks.add(self.rank(value, depth + 1))
        if outer is None:
            del self._bound_before[name]
        else:
            self._bound_before[name] = outer
        return ranks.pop() if len(ranks) == 1 else None

    def _call_rank(self, call: cst.Call, depth: int) -> str | None:
        if any(arg.keyword is not None and arg.keyword.value == "device" for arg in call.args):
            return None
        func = call.func
        name = resolve(func, self.scope)
        if is_tensor_factory_call(call, self.scope) or name in DATA_FACTORIES:
            return factory_rank(call, name or "")
        if name in WINDOW_FACTORIES:
            return "tensor"
        if name is not None:
            # `torch.tril(t)`, `torch.exp(t)`: a torch function of a tensor made here (not a class of
            # another namespace taking tensors, `torch.distributions.Normal(loc, scale)`).
            if name.rpartition(".")[0] not in TENSOR_FUNCTION_MODULES:
                return None
            arguments = [self.rank(arg.value, depth + 1) for arg in call.args if arg.keyword is None]
            return "tensor" if "tensor" in arguments else None
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = self.rank(func.value, depth + 1)
            if receiver != "tensor" or method in PLACING_METHODS or method in HOST_RESULT_METHODS:
                return None
            return "tensor"
        return None


def factory_rank(call: cst.Call, name: str) -> str | None:
    """`torch.zeros(3)` is a tensor; `torch.zeros(())` and `torch.tensor(0.5)` are 0-dim."""
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if name in DATA_FACTORIES:
        if not positional:
            return None
        data = positional[0]
        if isinstance(data, (cst.List, cst.Tuple, cst.ListComp)) or name == "torch.from_numpy":
            return "tensor"
        return "scalar" if isinstance(data, (cst.Integer, cst.Float, cst.UnaryOperation)) else None
    if not positional and not any(
        arg.keyword is not None and arg.keyword.value == "size" for arg in call.args
    ):
        return None if name.endswith(("_like", "stack", "cat")) else "scalar"
    first = positional[0] if positional else None
    if isinstance(first, (cst.Tuple, cst.List)) and not first.elements:
        return "scalar"
    return "tensor"
