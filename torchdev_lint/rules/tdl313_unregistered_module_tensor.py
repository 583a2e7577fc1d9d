"""TDL313 unregistered-module-tensor."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.context.cuda_only_code import test_module
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.analysis.values.attribute_uses import (
    ClassRegistrations,
    TensorAttribute,
    scan_methods,
    tensor_attributes,
)
from torchdev_lint.analysis.values.kinds import is_module_subclass
from torchdev_lint.analysis.values.module_classes import (
    built_only_for_export,
    instance_name,
    keeps_state_in_param_store,
)
from torchdev_lint.rule import Fix, Invalid, Rule, Valid

# Methods whose override takes over how the module moves its state: the author handles devices.
_MOVE_OVERRIDES = frozenset({"_apply", "to", "cuda", "__setattr__"})
# What may change where the fix is applied (the docs' "Fix safety").
_RISK = (
    "as a buffer the tensor now also follows `model.half()`/`model.to(dtype)` (its values may change), "
    "shows in `model.buffers()` (DistributedDataParallel broadcasts it) and is replaced by `model.to()`"
)


def _overrides_moves(node: cst.ClassDef, module: Scope, seen: set[str]) -> bool:
    """Does the class, or a base class of the same file, override what moves a module's tensors
    (`_apply`, `to`, `cuda`, `__setattr__`): it may move plain tensor attributes too."""
    if node.name.value in seen:
        return False
    seen.add(node.name.value)
    if any(isinstance(s, cst.FunctionDef) and s.name.value in _MOVE_OVERRIDES for s in node.body.body):
        return True
    for base in node.bases:
        if base.keyword is None and isinstance(base.value, cst.Name):
            bound = module.bindings.get(base.value.value, ())
            classes = [b.node for b in bound if isinstance(b.node, cst.ClassDef)]
            if any(_overrides_moves(klass, module, seen) for klass in classes):
                return True
    return False


def _class_attributes(node: cst.ClassDef) -> set[str]:
    """Names the class body gives a value (`mean: Optional[Tensor] = None`): `register_buffer` of
    such a name raises ("attribute already exists")."""
    found = set()
    for line in node.body.body:
        for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
            if (
                isinstance(small, cst.AnnAssign)
                and small.value is not None
                and isinstance(small.target, cst.Name)
            ):
                found.add(small.target.value)
            elif isinstance(small, cst.Assign):
                found |= {t.target.value for t in small.targets if isinstance(t.target, cst.Name)}
    return found


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
        (`torch.zeros(...)`, `torch.tensor([...])`, `torch.arange(...)`, `torch.hann_window(n)`), or
        arithmetic, indexing or a method call on one made in `__init__`, also through a local built in
        steps (`pe = torch.zeros(n, d)`, `pe = pe.unsqueeze(0)`, `self.pe = pe`). A cast at the use
        (`self.inv_freq.to(t.dtype)`) moves nothing.

        Not flagged: registered buffers and parameters; attributes moved or re-created where they
        are used (`self.table.to(x.device)`, `x.new_tensor(self.table)`), also through what is
        computed from them (`(self.table * w).to(x.device)`, or a helper method whose result
        every caller moves: `self.make_filters(...).to(x.device)`), or by the function of the file they are
        passed to, which moves that parameter before reading it (`w = w.to(x)`), or assigned again outside
        `__init__`; tensors created with an explicit `device=` or moved in `__init__` (their
        placement is managed by hand); 0-dim tensors (`torch.tensor(0.5)`: CUDA accepts CPU
        scalars); tensors only used on the host (`.item()`, `.tolist()`, `.shape`, `len()`, an f-string,
        counters, a histogram written with host data: `self.usage[i:j] = codes.cpu()`) or as an index of
        another tensor (`x[:, self.order]`: a tensor on any device takes indices on the CPU); classes that
        are not modules; modules that override `_apply`, `to`, `cuda` or
        `__setattr__`, or derive from a class of the file that does; modules that keep their learnable state in Pyro's param store (`pyro.param`
        in a method: `model.to()` cannot move it, so such a module runs where the default device
        puts every tensor); modules of test code (`test_*.py`, `conftest.py`, or a module that imports
        pytest or unittest, as `torch/testing/_internal/`: a fixture that a test moves fails in
        that test, at once); export wrappers, built in their file only
        by functions named for export (`export_coreml`) and traced there on the host, never moved.

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
        class, after the `super().__init__()` call (`register_buffer` fails before it), to a name
        the class body gives no value (`mean: Optional[Tensor] = None`: `register_buffer` raises
        "attribute already exists").
        """
    invalid = (
        Invalid(
            # Built in steps through a local (`table = table.unsqueeze(0)`), a window function, a
            # cast to the input's dtype at the use (`.to(t.dtype)` moves nothing).
            """
            import torch
            from torch import nn

            class Features(nn.Module):
                def __init__(self, n, dim):
                    super().__init__()
                    table = torch.zeros(n, dim)
                    table = table.unsqueeze(0)
                    self.table = table
                    self.window = torch.hann_window(n)
                    self.scale = torch.linspace(0, 1, dim)

                def forward(self, t, wav):
                    spec = torch.stft(wav, 64, window=self.window, return_complex=True)
                    return t * self.scale.to(t.dtype) + self.table[:, : t.size(1)], spec
            """,
            lines=(9, 10, 11),
            fixed="""
            import torch
            from torch import nn

            class Features(nn.Module):
                def __init__(self, n, dim):
                    super().__init__()
                    table = torch.zeros(n, dim)
                    table = table.unsqueeze(0)
                    self.register_buffer("table", table, persistent=False)
                    self.register_buffer("window", torch.hann_window(n), persistent=False)
                    self.register_buffer("scale", torch.linspace(0, 1, dim), persistent=False)

                def forward(self, t, wav):
                    spec = torch.stft(wav, 64, window=self.window, return_complex=True)
                    return t * self.scale.to(t.dtype) + self.table[:, : t.size(1)], spec
            """,
        ),
        Invalid(
            # Two tensors stored in one tuple assignment: reported there, no fix (two buffers).
            """
            import torch
            from torch import nn

            class Standardize(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.mean, self.std = torch.tensor([0.4, 0.4, 0.4]), torch.tensor([0.2, 0.2, 0.2])

                def forward(self, x):
                    return (x - self.mean[:, None, None]) / self.std[:, None, None]
            """,
            lines=(7,),
        ),
        Invalid(
            # The class body gives the name a value: `register_buffer` would raise, so no fix.
            """
            from typing import Optional

            import torch
            from torch import nn

            class Standardize(nn.Module):
                mean: Optional[torch.Tensor] = None

                def __init__(self):
                    super().__init__()
                    self.mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)

                def forward(self, x):
                    return x - self.mean
            """,
            lines=(11,),
        ),
        Invalid(
            # Used only with a parameter, not with the inputs: the parameter moves, the mask does not.
            """
            import torch
            from torch import nn

            class Scale(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(4))
                    self.mask = torch.ones(4)

                def forward(self, x):
                    masked = self.weight * self.mask
                    return x * masked
            """,
            lines=(8,),
            fixed="""
            import torch
            from torch import nn

            class Scale(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(4))
                    self.register_buffer("mask", torch.ones(4), persistent=False)

                def forward(self, x):
                    masked = self.weight * self.mask
                    return x * masked
            """,
        ),
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
            # Built from a local tensor; used by a helper method and indexed by the input; single quotes kept.
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
                    return self.codes[x.argmax(-1)]
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
                    return self.codes[x.argmax(-1)]
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
        # Only formatted into an error message next to the input: text on the host.
        Valid(
            """
            import torch
            from torch import nn

            class Vocabulary(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.known = torch.tensor([3, 5, 7])
                    self.embed = nn.Embedding(8, 4)

                def forward(self, ids):
                    if ids.max() > 7:
                        raise KeyError(f"ids {ids.tolist()} outside {self.known}")
                    return self.embed(ids)
            """
        ),
        Valid(
            # A base class of the file overrides `_apply`: it moves plain tensor attributes too.
            """
            import torch
            from torch import nn

            class MovesPlainTensors(nn.Module):
                def _apply(self, fn, recurse=True):
                    for key, value in list(vars(self).items()):
                        if isinstance(value, torch.Tensor):
                            setattr(self, key, fn(value))
                    return super()._apply(fn, recurse)

            class Standardize(MovesPlainTensors):
                def __init__(self):
                    super().__init__()
                    self.mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)

                def forward(self, x):
                    return x - self.mean
            """
        ),
        Valid(
            # Not a tensor: a distribution object built from tensors (it cannot be a buffer).
            """
            import torch
            from torch import distributions, nn

            class Prior(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.noise = distributions.Normal(torch.zeros(dim), torch.ones(dim))
                    self.mix = nn.Linear(dim, dim)

                def forward(self, h):
                    return self.mix(h) + self.noise.rsample((h.shape[0],))
            """
        ),
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
            # Moved by the function it is passed to before that reads it; used only as an index of a
            # tensor (a tensor on any device takes indices on the CPU).
            """
            import torch
            from torch import nn

            def whiten(x, basis=None):
                basis = basis.to(x).T
                return x @ basis

            class Whitening(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.basis = torch.linalg.qr(torch.randn(n, n))[0]
                    self.keep = torch.arange(n).flip(0)
                    self.scale = torch.full((n,), 2.0)

                def forward(self, x):
                    return self._scaled(whiten(x[..., self.keep], basis=self.basis), self.scale)

                def _scaled(self, y, s):
                    s = s.type_as(y)
                    return y * s
            """
        ),
        Valid(
            # Computed on the host on purpose: what is built from the tensor moves to the input's
            # device, in the same expression or by every caller of the helper that builds it.
            """
            import torch
            from torch import nn

            class TriangularBank(nn.Module):
                def __init__(self, n_bins, n_bands):
                    super().__init__()
                    self.grid = torch.linspace(0, 1, n_bins).repeat(n_bands, 1)
                    self.centres = torch.linspace(0, 1, n_bands)
                    self.offsets = torch.arange(n_bins)

                def _bank(self, centres, width):
                    return self._clip(self.grid, centres[:, None], width)

                def _clip(self, grid, centres, width):
                    return torch.relu(1 - (grid - centres).abs() / width)

                def forward(self, spec, width: float):
                    bank = self._bank(self.centres, width).to(spec.device)
                    shift = (self.offsets * width).to(spec.device)
                    return spec @ bank.T + shift
            """
        ),
        Valid(
            # Only used on the host: counters, shapes, Python bookkeeping, a histogram written with
            # host data.
            """
            import torch
            from torch import nn

            class Tracker(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.sizes = torch.tensor([1, 2, 4, 8])
                    self.steps = torch.zeros(n, dtype=torch.long)
                    self.usage = torch.zeros(4096, dtype=torch.long)
                    self.layer = nn.Linear(n, n)

                def forward(self, x):
                    for size in self.sizes.tolist():
                        x = x + size
                    if len(self.steps) > x.shape[0]:
                        x = x * self.steps.shape[0]
                    self.usage[: x.shape[0]] = x.argmax(-1).cpu()
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
        Valid(
            # Learnable state in Pyro's param store, which `.to()` never moves: placed by the default device.
            """
            import pyro
            import torch
            from torch import nn

            class Topics(nn.Module):
                def __init__(self, n_words, n_topics):
                    super().__init__()
                    self.prior = torch.tensor([1.0, 0.5])
                    self.shape = (n_topics, n_words)

                def decode(self, theta):
                    return theta + self.prior

                def guide(self, docs):
                    loc = pyro.param("loc", torch.zeros(self.shape))
                    return self.decode(loc @ docs)
            """
        ),
        Valid(
            # A wrapper built only by an export function, traced once on the host.
            """
            import torch

            class ScaledBoxes(torch.nn.Module):
                def __init__(self, model, h, w):
                    super().__init__()
                    self.model = model
                    self.scale = torch.tensor([1 / w, 1 / h, 1 / w, 1 / h])

                def forward(self, x):
                    return self.model(x) * self.scale

            def export_mobile(model, im):
                wrapper = ScaledBoxes(model, *im.shape[2:])
                return torch.jit.trace(wrapper, im)
            """
        ),
    )

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        scope = self.ctx.scope
        # A model of test code is a fixture: a test that moves it fails there, at once.
        if test_module(self.ctx.path, scope) or not is_module_subclass(node, scope.parent or scope):
            return
        methods = [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
        if (
            _overrides_moves(node, scope.parent or scope, set())
            or built_only_for_export(node.name.value, self.ctx)
            or keeps_state_in_param_store(node, scope.parent or scope, self.ctx)
        ):
            return
        init = next((m for m in methods if m.name.value == "__init__"), None)
        self_name = instance_name(init) if init is not None else None
        if init is None or self_name is None:
            return
        facts = ClassRegistrations()
        attributes = tensor_attributes(scope, init, self_name, facts)
        if not attributes:
            return
        scan_methods(scope, methods, init, attributes, facts)
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
                fix = (
                    None if name in _class_attributes(node) else self._fix(name, attribute, self_name, facts)
                )
                self.report(attribute.assignment, message, fix)

    def _fix(
        self, name: str, attribute: TensorAttribute, self_name: str, facts: ClassRegistrations
    ) -> Fix | None:
        assignment = attribute.assignment
        if (
            not isinstance(assignment, cst.Assign)
            or len(assignment.targets) != 1
            or isinstance(assignment.targets[0].target, (cst.Tuple, cst.List))
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
        return Fix("unsafe", "Register it as a non-persistent buffer", {assignment: cst.Expr(call)}, _RISK)
