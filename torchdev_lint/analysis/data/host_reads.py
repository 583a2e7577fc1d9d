"""Host reads a call runs: a function of the file that waits for the device each time it is
called (TDL206).

`loss_fn(out, y)` returning `loss.item()`, `self.log_step(loss)` printing `loss.item()`, a
model whose class's `forward` reads `.item()` once per sample, `time_sync()` calling
`torch.cuda.synchronize()` under `if torch.cuda.is_available():`: called every step, each
waits for the device every step, as the read would written in the loop itself. This is a fact
of the callee, found in the file and remembered per function:

- the callee: a module-level function (`f(...)`), a method of the class around the call or of
  a class of the file (`self.f(...)`, `cls.f(...)`, `C.f(...)`, also inherited from a base
  class of the file), or a method of an object built from a class of the file (`net(x)` is
  `Net.forward` when every assignment of `net` builds `Net(...)`, maybe `.to(device)`ed;
  `self.net(x)` when every `self.net = ...` of the class does). Anything else (a parameter, a
  class or function of another file, a library) is unknown, and unknown reads nothing.
- its reads: `.item()`, `.tolist()`, `torch.cuda.synchronize()`, and with `copies`
  `.cpu()`/`.numpy()` (not handed to a call: `outs.append(t.cpu())` keeps results in host
  memory), that run on every call (`every_iteration.runs_every_time`, a `for` loop's body
  included: a per-sample read), of a value not known to be host data (the device flow or
  `host_values` say it is on the CPU: no wait), then the reads of the callees it calls so, to
  a depth of three. A function whose body, outside its `for` loops, decides its control flow
  on a read (`if loss.item() > limit: return`) must wait anyway: it counts for nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data.every_iteration import runs_every_time, steered, value_read
from torchdev_lint.analysis.knowledge.torch_api import SAME_KIND_METHODS
from torchdev_lint.analysis.provenance.host_facts import FileHostFacts
from torchdev_lint.analysis.syntax.scopes import (
    Scope,
    assigned_values,
    block_statements,
    dotted_name,
    resolve,
)
from torchdev_lint.analysis.syntax.units import remember, scope_of
from torchdev_lint.analysis.syntax.walk import children
from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.host_values import HOST, host_condition
from torchdev_lint.analysis.values.kinds import module_by_syntax_or_name, self_attribute_values

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

_READS = frozenset({"item", "tolist", "cpu", "numpy"})
_COPIES = frozenset({"cpu", "numpy"})
_SYNCHRONIZE = "torch.cuda.synchronize"
_NESTED = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_MAX_DEPTH = 3
_MAX_BASES = 4
Function = tuple[cst.FunctionDef, str]  # the def and its name as the message shows it


@dataclass(frozen=True)
class HostRead:
    """A read a call runs: `text` (`.item()`) in `function` (`loss_fn`, `Net.forward`)."""

    function: str
    text: str
    waits_only: bool  # `torch.cuda.synchronize()`: no value comes back to decide anything
    per_item: bool  # inside a `for` loop of `function`: once per item


def call_read(call: cst.Call, scope: Scope, ctx: FileContext, *, copies: bool) -> HostRead | None:
    """The first read calling `call` (written in `scope`) runs every time, if any (see the
    module doc); `copies`: `.cpu()`/`.numpy()` count too."""
    reads = remember(ctx, "TDL206 host reads", ctx.module, lambda: _Reads(ctx))
    return reads.of_call(call, scope, copies, 0)


class _Reads:
    """The reads of the file's functions, judged on demand and remembered."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.module = scope_of(ctx.module, ctx) or ctx.scope.module
        self.host = FileHostFacts(self.module, ctx.project)
        self.judged: dict[tuple[cst.FunctionDef, bool], HostRead | None] = {}

    def of_call(self, call: cst.Call, scope: Scope, copies: bool, depth: int) -> HostRead | None:
        callee = self.callee(call, scope)
        if callee is None or depth >= _MAX_DEPTH:
            return None
        key = (callee[0], copies)
        if key not in self.judged:
            self.judged[key] = None  # a recursion proves nothing
            self.judged[key] = self._function(*callee, copies, depth)
        return self.judged[key]

    # The callee ----------------------------------------------------------------------------

    def callee(self, call: cst.Call, scope: Scope) -> Function | None:
        func = call.func
        if isinstance(func, cst.Name):
            node = self._defined(func.value, scope)
            if isinstance(node, cst.FunctionDef):
                return node, node.name.value
            return self._called_instance(func, scope)
        if not isinstance(func, cst.Attribute):
            return None
        owner, name = func.value, func.attr.value
        if isinstance(owner, cst.Name):
            klass = self._own_class(owner.value, scope)
            if klass is None:
                defined = self._defined(owner.value, scope)
                klass = defined if isinstance(defined, cst.ClassDef) else None
            method = self._method(klass, name, 0) if klass is not None else None
            if method is not None:
                return method
        klass = self._instance_class(owner, scope)
        method = self._method(klass, name, 0) if klass is not None else None
        return method if method is not None else self._called_instance(func, scope)

    def _called_instance(self, func: cst.BaseExpression, scope: Scope) -> Function | None:
        """`net(x)`: `forward` (or `__call__`) of the class `net` is built from."""
        klass = self._instance_class(func, scope)
        if klass is None:
            return None
        return self._method(klass, "forward", 0) or self._method(klass, "__call__", 0)

    def _defined(self, name: str, scope: Scope) -> cst.CSTNode | None:
        """The module-level def or class statement that alone binds `name` where it is used."""
        found = scope.lookup(name)
        if found is None or found[0] is not scope.module or len(found[1]) != 1:
            return None
        node = found[1][0].node
        return node if isinstance(node, (cst.FunctionDef, cst.ClassDef)) else None

    def _own_class(self, name: str, scope: Scope) -> cst.ClassDef | None:
        """The module-level class whose method's first parameter `name` is (`self`, `cls`)."""
        function = scope.owner
        node = function.node
        klass = function.parent
        if not isinstance(node, cst.FunctionDef) or klass is None or klass.kind != "class":
            return None
        params = node.params.params
        if not params or params[0].name.value != name or klass.parent is not scope.module:
            return None
        return klass.node if isinstance(klass.node, cst.ClassDef) else None

    def _instance_class(self, node: cst.BaseExpression, scope: Scope) -> cst.ClassDef | None:
        """The class of the file every assignment of `node` (a name, `self.attr`) builds."""
        if isinstance(node, cst.Name):
            found = assigned_values(node, scope)
            if found is None:
                return None
            values, owner = found
        else:
            key = dotted_name(node)
            values = self_attribute_values(key, scope) if key is not None else []
            owner = scope.module
        classes = {id(k): k for k in (self._built(value, owner) for value in values)}
        if len(classes) != 1 or None in classes.values():
            return None
        return next(iter(classes.values()))

    def _built(self, value: cst.BaseExpression, scope: Scope) -> cst.ClassDef | None:
        """`Net(...)`, `Net(...).to(device).eval()`: the class of the file built."""
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value not in SAME_KIND_METHODS:
                return None
            value = value.func.value
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
            return None
        node = self._defined(value.func.value, scope)
        return node if isinstance(node, cst.ClassDef) else None

    def _method(self, klass: cst.ClassDef, name: str, depth: int) -> Function | None:
        """The method `name` of `klass`, or of a base class of the file that defines it."""
        methods = [
            member
            for member in block_statements(klass.body)
            if isinstance(member, cst.FunctionDef) and member.name.value == name
        ]
        if methods:
            return (methods[0], f"{klass.name.value}.{name}") if len(methods) == 1 else None
        if depth >= _MAX_BASES:
            return None
        for base in klass.bases:
            if base.keyword is None and isinstance(base.value, cst.Name):
                node = self._defined(base.value.value, self.module)
                if isinstance(node, cst.ClassDef):
                    found = self._method(node, name, depth + 1)
                    if found is not None:
                        return found
        return None

    # Its reads -----------------------------------------------------------------------------

    def _function(self, function: cst.FunctionDef, name: str, copies: bool, depth: int) -> HostRead | None:
        scope = scope_of(function, self.ctx)
        if scope is None or steered(function.body, self._value_read(scope, depth), prune=(cst.For,)):
            return None
        stack: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = [(function.body, ())]
        while stack:  # source order, so that the first read found is the first written
            node, above = stack.pop()
            path = (*above, node)
            if isinstance(node, cst.Call):
                found = self._read(node, path, name, function, scope, copies, depth)
                if found is not None:
                    return found
            if not isinstance(node, _NESTED):
                stack.extend((child, path) for child in reversed(children(node)))
        return None

    def _read(
        self,
        call: cst.Call,
        path: Sequence[cst.CSTNode],
        name: str,
        function: cst.FunctionDef,
        scope: Scope,
        copies: bool,
        depth: int,
    ) -> HostRead | None:
        text = self._direct(call, path, function, scope, copies)
        if text is None and self.callee(call, scope) is None:
            return None
        if not runs_every_time(path, scope, per_item=True):
            return None
        per_item = any(
            isinstance(node, cst.For) and child is node.body
            for node, child in zip(path, path[1:], strict=False)
        )
        if text is not None:
            return HostRead(name, text, text.startswith("torch"), per_item)
        inner = self.of_call(call, scope, copies, depth + 1)
        return (
            inner
            if inner is None or not per_item
            else HostRead(inner.function, inner.text, inner.waits_only, True)
        )

    def _direct(
        self,
        call: cst.Call,
        path: Sequence[cst.CSTNode],
        function: cst.FunctionDef,
        scope: Scope,
        copies: bool,
    ) -> str | None:
        """`.item()` (or `torch.cuda.synchronize()`) when `call` is a read that waits."""
        func = call.func
        if resolve(func, scope) == _SYNCHRONIZE:
            return "torch.cuda.synchronize()"
        if not isinstance(func, cst.Attribute) or func.attr.value not in _READS or call.args:
            return None
        method = func.attr.value
        if method in _COPIES and (not copies or _handed_on(path)):
            return None
        receiver = func.value
        chain = receiver
        while isinstance(chain, cst.Call) and isinstance(chain.func, cst.Attribute):
            if chain.func.attr.value in _READS:
                return None  # `x.cpu().numpy()`: one read, at its first call
            chain = chain.func.value
        if module_by_syntax_or_name(receiver, scope) or host_condition(receiver, scope, self.host) == HOST:
            return None
        device = flow.analyse(function, self.ctx).value(receiver)
        if device is not None and device.device is not None and device.device.type == "cpu":
            return None
        return f".{method}()"

    def _value_read(self, scope: Scope, depth: int) -> _ValueRead:
        return _ValueRead(self, scope, depth)


class _ValueRead:
    """What counts as a read deciding a function's control flow: `.item()`, `.tolist()`, or a
    call of a function of the file that reads a value so."""

    def __init__(self, reads: _Reads, scope: Scope, depth: int) -> None:
        self._reads, self._scope, self._depth = reads, scope, depth

    def __call__(self, node: cst.CSTNode) -> bool:
        if value_read(node):
            return True
        if not isinstance(node, cst.Call) or self._reads.callee(node, self._scope) is None:
            return False
        found = self._reads.of_call(node, self._scope, False, self._depth + 1)
        return found is not None and not found.waits_only


def _handed_on(path: Sequence[cst.CSTNode]) -> bool:
    """`outs.append(t.cpu())`, `decode(p.numpy())`: kept in host memory or handed to host code."""
    return len(path) >= 3 and isinstance(path[-2], cst.Arg) and isinstance(path[-3], cst.Call)
