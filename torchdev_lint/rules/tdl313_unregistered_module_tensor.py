"""TDL313 unregistered-module-tensor."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst

from torchdev_lint.analysis.kinds import constructs_module, is_module_subclass, is_tensor_factory_call
from torchdev_lint.analysis.scopes import BUILTIN_NAMES, Scope, block_statements, dotted_name, resolve
from torchdev_lint.rule import Fix, Invalid, Rule, Valid

# Methods whose override takes over how the module moves its state: the author handles devices.
_MOVE_OVERRIDES = frozenset({"_apply", "to", "cuda", "__setattr__"})
# A use followed by one of these moves (or re-creates on) the right device where it is used.
_MOVES_AT_USE = frozenset({"to", "cuda", "type_as", "new_tensor", "new_zeros", "new_ones", "new_full"})
# Reads that stay on the host: the tensor's device never meets an input's.
_HOST_METHODS = frozenset(
    {"item", "tolist", "numpy", "cpu", "size", "dim", "numel", "nelement", "element_size", "data_ptr"}
)
_HOST_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "T"})
_HOST_BUILTINS = frozenset(
    {"len", "int", "float", "bool", "str", "repr", "print", "isinstance", "id", "range"}
)
# Calls whose first argument (data) decides the tensor's rank: a literal sequence is not a scalar.
_DATA_FACTORIES = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray", "torch.from_numpy"})
# Methods that place a tensor by hand in `__init__`: its device is managed there.
_PLACING_METHODS = frozenset({"to", "cuda", "cpu", "pin_memory"})
_REGISTERING = frozenset({"register_buffer", "register_parameter", "register_module", "add_module"})
_PARAMETERS = frozenset(
    {"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer"}
)


@dataclass
class _Attribute:
    """A `self.name = <tensor>` of `__init__`, and what the other methods do with it."""

    assignment: cst.Assign | cst.AnnAssign
    after_module_init: bool
    # Per use in another method: whether its statement reads the method's inputs or
    # locals, and the module attributes it reads.
    uses: list[tuple[bool, set[str]]] = field(default_factory=list)
    moved_or_recreated: bool = False


@dataclass
class _ClassFacts:
    registered: set[str] = field(default_factory=set)  # by register_buffer/register_parameter/setattr
    dynamic_registration: bool = False
    state: set[str] = field(default_factory=set)  # parameters and submodules assigned in `__init__`
    assignments: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class UnregisteredModuleTensor(Rule):
    code = "TDL313"
    name = "unregistered-module-tensor"
    message = (
        "A plain tensor attribute of a module: `model.to(device)` moves parameters and buffers only, "
        "so this tensor stays on the CPU and the forward pass mixes devices; register it with "
        '`self.register_buffer("name", ..., persistent=False)`'
    )
    fix_availability = "sometimes"
    triggers = ("Module",)
    docs = """
        ## What it does
        Flags `self.name = <tensor>` in the `__init__` of an `nn.Module` subclass (the base class is
        resolved through imports and the file's own module classes) when the tensor is neither
        registered (`register_buffer`, `nn.Parameter`, `nn.Buffer`) nor moved where it is used, and
        another method uses it together with the method's inputs: `x - self.mean`,
        `F.conv2d(x, self.kernel)`, `self.table[labels]`. A tensor is a factory's result
        (`torch.zeros(...)`, `torch.tensor([...])`, `torch.arange(...)`), or arithmetic, indexing or
        a method call on one made in `__init__`.

        Not flagged: registered buffers and parameters; attributes moved or re-created where they
        are used (`self.table.to(x.device)`, `x.new_tensor(self.table)`) or assigned again outside
        `__init__`; tensors created with an explicit `device=` or moved in `__init__` (their
        placement is managed by hand); 0-dim tensors (`torch.tensor(0.5)`: CUDA accepts CPU
        scalars); tensors only read on the host (`.item()`, `.tolist()`, `.shape`, `len()`,
        counters); classes that are not modules; modules that override `_apply`, `to`, `cuda` or
        `__setattr__`.

        ## Why it matters
        `model.to(device)` (and `.cuda()`, `.half()`) walks the module's parameters and buffers. A
        tensor stored as a plain attribute is neither, so it stays on the CPU while everything
        else moves, and the first forward pass on a GPU fails with "Expected all tensors to be on
        the same device, but found at least two devices, cuda:0 and cpu!". On a CPU-only machine
        the code works, so the bug ships.

        ## Example
        ```python
        class Normalize(nn.Module):
            def __init__(self):
                super().__init__()
                self.mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)

            def forward(self, x):
                return x - self.mean
        ```

        ## Use instead
        ```python
        class Normalize(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), persistent=False)

            def forward(self, x):
                return x - self.mean
        ```

        ## Fix safety
        The fix registers the tensor as a non-persistent buffer:
        `self.register_buffer("name", <expr>, persistent=False)`. `persistent=False` keeps it out
        of the `state_dict`, so saved checkpoints and `load_state_dict` (strict or not) behave as
        before. It is **unsafe**: as a buffer the tensor now also follows `model.half()`,
        `model.double()` and `model.to(dtype)` (a float table becomes half precision, which is
        usually what the module needs but changes values), shows up in `model.buffers()` (and so
        in `DistributedDataParallel`'s buffer broadcast), and is replaced by `model.to()` instead
        of kept. The fix is offered only for a plain `self.name = <expr>` assigned once in the
        class, after the `super().__init__()` call (`register_buffer` fails before it).
        """
    invalid = (
        Invalid(
            """
            import torch
            from torch import nn

            class Normalize(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)  # ImageNet
                    self.std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

                def forward(self, x):
                    return (x - self.mean) / self.std
            """,
            lines=(7, 8),
            fixed="""
            import torch
            from torch import nn

            class Normalize(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), persistent=False)  # ImageNet
                    self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1), persistent=False)

                def forward(self, x):
                    return (x - self.mean) / self.std
            """,
        ),
        Invalid(
            # Built from a local tensor; used by a helper method and as an index; single quotes kept.
            """
            import math
            import torch
            import torch.nn.functional as F
            from torch.nn import Module

            class Rotary(Module):
                def __init__(self, dim, base=10000):
                    super(Rotary, self).__init__()
                    inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
                    self.inv_freq = inv
                    self.kernel = torch.ones(1, 1, 3, 3) / 9
                    self.codes = torch.randperm(dim)
                    self.name = 'rotary'

                def angles(self, positions):
                    return positions[:, None] * self.inv_freq[None, :]

                def blur(self, x):
                    return F.conv2d(x, self.kernel, padding=1)

                def shuffle(self, x):
                    return x[:, self.codes]
            """,
            lines=(10, 11, 12),
            fixed="""
            import math
            import torch
            import torch.nn.functional as F
            from torch.nn import Module

            class Rotary(Module):
                def __init__(self, dim, base=10000):
                    super(Rotary, self).__init__()
                    inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
                    self.register_buffer('inv_freq', inv, persistent=False)
                    self.register_buffer('kernel', torch.ones(1, 1, 3, 3) / 9, persistent=False)
                    self.register_buffer('codes', torch.randperm(dim), persistent=False)
                    self.name = 'rotary'

                def angles(self, positions):
                    return positions[:, None] * self.inv_freq[None, :]

                def blur(self, x):
                    return F.conv2d(x, self.kernel, padding=1)

                def shuffle(self, x):
                    return x[:, self.codes]
            """,
        ),
        Invalid(
            # A subclass of the file's own module class; used with a parameter of the module.
            """
            import torch
            import torch.nn as nn

            class Base(nn.Module):
                pass

            class Head(Base):
                def __init__(self, n):
                    super().__init__()
                    self.proj = nn.Linear(n, n)
                    self.scale = torch.linspace(0.5, 1.5, n)

                def forward(self, x):
                    return self.proj(x) * self.scale
            """,
            lines=(11,),
            fixed="""
            import torch
            import torch.nn as nn

            class Base(nn.Module):
                pass

            class Head(Base):
                def __init__(self, n):
                    super().__init__()
                    self.proj = nn.Linear(n, n)
                    self.register_buffer("scale", torch.linspace(0.5, 1.5, n), persistent=False)

                def forward(self, x):
                    return self.proj(x) * self.scale
            """,
        ),
        Invalid(
            # Before super().__init__() register_buffer would fail: flagged, no fix.
            # Assigned twice: registering the second would fail on the first. Annotated: no fix.
            """
            import torch
            from torch import nn, Tensor

            class Mask(nn.Module):
                def __init__(self, size, causal):
                    self.mask = torch.tril(torch.ones(size, size))
                    super().__init__()
                    self.bias = torch.zeros(size)
                    if causal:
                        self.bias = torch.full((size,), -1.0)
                    self.offset: Tensor = torch.arange(size)

                def forward(self, scores):
                    return scores.masked_fill(self.mask == 0, -1e9) + self.bias + self.offset
            """,
            lines=(6, 8, 11),
        ),
    )
    valid = (
        Valid(
            # Registered buffers and parameters.
            """
            import torch
            from torch import nn

            class Normalize(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("mean", torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1))
                    self.std = nn.Parameter(torch.ones(1, 3, 1, 1))
                    self.shift = nn.Parameter(torch.zeros(3), requires_grad=False)
                    table = torch.randn(10, 4)
                    self.register_buffer("table", table)

                def forward(self, x, idx):
                    return (x - self.mean) / self.std + self.shift[None, :, None, None] + self.table[idx]
            """
        ),
        Valid(
            # Moved, or re-created, where it is used.
            """
            import torch
            from torch import nn

            class Anchors(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.anchors = torch.tensor([[10, 13], [16, 30]])
                    self.strides = torch.tensor([8.0, 16.0, 32.0])
                    self.grid = torch.zeros(1)

                def forward(self, x):
                    anchors = self.anchors.to(x.device)
                    strides = x.new_tensor(self.strides)
                    self.grid = self.make_grid(x)
                    return x * anchors.sum() + strides.mean() + self.grid
            """
        ),
        Valid(
            # Only read on the host: counters, shapes, Python bookkeeping.
            """
            import torch
            from torch import nn

            class Tracker(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.sizes = torch.tensor([1, 2, 4, 8])
                    self.steps = torch.zeros(n, dtype=torch.long)
                    self.layer = nn.Linear(n, n)

                def forward(self, x):
                    for size in self.sizes.tolist():
                        x = x + size
                    if len(self.steps) > x.shape[0]:
                        x = x * self.steps.shape[0]
                    return self.layer(x) * int(self.sizes[0])
            """
        ),
        Valid(
            # Not a module; and a module that moves its own tensors in `_apply`.
            """
            import torch
            from torch import nn

            class Sampler:
                def __init__(self):
                    self.weights = torch.ones(10)

                def draw(self, x):
                    return x * self.weights

            class Cached(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.table = torch.randn(10, 4)

                def _apply(self, fn, recurse=True):
                    self.table = fn(self.table)
                    return super()._apply(fn, recurse)

                def forward(self, idx):
                    return self.table[idx]
            """
        ),
        Valid(
            # Placed by hand on a device given to the module; 0-dim scalars (CUDA accepts CPU scalars).
            """
            import torch
            from torch import nn

            class Loss(nn.Module):
                def __init__(self, device, n_classes):
                    super().__init__()
                    self.weights = torch.ones(n_classes, device=device)
                    self.eye = torch.eye(n_classes).to(device)
                    self.margin = torch.tensor(0.5)
                    self.temperature = torch.tensor(0.07) * 2

                def forward(self, logits, target):
                    return (logits * self.weights @ self.eye).sum() * self.margin / self.temperature
            """
        ),
        Valid(
            # An unknown base class (imported from elsewhere) is no evidence of a module.
            """
            import torch
            from mylib import Component

            class Prior(Component):
                def __init__(self):
                    super().__init__()
                    self.mean = torch.zeros(3)

                def forward(self, x):
                    return x - self.mean
            """
        ),
        Valid(
            # Used in __init__ only, returned as is, or with nothing from the method's inputs.
            """
            import torch
            from torch import nn

            class Embedding(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.init_table = torch.randn(n, 4)
                    self.weight = nn.Parameter(self.init_table.clone())
                    self.codebook = torch.randn(n, 4)

                def initial(self):
                    return self.codebook

                def forward(self, idx):
                    return self.weight[idx]
            """
        ),
        Valid(
            # Filled in as a plain tensor, then made a parameter under the same name.
            """
            import torch
            from torch import nn

            class Sobel(nn.Module):
                def __init__(self, channels):
                    super().__init__()
                    self.mask = torch.zeros((channels, 1, 3, 3))
                    for i in range(channels):
                        self.mask[i, 0, 0, 0] = 1.0
                    self.mask = nn.Parameter(data=self.mask, requires_grad=False)

                def forward(self, x):
                    return x * self.mask
            """
        ),
        Valid(
            # Registration by a computed name may cover any attribute: silent.
            """
            import torch
            from torch import nn

            class Buffers(nn.Module):
                def __init__(self, names):
                    super().__init__()
                    self.mean = torch.zeros(3)
                    for name in names:
                        self.register_buffer(name, torch.zeros(3))

                def forward(self, x):
                    return x - self.mean
            """
        ),
    )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        scope = self.ctx.scope
        if not is_module_subclass(node, scope.parent or scope):
            return
        methods = [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
        if any(m.name.value in _MOVE_OVERRIDES for m in methods):
            return
        init = next((m for m in methods if m.name.value == "__init__"), None)
        self_name = _self_name(init) if init is not None else None
        if init is None or self_name is None:
            return
        facts = _ClassFacts()
        attributes = self._tensor_attributes(init, self_name, facts)
        if not attributes:
            return
        for method in methods:
            method_self = _self_name(method)
            if method_self is not None:
                _Uses(self, method, method_self, attributes, facts, method is init).scan()
        if facts.dynamic_registration:
            return
        on_device = facts.state | facts.registered
        for name, attribute in attributes.items():
            if name in facts.registered or attribute.moved_or_recreated:
                continue
            # A use with the method's inputs, or with the module's parameters/buffers/submodules.
            if any(with_inputs for with_inputs, _ in attribute.uses) or any(
                others & on_device for _, others in attribute.uses
            ):
                message = self.message.replace('"name"', f'"{name}"').replace("this tensor", f"`self.{name}`")
                self.report(attribute.assignment, message, self._fix(name, attribute, self_name, facts))

    def _tensor_attributes(
        self, init: cst.FunctionDef, self_name: str, facts: _ClassFacts
    ) -> dict[str, _Attribute]:
        """`self.name = <tensor>` statements of `__init__`, with the local tensors they come from."""
        locals_: dict[str, list[cst.BaseExpression]] = defaultdict(list)
        found: dict[str, _Attribute] = {}
        module_ready = False
        for statement in _statements(init.body):
            if _initialises_module(statement):
                module_ready = True
                continue
            for small in _assignments(statement):
                targets = (
                    [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                )
                value = small.value
                assert value is not None
                for target in targets:
                    if isinstance(target, cst.Name):
                        locals_[target.value].append(value)
                    attr = _self_attribute(target, self_name)
                    if attr is None:
                        continue
                    facts.assignments[attr] += 1
                    if self._is_state(value):
                        facts.state.add(attr)
                    elif attr not in found and self._is_placed_tensor(value, locals_, self_name, found):
                        found[attr] = _Attribute(small, module_ready)
        # Built as a plain tensor, then wrapped: `self.mask = nn.Parameter(self.mask, requires_grad=False)`.
        return {name: attribute for name, attribute in found.items() if name not in facts.state}

    def _is_state(self, value: cst.BaseExpression) -> bool:
        """A parameter, buffer or submodule: what `model.to()` moves."""
        return constructs_module(value, self.ctx.scope) or (
            isinstance(value, cst.Call) and self.ctx.qualname(value.func) in _PARAMETERS
        )

    def _is_placed_tensor(
        self,
        value: cst.BaseExpression,
        locals_: dict[str, list[cst.BaseExpression]],
        self_name: str,
        found: dict[str, _Attribute],
    ) -> bool:
        """A tensor of more than 0 dims made here on the default device (not placed by hand)."""
        return _TensorShape(self.ctx.scope, locals_, self_name, set(found)).rank(value) == "tensor"

    def _fix(self, name: str, attribute: _Attribute, self_name: str, facts: _ClassFacts) -> Fix | None:
        assignment = attribute.assignment
        if (
            not isinstance(assignment, cst.Assign)
            or len(assignment.targets) != 1
            or facts.assignments[name] != 1
            or not attribute.after_module_init
        ):
            return None
        literal = self.ctx.string(name, at=assignment)
        if literal is None:
            return None
        call = cst.Call(
            func=cst.Attribute(value=cst.Name(self_name), attr=cst.Name("register_buffer")),
            args=[
                cst.Arg(literal, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(assignment.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(
                    cst.Name("False"),
                    keyword=cst.Name("persistent"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                ),
            ],
        )
        return Fix("unsafe", "Register it as a non-persistent buffer", {assignment: cst.Expr(call)})


class _TensorShape:
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

    def rank(self, node: cst.BaseExpression, depth: int = 0) -> str | None:
        if depth > 8:
            return None
        if isinstance(node, (cst.Integer, cst.Float)):
            return "scalar"
        if isinstance(node, cst.Name):
            values = self.locals.get(node.value)
            if not values:
                return None
            ranks = {self.rank(v, depth + 1) for v in values}
            return ranks.pop() if len(ranks) == 1 else None
        if isinstance(node, cst.Attribute):
            return "tensor" if _self_attribute(node, self.self_name) in self.attributes else None
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

    def _call_rank(self, call: cst.Call, depth: int) -> str | None:
        if any(arg.keyword is not None and arg.keyword.value == "device" for arg in call.args):
            return None
        func = call.func
        name = resolve(func, self.scope)
        if is_tensor_factory_call(call, self.scope) or name in _DATA_FACTORIES:
            return _factory_rank(call, name or "")
        if name is not None:
            # `torch.tril(t)`, `torch.exp(t)`: a torch function of a tensor made here.
            if not name.startswith("torch.") or name.startswith("torch.nn."):
                return None
            arguments = [self.rank(arg.value, depth + 1) for arg in call.args if arg.keyword is None]
            return "tensor" if "tensor" in arguments else None
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = self.rank(func.value, depth + 1)
            if receiver != "tensor" or method in _PLACING_METHODS or method in _HOST_METHODS:
                return None
            return "tensor"
        return None


def _factory_rank(call: cst.Call, name: str) -> str | None:
    """`torch.zeros(3)` is a tensor; `torch.zeros(())` and `torch.tensor(0.5)` are 0-dim."""
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if name in _DATA_FACTORIES:
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


class _Uses(cst.CSTVisitor):
    """What one method does with the tensor attributes of `__init__`."""

    def __init__(
        self,
        rule: UnregisteredModuleTensor,
        method: cst.FunctionDef,
        self_name: str,
        attributes: dict[str, _Attribute],
        facts: _ClassFacts,
        is_init: bool,
    ) -> None:
        self.rule = rule
        self.method = method
        self.self_name = self_name
        self.attributes = attributes
        self.facts = facts
        self.is_init = is_init
        self.stack: list[cst.CSTNode] = []
        self.inputs = _local_names(method) - {self_name}

    def scan(self) -> None:
        self.method.body.visit(self)

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)  # popped by on_leave, which LibCST calls even for skipped children
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(node, cst.Call):
            self._registration(node)
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and not self.is_init:
            targets = node.targets if isinstance(node, cst.Assign) else [node]
            for target in targets:
                attribute = self.attributes.get(_self_attribute(target.target, self.self_name) or "")
                if attribute is not None:
                    attribute.moved_or_recreated = True
        if isinstance(node, cst.Attribute) and not self.is_init:
            name = _self_attribute(node, self.self_name)
            attribute = self.attributes.get(name or "")
            if attribute is not None:
                self._judge(node, attribute)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()

    def _registration(self, call: cst.Call) -> None:
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and func.attr.value in _REGISTERING
            and dotted_name(func.value) == self.self_name
        ):
            if isinstance(func, cst.Name) and func.value == "setattr" and call.args:
                self._registered_name(call.args[1].value if len(call.args) > 1 else None)
            return
        self._registered_name(call.args[0].value if call.args else None)

    def _registered_name(self, node: cst.BaseExpression | None) -> None:
        if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
            self.facts.registered.add(node.evaluated_value)
        else:
            self.facts.dynamic_registration = True

    def _judge(self, use: cst.Attribute, attribute: _Attribute) -> None:
        """Climb from `self.name` through what keeps it a tensor; decide what the use needs."""
        current: cst.CSTNode = use
        for parent in reversed(self.stack[:-1]):
            if isinstance(parent, cst.Attribute) and parent.value is current:
                if parent.attr.value in _MOVES_AT_USE:
                    attribute.moved_or_recreated = True
                    return
                if parent.attr.value in _HOST_ATTRIBUTES or parent.attr.value in _HOST_METHODS:
                    return
                current = parent
                continue
            if isinstance(parent, cst.Call):
                if parent.func is current:  # `self.name.view(...)`: still the tensor
                    current = parent
                    continue
                name = resolve(parent.func, self.rule.ctx.scope)
                if name is not None and name.removeprefix("builtins.") in _HOST_BUILTINS:
                    return
                if _moves_argument(parent):
                    attribute.moved_or_recreated = True
                    return
                break
            if isinstance(parent, (cst.Arg, cst.Index, cst.SubscriptElement, cst.Slice)):
                current = parent
                continue
            if isinstance(parent, cst.Subscript) and parent.value is current:
                current = parent
                continue
            if isinstance(parent, cst.Comparison) and not _identity_test(parent):
                current = parent  # `self.mask == 0` is a tensor
                continue
            if isinstance(
                parent, (cst.For, cst.Comparison, cst.ComparisonTarget, cst.If, cst.IfExp, cst.While)
            ):
                return
            break
        statement = next((n for n in reversed(self.stack) if isinstance(n, cst.BaseSmallStatement)), None)
        if statement is not None:
            names = _Names(self.self_name)
            # What an assignment stores to is not what it computes with.
            read = statement.value if isinstance(statement, (cst.Assign, cst.AnnAssign)) else statement
            if read is not None:
                read.visit(names)
            attribute.uses.append((bool(names.names & self.inputs), names.attributes))


def _identity_test(comparison: cst.Comparison) -> bool:
    """`x is None`, `k in table`: answered on the host."""
    return any(
        isinstance(target.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn))
        for target in comparison.comparisons
    )


class _Names(cst.CSTVisitor):
    def __init__(self, self_name: str) -> None:
        self.self_name = self_name
        self.names: set[str] = set()
        self.attributes: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = _self_attribute(node, self.self_name)
        if name is not None:
            self.attributes.add(name)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value not in BUILTIN_NAMES:
            self.names.add(node.value)


def _moves_argument(call: cst.Call) -> bool:
    """`x.new_tensor(t)`, `torch.as_tensor(t, device=...)`: the argument is copied to a device."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in _MOVES_AT_USE:
        return True
    return any(arg.keyword is not None and arg.keyword.value == "device" for arg in call.args)


def _local_names(method: cst.FunctionDef) -> set[str]:
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


def _self_name(method: cst.FunctionDef) -> str | None:
    if any(
        isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod", "classmethod")
        for d in method.decorators
    ):
        return None
    params = method.params.posonly_params or method.params.params
    return params[0].name.value if params else None


def _self_attribute(node: cst.BaseExpression, self_name: str) -> str | None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == self_name:
        return node.attr.value
    return None


def _statements(body: cst.BaseSuite) -> list[cst.BaseStatement]:
    """`__init__`'s statements in order, those nested in `if`/`for`/`with`/`try` included."""
    found: list[cst.BaseStatement] = []
    for statement in block_statements(body):
        found.append(statement)
        if isinstance(statement, (cst.If, cst.For, cst.While, cst.With, cst.Try)):
            found += _statements(statement.body)
            orelse = getattr(statement, "orelse", None)
            while orelse is not None:
                found += _statements(orelse.body)
                orelse = getattr(orelse, "orelse", None)
            if isinstance(statement, cst.Try):
                for handler in statement.handlers:
                    found += _statements(handler.body)
                if statement.finalbody is not None:
                    found += _statements(statement.finalbody.body)
    return found


def _assignments(statement: cst.BaseStatement) -> list[cst.Assign | cst.AnnAssign]:
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    return [
        s
        for s in statement.body
        if isinstance(s, cst.Assign) or (isinstance(s, cst.AnnAssign) and s.value is not None)
    ]


def _initialises_module(statement: cst.BaseStatement) -> bool:
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
