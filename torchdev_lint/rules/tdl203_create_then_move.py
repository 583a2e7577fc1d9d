"""TDL203 create-then-move."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.context.entry_points import untimed_code
from torchdev_lint.analysis.context.setup_code import runs_once
from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.values.factory_chains import factory_chain, fix_risk, on_device
from torchdev_lint.analysis.values.host_data import factory_creates_on_cpu
from torchdev_lint.rule import Fix, Invalid, Rule, Valid

# torch builds a tensor from a list or number on the host whatever `device=` says, and
# copies an array or tensor source straight to `device=` (torch/csrc/utils/tensor_new.cpp).
_FROM_DATA_MESSAGE = (
    "Array or CPU tensor copied into a new CPU tensor and then to the device; `device=` on the factory "
    "copies it once and saves the intermediate CPU tensor (the data still crosses from the host)"
)
_CHAIN_MESSAGE = (
    "Tensor created on the CPU, cast or computed there, and then copied to the device; pass `device=` "
    "to the factory instead"
)


class CreateThenMove(Rule):
    code = "TDL203"
    name = "create-then-move"
    message = "Tensor created on the CPU and then copied to the device; pass `device=` to the factory instead"
    fix_availability = "sometimes"
    triggers = (".to(", ".cuda(")
    docs = """
        ## What it does
        Flags a tensor factory (`torch.zeros`, `ones`, `empty`, `full`, `rand`, `randn`, `randint`, `arange`,
        `linspace`, `eye`, `tensor`, `zeros_like`, ...) whose result is immediately moved to a device in the
        same chain: `torch.zeros(3).to(device)`, `torch.randn(2, 2).cuda()`, also after dtype casts or
        arithmetic with Python numbers made on the CPU on the way: `torch.zeros(n).long().cuda()`,
        `torch.arange(n).float().to(d)`, `(torch.arange(n) + offset).cuda()`, `(torch.ones(n) * 0.5).to(d)` (a
        number: a literal, `len(...)`, `x.size(0)`, `x.shape[1]`, `.item()`, a parameter annotated
        `int`/`float`, a name bound only to one), and after views and reshapes that keep the values (`view`,
        `reshape`, `unsqueeze`, `squeeze`, `flatten`, `permute`, `transpose`, `t`, `expand`, `contiguous`:
        `torch.arange(n).unsqueeze(0).to(d)`). Not flagged: casts to a dtype only, arithmetic with a tensor
        or an operand not known to be a number (`(torch.arange(n) + x).cuda()`), moves to another tensor
        (`.to(other)`), moves to the CPU, factories already given `device=`, `torch.from_numpy(a).to(d)` (it
        has no `device=`), a factory drawing from an explicit `generator=` (a CPU generator cannot fill device
        memory), test code and the `if __name__ == "__main__":` demo of a module the project imports (checked
        with its project). A `*_like(x)` factory creates its tensor where `x` lives, so it is flagged only
        where `x` is known to be on the CPU; a move to the device the source already has
        (`zeros_like(x).to(x.device)`, `torch.tensor(t).to(t.device)`) is a no-op and never flagged.

        `torch.tensor(data)` is flagged only where `data` is known to be a NumPy array or a CPU
        tensor, which it copies once more on the host before the move. Of Python data (a list,
        a number, `[token] * batch`, a parameter or attribute holding one) torch builds the tensor
        on the host even when given `device=`, and `torch.as_tensor` aliases an array or tensor:
        there `device=` makes the same host tensor and the same copy, so neither is flagged.

        Setup code that runs once is not flagged either: one allocation more cannot matter there. That is code
        at module level outside any loop (a script's setup before its training loop; not the functions it
        calls), in a function named for setup (`__init__`, `_init_weights`, `_setup_train`,
        `distributed_init`, an availability probe such as `_is_fp16_available`, a conversion for deployment
        such as `switch_to_deploy` or `_fuse_bn_tensor`; not `init_hidden` or `init_state`, which run per
        batch), in a function whose result is cached (`@cached_property`, `@lru_cache`: once per instance or
        arguments), in a private helper the file calls only from setup code or lists only in a registry named
        for setup (`ROPE_INIT_FUNCTIONS = {"linear": _compute_linear_rope, ...}`), state made on first use and
        kept (under `if not hasattr(self, "pool"):`, `if self.cache is None:`, an optimizer's `if len(state)
        == 0:`, or `if k not in self.means:` whose body stores `self.means[k] = ...`: made once per key; a
        guard over a local dict, or whose body does not store under that key, is not exempt), a dummy input
        for an export or trace (inside an exporter class or function, or a name handed to `export_onnx(model,
        im)`, `torch.jit.trace(model, im)`, `convert_to_onnx(...)`, a lambda traced once), and a tensor
        registered as model state on the spot (`register_buffer(name, ...)`, `nn.Parameter(...)`). Nor is a
        tensor that is never used (a statement of its own, or bound to `_`): it only probes the device. Masks,
        padding and buffers built in `forward`, in a training step or per call of a helper are what the rule
        is for.

        ## Why it matters
        The tensor is first allocated and filled on the CPU, then copied over the PCIe bus and the CPU copy
        thrown away: two allocations, a host-to-device copy and, for a pageable source, a synchronisation,
        where one kernel writing directly into device memory would do. In code that builds many small
        tensors (masks, position ids, constants in `forward`) this dominates the step time. For
        `torch.tensor(array)` the data has to cross from the host either way: `device=` saves the
        intermediate CPU tensor and the second call, not the copy.

        ## Example
        ```python
        mask = torch.ones(seq_len, seq_len).to(device)
        ids = torch.arange(seq_len).cuda()
        half = torch.zeros(3).to(device, torch.float16)
        pos = (torch.arange(seq_len, dtype=torch.long) + offset).to(device)
        ```

        ## Use instead
        ```python
        mask = torch.ones(seq_len, seq_len, device=device)
        ids = torch.arange(seq_len, device="cuda")
        half = torch.zeros(3, device=device, dtype=torch.float16)
        pos = torch.arange(seq_len, dtype=torch.long, device=device) + offset
        ```

        ## Fix safety
        The fix passes the move's device to the factory (`.cuda()` becomes `device="cuda"`, the current CUDA
        device either way; `.cuda(1)` becomes `device="cuda:1"`). `non_blocking` and `copy` are dropped: a
        fresh tensor has no pending copy to overlap and is a new tensor either way. Where the move also
        casts, `zeros`, `ones`, `empty`, `eye` and their `*_like` forms are created straight in the new
        dtype (every value they hold is exact in any dtype); every other factory is created on the device in
        its own dtype and cast after (`torch.tensor([0.1]).to(d, torch.float64)` becomes
        `torch.tensor([0.1], device=d).to(torch.float64)`: created in float64 it would hold 0.1, not the
        float32 value 0.10000000149011612 the original computes).

        Safe for `zeros`, `ones`, `empty`, `full`, `eye`, `tensor` and the non-random `*_like`
        factories, and for `arange` in an explicit integer dtype: the values, dtype and device
        are the same, and the result is a new tensor either way. Unsafe: the random factories (on a GPU they draw from its generator, so the
        numbers differ from those the CPU generator gave), `arange` in a floating or unknown
        dtype, `linspace` and `logspace` (device kernels compute the values in floating point
        and may differ from the CPU's in the last bits), and factories given `requires_grad=`
        anything but `False` (`torch.zeros(3, requires_grad=True).cuda()` is a non-leaf copy of
        a CPU leaf; with `device=` the result is itself the leaf that receives `.grad`). An
        unsafe fix's message says which of these applies at its site. No fix: factories taking
        `pin_memory`, `out` or `**kwargs`; moves with other arguments (`memory_format`, `*args`,
        a device index held in a variable: `.cuda(rank)`); and where no string literal can be
        written (nested f-strings).

        Casts and arithmetic between factory and move stay after the factory, now on the device
        (`torch.arange(n, dtype=torch.int32, device=d).float()`), except that a chain of casts
        only on `zeros`, `ones`, `empty`, `eye` or their `*_like` forms becomes `dtype=`
        (`torch.zeros(n, dtype=torch.long, device="cuda")`). Safe where the factory alone is and
        every step gives the same bits on the device: casts (the same conversion), but not of floats
        (or an unknown dtype) to integers outside `zeros`/`ones`/`empty`/`eye`
        (`torch.full((n,), float("inf")).long()`: infinities, NaN and values out of range convert
        to other integers on a GPU); `+`, `-`, `*`
        of an integer, float32 or float64 tensor and a Python number (one exactly rounded
        operation); `//` and `%` of an integer tensor by a non-zero integer literal. Unsafe: `/`
        (CUDA divides by a number as a multiplication by its reciprocal), `**` and floating `//`
        and `%` (other kernels), an integer `//` or `%` by what may be zero (the CPU raises, a
        GPU does not), and arithmetic in half precision or in a dtype the code does not show.
        Views and reshapes (`view`, `reshape`, `unsqueeze`, `squeeze`, `flatten`, `permute`,
        `transpose`, `t`, `contiguous`) stay after the factory too and give the same values and strides
        (a move copies a dense tensor with its strides): safe where the rest is. Unsafe after `expand`:
        made on the device it stays a view whose elements share memory (writing into it raises), where
        the move made a copy with memory of its own.
        """
    invalid = (
        # Reshaped on the CPU on the way: the same values in another shape, still copied.
        Invalid(
            """
            import torch


            def length_mask(lengths, device):
                longest = int(lengths.max())
                ids = torch.arange(longest).unsqueeze(0).expand(len(lengths), -1).to(device)
                return ids < lengths.unsqueeze(1)
            """,
            lines=(6,),
            fixed="""
            import torch


            def length_mask(lengths, device):
                longest = int(lengths.max())
                ids = torch.arange(longest, device=device).unsqueeze(0).expand(len(lengths), -1)
                return ids < lengths.unsqueeze(1)
            """,
        ),
        Invalid(
            # Casts and arithmetic with Python numbers on the way (unsafe: `odd`, from an `arange`
            # of no integer dtype, and `frac`, a division); a cast after the move.
            """
            import numpy as np
            import torch
            for step in range(steps):
                mask = torch.ones(4, 4).to(device)
                ids = torch.arange(10, dtype=torch.long).cuda()
                x = torch.zeros(3).to(device, torch.float16)
                y = torch.tensor(np.load(path)).to(device=dev, non_blocking=True)
                label = f"{torch.zeros(1).cuda()}"
                start = len(prefix)
                codes = torch.zeros(seq).long().cuda()
                steps = torch.arange(seq, dtype=torch.int32).float().to(device)
                pos = (torch.arange(seq, dtype=torch.long) + start).to(device)
                half = (torch.ones(seq, seq) * 0.5).cuda()
                odd = (torch.arange(seq) * 2 + 1).to(device)
                frac = (torch.arange(seq, dtype=torch.long) / y.size(0)).to(device, torch.float64)
                flags = torch.zeros(seq).cuda().bool()
            """,
            lines=(4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16),
            fixed="""
            import numpy as np
            import torch
            for step in range(steps):
                mask = torch.ones(4, 4, device=device)
                ids = torch.arange(10, dtype=torch.long, device="cuda")
                x = torch.zeros(3, dtype=torch.float16, device=device)
                y = torch.tensor(np.load(path), device=dev)
                label = f"{torch.zeros(1, device='cuda')}"
                start = len(prefix)
                codes = torch.zeros(seq, dtype=torch.long, device="cuda")
                steps = torch.arange(seq, dtype=torch.int32, device=device).float()
                pos = torch.arange(seq, dtype=torch.long, device=device) + start
                half = torch.ones(seq, seq, device="cuda") * 0.5
                odd = torch.arange(seq, device=device) * 2 + 1
                frac = (torch.arange(seq, dtype=torch.long, device=device) / y.size(0)).to(torch.float64)
                flags = torch.zeros(seq, device="cuda").bool()
            """,
        ),
        Invalid(
            # A cast in the same move: created in the factory's own dtype, then cast, so that
            # the data is rounded as before; zeros/ones/eye are exact in any dtype.
            """
            import numpy
            import torch as T
            from torch import full

            def make(n, device, path, dtype):
                arr = numpy.loadtxt(path)
                a = T.tensor(arr).to(device, T.float64)
                b = full((n,), 0.1).to(device=device, dtype=T.float16)
                c = T.tensor(arr).to(device, dtype)
                eye = T.eye(n, dtype=T.float64).to(device, T.float32)
                fill = full((n,), 7).cuda(1)
                inv_freq = 1.0 / (10000 ** (T.arange(0, n, 2, dtype=T.int64).to(device=device, dtype=T.float) / n))
                return a, b, c, eye, fill, inv_freq
            """,
            lines=(7, 8, 9, 10, 11, 12),
            fixed="""
            import numpy
            import torch as T
            from torch import full

            def make(n, device, path, dtype):
                arr = numpy.loadtxt(path)
                a = T.tensor(arr, device=device).to(T.float64)
                b = full((n,), 0.1, device=device).to(T.float16)
                c = T.tensor(arr, device=device).to(dtype)
                eye = T.eye(n, dtype=T.float32, device=device)
                fill = full((n,), 7, device="cuda:1")
                inv_freq = 1.0 / (10000 ** (T.arange(0, n, 2, dtype=T.int64, device=device).to(T.float) / n))
                return a, b, c, eye, fill, inv_freq
            """,
        ),
        Invalid(
            # Unsafe fixes: other random numbers on the GPU; device kernels for arange/linspace;
            # a leaf tensor instead of a copy.
            """
            import torch
            for step in range(steps):
                noise = torch.randn(2, 2).cuda()
                steps = torch.arange(0, 1, 0.1).to(device)
                grid = torch.linspace(0, 1, 5).to(device)
                w = torch.zeros(3, requires_grad=True).to(device)
            """,
            lines=(3, 4, 5, 6),
            fixed="""
            import torch
            for step in range(steps):
                noise = torch.randn(2, 2, device="cuda")
                steps = torch.arange(0, 1, 0.1, device=device)
                grid = torch.linspace(0, 1, 5, device=device)
                w = torch.zeros(3, requires_grad=True, device=device)
            """,
        ),
        Invalid(
            # A `*_like` of a tensor known to be on the CPU.
            """
            import torch

            def pad(n, device):
                host = torch.zeros(n)
                return torch.ones_like(host).to(device)
            """,
            lines=(5,),
            fixed="""
            import torch

            def pad(n, device):
                host = torch.zeros(n)
                return torch.ones_like(host, device=device)
            """,
        ),
        Invalid(
            # Helpers that run per step: called from `forward` as well as `__init__`, registered
            # as a hook, listed in a registry not named for setup, or called from module level
            # (a script's `main` runs its loop). A device index in a variable: no fix.
            """
            import torch
            from torch import nn

            def _gelu_table(n, gpu):
                return torch.linspace(-4, 4, n).cuda(gpu)

            ACTIVATIONS = {"gelu": _gelu_table}

            class Padder(nn.Module):
                def __init__(self, width, gpu):
                    super().__init__()
                    self.edge = self._pad(width, gpu)
                    self.register_forward_pre_hook(self._mask_hook)

                def _pad(self, width, gpu):
                    return torch.zeros(width).cuda(gpu)

                def _mask_hook(self, module, args):
                    return torch.ones(args[0].shape).cuda(self.gpu)

                def forward(self, x):
                    return torch.cat([self._pad(x.size(0), self.gpu), x])

            def _main(gpu):
                for step in range(1000):
                    print(torch.randn(8, 3).cuda(gpu))

            if __name__ == "__main__":
                _main(0)
            """,
            lines=(5, 16, 19, 26),
        ),
        Invalid(
            # Reported without a fix: pinned memory, **kwargs, a memory format, a device variable.
            """
            import torch
            for step in range(steps):
                a = torch.empty(8, pin_memory=True).to(device)
                c = torch.zeros(3, **options).to(device)
                d = torch.empty(1, 3, 4, 4).to(device, memory_format=torch.channels_last)
                e = torch.ones(2).cuda(rank)
            """,
            lines=(3, 4, 5, 6),
        ),
        Invalid(
            # Per forward, per step, per call: masks and padding built on the CPU and copied
            # every time (a default mask for a missing argument, an RNN's `init_hidden` per
            # batch too); a class's `__init__` exempts only itself. A CPU tensor copied by `torch.tensor` is copied twice.
            """
            import torch
            from torch import nn

            class PrefixEncoder(nn.Module):
                def __init__(self, n_virtual):
                    super().__init__()
                    self.n_virtual = n_virtual

                def forward(self, input_ids, attention_mask):
                    batch = input_ids.shape[0]
                    prefix_mask = torch.ones(batch, self.n_virtual).to(attention_mask.device)
                    return torch.cat((prefix_mask, attention_mask), dim=1)

            def pad_to(x, length, device):
                pad = torch.zeros(x.size(0), length - x.size(1), x.size(-1)).to(device)
                return torch.cat([x, pad], dim=1)

            def train_step(model, batch, device):
                lengths = torch.zeros(len(batch))
                ids = torch.tensor(lengths).to(device)
                return model(batch, ids)

            def attend(q, k, mask=None):
                if mask is None:
                    mask = torch.ones(q.size(1), k.size(1)).to(q.device)
                return (q @ k.transpose(-1, -2)).masked_fill(mask == 0, float("-inf"))

            class LanguageModel(nn.Module):
                def init_hidden(self, batch_size, device):
                    return torch.zeros(self.layers, batch_size, self.hidden).to(device)
            """,
            lines=(11, 15, 20, 25, 30),
            fixed="""
            import torch
            from torch import nn

            class PrefixEncoder(nn.Module):
                def __init__(self, n_virtual):
                    super().__init__()
                    self.n_virtual = n_virtual

                def forward(self, input_ids, attention_mask):
                    batch = input_ids.shape[0]
                    prefix_mask = torch.ones(batch, self.n_virtual, device=attention_mask.device)
                    return torch.cat((prefix_mask, attention_mask), dim=1)

            def pad_to(x, length, device):
                pad = torch.zeros(x.size(0), length - x.size(1), x.size(-1), device=device)
                return torch.cat([x, pad], dim=1)

            def train_step(model, batch, device):
                lengths = torch.zeros(len(batch))
                ids = torch.tensor(lengths, device=device)
                return model(batch, ids)

            def attend(q, k, mask=None):
                if mask is None:
                    mask = torch.ones(q.size(1), k.size(1), device=q.device)
                return (q @ k.transpose(-1, -2)).masked_fill(mask == 0, float("-inf"))

            class LanguageModel(nn.Module):
                def init_hidden(self, batch_size, device):
                    return torch.zeros(self.layers, batch_size, self.hidden, device=device)
            """,
        ),
        Invalid(
            # Not kept state made once per key: a dict local to the call, and a guard whose body
            # does not store under the key it tests.
            """
            import torch

            class Heads:
                def masks(self, names, size, device):
                    cache = {}
                    for k in names:
                        if k not in cache:
                            cache[k] = torch.ones(size).to(device)
                        if k not in self.means:
                            default = torch.zeros(size).to(device)
                    return cache, default
            """,
            lines=(8, 10),
            fixed="""
            import torch

            class Heads:
                def masks(self, names, size, device):
                    cache = {}
                    for k in names:
                        if k not in cache:
                            cache[k] = torch.ones(size, device=device)
                        if k not in self.means:
                            default = torch.zeros(size, device=device)
                    return cache, default
            """,
        ),
    )
    valid = (
        Valid(
            # Python data is built into a tensor on the host whatever `device=` says, and
            # `as_tensor` aliases an array: `device=` would make the same host tensor and copy.
            """
            import numpy as np
            import torch

            MEAN = (0.5, 0.5, 0.5)

            ids = torch.tensor([1, 2, 3]).to(device)
            scale = torch.tensor(0.5).cuda()
            sizes = [h, w]
            shape = torch.as_tensor(sizes).to(device)

            def reset_memory(tokens, batch_size, device):
                return torch.tensor([tokens] * batch_size).to(device)

            def encode_duration(start_seconds, device):
                return torch.tensor(start_seconds).to(device)

            class Postprocessor:
                def unnormalize(self, masks, frame):
                    std = torch.tensor(self.image_std).to(masks.device)
                    mean = torch.as_tensor(MEAN).to(device=masks.device, dtype=masks.dtype)
                    pixels = torch.as_tensor(np.ascontiguousarray(frame), dtype=torch.float16).to(masks.device)
                    return masks * std + mean, pixels
            """
        ),
        Valid(
            # Setup run once: `__init__`, weight init, training setup, an availability probe, state
            # registered on the spot, dummy inputs for one export or trace, helpers, top-level setup.
            """
            import torch
            from torch import nn

            class SearchSpace(nn.Module):
                def __init__(self, blocks, ops, device="cpu"):
                    super().__init__()
                    self.codes = torch.ones(blocks, ops).to(device)

                def _init_weights(self, module):
                    module.bias.data = torch.linspace(3.0, 6.0, module.bias.numel()).to(module.bias.device)

                def _build_cache(self, n, device):
                    self.register_buffer("positions", torch.arange(n).to(device), persistent=False)

            class Trainer:
                def _setup_train(self):
                    self.flag = torch.zeros(1).to(self.device)

            def _fp16_available(device):
                x = torch.zeros(2, 2, dtype=torch.float16).to(device)
                return bool((x + x).sum() == 0)

            def export_model(model, imgsz, device, path):
                im = torch.zeros(1, 3, *imgsz).to(device)
                model(im)
                export_onnx(model, im, path)
            def log_graph(writer, model, imgsz):
                p = next(model.parameters())
                im = torch.zeros(1, 3, *imgsz).to(p.device).type_as(p)
                writer.add_graph(torch.jit.trace(model, im, strict=False), [])

            def device_constant(device):
                return torch.jit.trace(lambda: torch.ones([]).to(device), example_inputs=[])
            class Exporter:
                def __call__(self, model):
                    im = torch.zeros(self.batch, 3, *self.imgsz).to(self.device)
                    return model(im)
            rollout = torch.zeros(128, 8).to("cuda")  # a script's setup before its loop: once

            # Private helpers called only from setup (`__init__`, a conversion for deployment)
            # or listed only in a registry named for setup: rotary frequencies made at model init.
            def _linear_rotary(cfg, device=None):
                steps = torch.arange(0, cfg.dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float)
                return 1.0 / (cfg.theta ** (steps / cfg.dim)) / cfg.factor

            ROTARY_INIT_FNS: dict = {"linear": _linear_rotary}

            class RepBlock(nn.Module):
                def __init__(self, k, device):
                    super().__init__()
                    self.offsets = self._kernel_offsets(k, device)

                def _kernel_offsets(self, k, device):
                    return torch.arange(k).to(device) - k // 2

                def switch_to_deploy(self):
                    self.bias = self._identity_bias(self.conv.out_channels)

                def _identity_bias(self, channels):
                    return torch.zeros(channels).to(self.conv.weight.device)

                @staticmethod
                def _fuse_bn_tensor(kernel, channels):
                    return kernel, torch.zeros(channels).to(kernel.device)

            # A tensor made only to see whether a backend works, and never used.
            def backend_works(device, index):
                try:
                    _ = torch.ones(4).to(device)
                    torch.empty(2, 2).cuda(index)
                except RuntimeError:
                    return False
                return True
            """
        ),
        Valid(
            # Made on first use and kept: a sample pool, an optimizer's per-parameter state.
            """
            import torch

            class PairPool:
                def push(self, lq):
                    b, c, h, w = lq.size()
                    if not hasattr(self, "pool"):
                        self.pool = torch.zeros(self.size, c, h, w).to(lq.device)
                    self.pool[:b] = lq

            class ScalarNorm(torch.optim.Optimizer):
                def step(self):
                    for group in self.param_groups:
                        for p in group["params"]:
                            state = self.state[p]
                            if len(state) == 0:
                                state["avg"] = torch.zeros_like(p)
                                state["avg_sq"] = torch.zeros([]).to(state["avg"].device)

            class ClassStats:
                def add_classes(self, classes, size, device):
                    for k in classes:
                        if k not in self.means:
                            self.means[k] = torch.zeros(size).to(device)
                            self.covs[k] = torch.eye(size).to(device)
            """
        ),
        Valid(
            # Casts to a dtype only; not a factory's result moved (arithmetic with a tensor, or with
            # what may be one), or moved to the CPU; a CPU generator used on purpose (reproducible).
            """
            import numpy as np
            import torch
            a = torch.zeros(3).to(torch.float16)
            b = torch.zeros(3).to(dtype=torch.float64).long().to(torch.int8)
            c = torch.zeros(3).to(other_tensor)
            d = torch.zeros(3, device=device).to(torch.float16)
            e = torch.ones(2, device="cuda").to(device)
            f = torch.zeros(3).to(x.dtype)
            a = torch.from_numpy(np.zeros(3)).to(device)
            b = torch.stack(items).to(device)
            c = torch.zeros(3).cpu()
            d = torch.zeros(3).to("cpu")
            x = torch.zeros(3)
            y = x.to(device)
            z = (torch.arange(3) + x).cuda() + (torch.ones(3) * weights).to(device)
            zeros = np.zeros(3).to(device)
            g = torch.Generator().manual_seed(0)
            v = torch.rand(3, generator=g).to(device)
            """
        ),
        Valid(
            # `*_like` creates where its source lives: these moves are no-ops or device-to-device.
            """
            import torch

            def causal_pad(cache, inputs, latents, device, dtype, s):
                cache = torch.cat([torch.zeros_like(cache).to(cache.device), cache], dim=2)
                noise = torch.randn_like(inputs).to(inputs.device)
                mask = torch.zeros_like(latents).to(device, dtype)
                ones = torch.ones_like(s).to(s.device)
                return cache, noise, mask, ones

            # `torch.tensor(t)` of a tensor already on the device, or moved to its own device.
            def copy(t, device):
                on_gpu = torch.ones(3, device="cuda")
                a = torch.tensor(on_gpu).to(device)
                b = torch.tensor(t).to(t.device)
                return a, b
            """
        ),
        Valid(
            # Test code: its speed does not matter.
            """
            import pytest
            import torch

            def test_reduce(device):
                expected = torch.tensor([4.0, 6.0]).to(device)
                assert expected.sum() == 10
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        move = as_move(node, self.ctx.scope)
        if move is None or not move.to_accelerator:
            return
        chain = factory_chain(move.receiver, self.ctx.scope)
        if chain is None:
            return
        if untimed_code(self.ctx):
            return  # a test's or a package module's demo's speed does not matter
        if runs_once(self.ctx):
            return  # setup run once: nothing measurable to save
        if _discarded(self.ctx.parent()):
            return  # made only to see whether the device works (or to wake it): nothing is kept
        if not factory_creates_on_cpu(chain.factory, chain.name, move.device_node, self.ctx):
            return
        computed = any(not step.shape for step in chain.steps)
        message = _FROM_DATA_MESSAGE if chain.name == "tensor" else _CHAIN_MESSAGE if computed else None
        fixed = on_device(node, chain, self.ctx.scope, self.ctx.string, self.ctx.parent())
        # Safe where the device-created tensor equals the moved one bit for bit, and is still not a leaf.
        risk = fix_risk(chain, self.ctx.scope)
        fix = None if fixed is None else Fix.judged("Pass `device=` to the factory", {node: fixed}, risk)
        self.report(node, message=message, fix=fix)


def _discarded(holder: cst.CSTNode | None) -> bool:
    """`torch.zeros(1).to(device)` as a statement of its own, or bound to `_`: the tensor is never
    used, so the statement only probes the device."""
    if isinstance(holder, cst.Expr):
        return True
    return (
        isinstance(holder, cst.Assign)
        and len(holder.targets) == 1
        and isinstance(holder.targets[0].target, cst.Name)
        and holder.targets[0].target.value == "_"
    )
