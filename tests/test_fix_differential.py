"""Safe fixes keep behaviour: programs run before and after fixing, on the CPU, compared bit for bit.

Each program below exercises one rule's fix: a module of `case_*` functions
(see `differential.py`, which runs them in one subprocess with CUDA emulated on
the CPU and compares dtypes, devices, strides, autograd flags, raw bytes and
exceptions). For every program:

- the safe fixes of its rule keep the outcome of every case;
- a line marked `# safe-fix` gets a safe fix (so the program keeps exercising one);
  a line marked `# not-safe` gets none: there the fix can change behaviour, but
  only on a GPU (other random streams, other kernels, pickled modules left on the
  CPU, races, pinning device memory) or in a way the emulation cannot show;
- the source, the safe-fixed and the all-fixed (unsafe included) sources parse
  under Python 3.10's grammar (and compile with a real Python 3.10 when one is
  installed), and the fixes keep every comment.

The create-then-move factories (TDL203) are generated: factory x source dtype
x target dtype x `.to`/`.cuda` form; hypothesis draws further mixes, f-string
quote kinds included.
"""

from __future__ import annotations

import difflib
import itertools
import re
import traceback
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest
from differential import (
    case_names,
    comments,
    differences,
    oldest_grammar_error,
    python310,
    python310_errors,
    run_programs,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from torchdev_lint.config import Settings, select_rules
from torchdev_lint.engine import check_source
from torchdev_lint.fixes import fix_source
from torchdev_lint.rule import dedent


@dataclass(frozen=True)
class Program:
    rule: str
    name: str
    source: str

    @property
    def ident(self) -> str:
        return f"{self.rule}-{self.name}"


@dataclass
class Fixed:
    """A program, its fixes, and what checking it reported."""

    program: Program
    safe: str
    everything: str
    safeties: dict[int, list[str]] = field(default_factory=dict)  # line -> safety of each fix there
    error: str | None = None


def program(rule: str, name: str, code: str) -> Program:
    return Program(rule, name, dedent(code))


# ---------------------------------------------------------------- TDL101 loads

TDL101 = [
    program(
        "TDL101",
        "state-dicts",
        '''
        import torch
        from torch import nn


        def _saved(name, value):
            torch.save(value, name)
            return name


        def case_into_model():
            path = _saved("sd.pt", nn.Linear(3, 2).cuda().state_dict())
            model = nn.Linear(3, 2)
            model.load_state_dict(torch.load(path))  # safe-fix
            return model


        def case_subscript():
            path = _saved("ck.pt", {"model": nn.Linear(3, 2).cuda().state_dict(), "epoch": 3})
            ckpt = torch.load(path)  # safe-fix
            model = nn.Linear(3, 2)
            model.load_state_dict(ckpt["model"])
            return model


        def case_get():
            path = _saved("ck2.pt", {"model": nn.Linear(3, 2).cuda().state_dict()})
            ckpt = torch.load(path)  # safe-fix
            model = nn.Linear(3, 2).cuda()
            model.load_state_dict(ckpt.get("model"))
            return model


        def case_items_loop():
            heads = {"a": nn.Linear(3, 2), "b": nn.Linear(3, 2)}
            path = _saved("heads.pt", {name: nn.Linear(3, 2).cuda().state_dict() for name in heads})
            for name, sd in torch.load(path).items():  # safe-fix
                heads[name].load_state_dict(sd)
            return heads["b"]


        def case_state_dict_also_read():
            path = _saved("ck3.pt", {"model": nn.Linear(3, 2).cuda().state_dict(), "best": torch.ones(1).cuda()})
            ckpt = torch.load(path)
            model = nn.Linear(3, 2)
            model.load_state_dict(ckpt["model"])
            return ckpt["best"] * 2


        def case_tensor_used():
            path = _saved("t.pt", torch.arange(4.0).cuda())
            t = torch.load(path)
            return t * 2


        def case_tensor_dict_used():
            path = _saved("d.pt", {"w": torch.ones(2).cuda()})
            weights = torch.load(path)
            return weights["w"] + 1


        def case_returned():
            path = _saved("r.pt", {"w": torch.ones(2).cuda()})
            return torch.load(path)


        def case_fstring_double():
            path = _saved("f1.pt", nn.Linear(3, 2).state_dict())
            model = nn.Linear(3, 2)
            return f"{model.load_state_dict(torch.load(path))}"  # safe-fix


        def case_fstring_single():
            path = _saved('f2.pt', nn.Linear(3, 2).state_dict())
            model = nn.Linear(3, 2)
            return f'{model.load_state_dict(torch.load(path))}'  # safe-fix


        def case_fstring_triple():
            path = _saved("f3.pt", nn.Linear(3, 2).state_dict())
            model = nn.Linear(3, 2)
            return f"""{model.load_state_dict(torch.load(path))}""" + f\'\'\'{model.load_state_dict(torch.load(path))}\'\'\'


        def case_fstring_nested():
            path = _saved("f4.pt", nn.Linear(3, 2).state_dict())
            model = nn.Linear(3, 2)
            return f"{f'{model.load_state_dict(torch.load(path))}'}", rf"{model.load_state_dict(torch.load(path))!r:>40}"


        def case_fstring_value():
            path = _saved("f5.pt", torch.ones(2).cuda())
            return f"{torch.load(path)}", f'{torch.load(path).device}'
        ''',
    ),
    program(
        "TDL101",
        "pickled-objects",
        """
        import torch
        from torch import nn


        def case_pickled_module():
            torch.save(nn.Linear(3, 2).cuda(), "m.pt")
            model = torch.load("m.pt", weights_only=False)  # not-safe
            model.eval()
            return model


        def case_pickled_optimizer():
            model = nn.Linear(3, 2).cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            model(torch.ones(1, 3).cuda()).sum().backward()
            optimizer.step()
            torch.save({"model": model.state_dict(), "optimizer": optimizer}, "o.pt")
            ckpt = torch.load("o.pt", weights_only=False)  # not-safe
            model.load_state_dict(ckpt["model"])
            return ckpt["optimizer"].state_dict()


        def case_safe_globals():
            torch.save(nn.Linear(3, 2).cuda(), "g.pt")
            with torch.serialization.safe_globals([nn.Linear]):
                model = torch.load("g.pt")  # not-safe
            return model


        def case_unpacked_args():
            torch.save(torch.ones(2).cuda(), "a.pt")
            args = ("a.pt", "cpu")
            return torch.load(*args)
        """,
    ),
]

# ---------------------------------------------------------------- TDL201 per-item moves

TDL201 = [
    program(
        "TDL201",
        "joins",
        """
        import torch

        device = "cuda"


        def _items():
            return [torch.full((2, 3), float(i)) for i in range(4)]


        def case_stack_list():
            xs = [torch.randn(2, 3) for _ in range(4)]
            return torch.stack([x.to(device) for x in xs])  # safe-fix


        def case_cat_list_cuda():
            xs = [torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)]
            return torch.cat([x.cuda(non_blocking=True) for x in xs], dim=1)  # safe-fix


        def case_other_joins():
            xs = [torch.randn(2, 3) for _ in range(4)]
            rows = torch.vstack([x.to(device) for x in xs])  # safe-fix
            cols = torch.hstack([x.to(device) for x in xs])  # safe-fix
            return rows, cols, torch.column_stack([x.cuda() for x in xs])  # safe-fix


        def case_tuple_wrapped():
            xs = [torch.randn(2, 3, dtype=torch.float64) for _ in range(3)]
            return torch.stack(tuple(x.to(device) for x in xs), dim=1)  # safe-fix


        def case_stack_helper_list():
            xs = _items()
            return torch.stack([x.to(device) for x in xs])


        def case_stack_dtype():
            xs = [torch.tensor([0.1, 2.5]), torch.tensor([1, 2]), torch.tensor([0.1], dtype=torch.float64).repeat(2)]
            return torch.stack([x.to(device, torch.float16, non_blocking=True) for x in xs])


        def case_stack_filtered():
            xs = _items()
            return torch.stack([x.cuda() for x in xs if x.sum() > 0])


        def case_tuple():
            xs = tuple(_items())
            return torch.cat([x.cuda() for x in xs])


        def _stack_param(xs):
            return torch.stack([x.to(device) for x in xs])


        def case_generator():
            return _stack_param(x for x in _items())


        def case_tensor_rows():
            return _stack_param(torch.arange(6.0).reshape(2, 3))


        def case_dict_values():
            return _stack_param({"a": torch.ones(2), "b": torch.zeros(2)}.values())


        def case_out_buffer():
            xs = _items()
            buf = torch.empty(8, 3).cuda()
            result = torch.cat([x.cuda() for x in xs], out=buf)
            return result is buf, buf


        def case_requires_grad():
            xs = [torch.ones(2, requires_grad=True) for _ in range(3)]
            return torch.stack([x.cuda() for x in xs])


        def case_empty():
            return _stack_param([])
        """,
    )
]

# ---------------------------------------------------------------- TDL202 / TDL207 hoists

HOISTS = [
    program(
        "TDL202",
        "module-moves",
        """
        import torch
        from torch import nn

        device = "cuda"


        def case_plain():
            model = nn.Linear(2, 2)
            outputs = []
            # training
            for step in range(3):
                model.to(device)  # safe-fix
                outputs.append(model(torch.ones(1, 2).to(device)))
            return model, outputs


        def case_used_before_move():
            model = nn.Linear(2, 2)
            outputs = []
            for step in range(3):
                outputs.append(model(torch.ones(1, 2)))
                model.to(device)
            return outputs


        def case_moved_back_each_epoch():
            model = nn.Linear(2, 2)
            outputs = []
            for epoch in range(3):
                model.to(device)
                outputs.append(model(torch.ones(1, 2).to(device)))
                model.cpu()
                torch.save(model.state_dict(), "epoch.pt")
            return outputs


        def _offload(module):
            module.cpu()


        def case_moved_back_by_helper():
            model = nn.Linear(2, 2)
            outputs = []
            for epoch in range(3):
                model.to(device)
                outputs.append(model(torch.ones(1, 2).to(device)))
                _offload(model)
            return outputs


        def case_zero_iterations():
            model = nn.Linear(2, 2)
            for step in range(0):
                model.to(device)
            return model


        def case_while_false():
            model = nn.Linear(2, 2)
            steps = 0
            while steps:
                model = model.cuda()
                steps -= 1
            return model
        """,
    ),
    program(
        "TDL207",
        "tensor-moves",
        """
        import torch

        device = "cuda"


        def case_plain():
            weights = torch.tensor([1.0, 5.0])
            total = []
            for step in range(3):
                # the weights on the device
                w = weights.to(device)  # safe-fix
                total.append(w * step)
            return total


        def case_result_mutated():
            weights = torch.tensor([1.0, 5.0])
            seen = []
            for step in range(3):
                w = weights.to(device)
                w.mul_(2)
                seen.append(w.clone())
            return seen


        def case_result_augmented():
            weights = torch.tensor([1.0, 5.0])
            seen = []
            for step in range(3):
                w = weights.to(device)
                w += 1
                seen.append(w.clone())
            return seen


        def case_receiver_in_place():
            buf = torch.zeros(2)
            seen = []
            for step in range(3):
                seen.append(buf.to(device) + 0)
                buf.add_(1)
            return seen


        def case_receiver_out():
            buf = torch.zeros(2)
            seen = []
            for step in range(3):
                w = buf.to(device)
                seen.append(w)
                torch.add(buf, 1, out=buf)
            return seen


        def case_receiver_data():
            buf = torch.zeros(2)
            seen = []
            for step in range(3):
                w = buf.to(device)
                seen.append(w)
                buf.data = buf.data + 1
            return seen


        def _bump(tensor):
            tensor[0] += 1


        def case_receiver_helper():
            buf = torch.zeros(2)
            seen = []
            for step in range(3):
                w = buf.to(device)
                seen.append(w)
                _bump(buf)
            return seen


        def case_receiver_alias():
            buf = torch.zeros(2)
            view = buf[:1]
            seen = []
            for step in range(3):
                w = buf.to(device)
                seen.append(w)
                view.add_(1)
            return seen


        def case_receiver_setitem():
            buf = torch.zeros(2)
            seen = []
            for step in range(3):
                w = buf.to(device)
                seen.append(w)
                buf[1] = step
            return seen


        def case_device_changes():
            buf = torch.zeros(2)
            seen = []
            target = "cpu"
            for step in range(3):
                w = buf.to(target)
                seen.append(w)
                target = device
            return seen


        def case_zero_iterations():
            buf = torch.zeros(2)
            w = None
            for step in range(0):
                w = buf.to(device)
            return w


        def case_attribute():
            class Holder:
                pass

            holder = Holder()
            holder.mask = torch.ones(2)
            out = []
            for step in range(2):
                holder.mask = holder.mask.cuda()
                out.append(holder.mask * step)
            return out, holder.mask
        """,
    ),
]

# ---------------------------------------------------------------- TDL203 hand-written shapes

TDL203 = [
    program(
        "TDL203",
        "shapes",
        """
        import numpy as np
        import torch

        device = "cuda"
        cpu = torch.device("cpu")


        def case_requires_grad():
            return torch.zeros(3, requires_grad=True).to(device)  # not-safe


        def case_memory_format():
            return torch.zeros(2, 3, 4, 5).to(device, memory_format=torch.channels_last)


        def case_cuda_memory_format():
            return torch.ones(2, 3, 4, 5).cuda(memory_format=torch.channels_last)


        def case_as_tensor_copy():
            array = np.arange(3.0)
            result = torch.as_tensor(array).to(cpu, copy=True)
            array[0] = 99.0
            return result


        def case_as_tensor_alias():
            array = np.arange(3.0)
            result = torch.as_tensor(array).to(cpu)
            array[0] = 99.0
            return result


        def case_as_tensor_tensor():
            base = torch.arange(3.0)
            result = torch.as_tensor(base).to(cpu)
            base[0] = 99.0
            return result


        def case_to_dtype_variable():
            dtype = torch.float16
            return torch.zeros(3).to(dtype)


        def case_to_tensor_variable():
            other = torch.zeros(1, dtype=torch.float64).cuda()
            return torch.ones(3).to(other)


        def case_to_positional_flags():
            return torch.tensor([0.1]).to(device, torch.float64, True)


        def case_like_strides():
            base = torch.ones(4, 6).t()
            return torch.zeros_like(base).to(device), torch.full_like(base, 0.1).to(device, torch.float64)


        def case_fstrings():
            return (
                f"{torch.zeros(2).cuda()}",
                f'{torch.zeros(2).cuda()}',
                f\"\"\"{torch.zeros(2).cuda()}\"\"\",
                f'''{torch.zeros(2).cuda()}''',
                f"{f'{torch.zeros(2).cuda()}'}",
                f"{torch.zeros(2).cuda()!r:>60}",
            )


        def case_random():
            return (
                torch.rand(3).cuda(),  # not-safe
                torch.randn(3).to(device),  # not-safe
                torch.randint(0, 9, (3,)).cuda(0),  # not-safe
                torch.arange(10).cuda(),  # not-safe
                torch.linspace(0, 1, 7).to(device),  # not-safe
            )
        """,
    ),
    program(
        "TDL203",
        "casts-and-arithmetic",
        """
        import numpy as np
        import torch

        device = "cuda"


        def case_casts_folded():  # zeros/ones/eye: the last cast becomes `dtype=`
            n = 5
            return (
                torch.zeros(n).long().cuda(),  # safe-fix
                torch.ones(2, 3).bool().to(device),  # safe-fix
                torch.eye(3).half().float().to(device),  # safe-fix
                torch.zeros(4).to(torch.int8).to(device, torch.float64),  # safe-fix
                torch.ones(3).double().to(device, non_blocking=True),  # safe-fix
                torch.zeros_like(torch.ones(2, 3).t()).int().cuda(),  # safe-fix
            )


        def case_casts_kept():  # other factories: made on the device, cast there
            return (
                torch.arange(300, dtype=torch.int32).byte().to(device),  # safe-fix
                torch.full((3,), 7).float().cuda(),  # safe-fix
                torch.full((2,), 300.7).half().to(device, torch.float64),  # safe-fix
                torch.tensor(np.array([0.1, 1e-8, 65504.5, 1e39, -0.0])).float().to(device),  # safe-fix
                torch.arange(0, 1, 0.1).long().cuda(),  # not-safe
            )


        def case_integer_arithmetic():
            offset = len("abc")
            return (
                (torch.arange(6, dtype=torch.long) + offset).cuda(),  # safe-fix
                (torch.arange(6, dtype=torch.int32) * 3 - 1).to(device),  # safe-fix
                (2 * torch.arange(5, dtype=torch.int64)).to(device),  # safe-fix
                (torch.arange(7, dtype=torch.long) // 2).cuda(),  # safe-fix
                (torch.arange(7, dtype=torch.long) % -3).cuda(),  # safe-fix
                (torch.full((3,), 3, dtype=torch.int64) * 2**62).cuda(),  # safe-fix
                (torch.ones(3, dtype=torch.bool) + 2).to(device),  # safe-fix
            )


        def case_integer_overflow():
            return (torch.zeros(3, dtype=torch.uint8) + 300).to(device)  # safe-fix


        def case_float_arithmetic():
            scale = 0.1
            return (
                (torch.ones(4) * 0.5).to(device),  # safe-fix
                (torch.ones(2, 2) * scale + 1e-8).cuda(),  # safe-fix
                (torch.full((3,), 0.1) - 0.3).to(device),  # safe-fix
                (torch.arange(5, dtype=torch.long) * 0.1).to(device),  # safe-fix
                (torch.eye(3, dtype=torch.float64) * (1 / 3)).to(device),  # safe-fix
                (1.5 - torch.zeros(3)).cuda(),  # safe-fix
                (torch.ones(3) * 0.1).to(device, torch.float16),  # safe-fix
            )


        def case_unsafe_arithmetic():
            n = torch.tensor(3).item()
            return (
                (torch.arange(6, dtype=torch.long) / 3).to(device),  # not-safe
                (torch.ones(3) ** 0.5).cuda(),  # not-safe
                (torch.ones(3) // 0.3).cuda(),  # not-safe
                (torch.arange(6, dtype=torch.long) // n).to(device),  # not-safe
                (torch.ones(3, dtype=torch.half) * 0.1).cuda(),  # not-safe
                (torch.arange(6) + 1).cuda(),  # not-safe
                (torch.randn(3) * 2).cuda(),  # not-safe
            )


        def case_zero_divisor():
            zero = int("0")
            return (torch.arange(4, dtype=torch.long) % zero).cuda()  # not-safe


        def case_parentheses():
            x = (torch.ones(3) + 1).cuda() * 2  # safe-fix
            y = [(torch.zeros(2) - 1).cuda(), {"k": (torch.ones(1) * 3).to(device)}]  # safe-fix
            return x, y, f"{(torch.zeros(2) + 1).cuda()}", f'{torch.zeros(2).long().cuda()}'


        def case_reshaped():  # views and reshapes keep the values and strides: the factory decides
            n = 3
            return (
                torch.zeros(n, 4).unsqueeze(0).to(device),  # safe-fix
                torch.ones(2, 3).t().contiguous().cuda(),  # safe-fix
                torch.ones(2, 3).t().cuda(),  # safe-fix
                torch.eye(3).view(-1).long().to(device),  # safe-fix
                torch.full((2, 3), 7).reshape(3, 2).float().cuda(),  # safe-fix
                torch.zeros(2, 3).permute(1, 0).flatten().to(device),  # safe-fix
                torch.arange(6).view(2, 3).to(device),  # not-safe
                torch.zeros(2, 3).expand(4, 2, 3).to(device),  # not-safe
            )


        def case_cast_after_move():
            return torch.zeros(3).cuda().long(), torch.arange(4, dtype=torch.int32).to(device).float()  # safe-fix


        def case_not_numbers():
            base = torch.ones(3)
            return (torch.arange(3) + base).cuda(), (torch.ones(3) * base).to(device), torch.zeros(3).long().half()
        """,
    ),
]

DTYPES = ["None", "torch.float64", "torch.float16", "torch.bfloat16", "torch.int64", "torch.bool"]
TARGETS = [
    "torch.float32",
    "torch.float64",
    "torch.float16",
    "torch.bfloat16",
    "torch.int32",
    "torch.uint8",
    "torch.bool",
]
DATA = "[0.1, -0.0, 1e-08, 65504.5, 3.4e38, float('nan'), float('inf'), 16777217.0, 300.7, -1.5]"
# factory -> (call text with {dtype} for ", dtype=..." or "", random or GPU-kernel dependent, initialised)
FACTORIES: dict[str, tuple[str, bool, bool]] = {
    "tensor": ("torch.tensor(" + DATA + "{dtype})", False, True),
    "tensor_int": ("torch.tensor([0, 1, 255, 300, -1, 2**40]{dtype})", False, True),
    "as_tensor": ("torch.as_tensor(" + DATA + "{dtype})", False, True),
    "zeros": ("torch.zeros((2, 3){dtype})", False, True),
    "ones": ("torch.ones(2, 3{dtype})", False, True),
    "empty": ("torch.empty(2, 3{dtype})", False, False),
    "full": ("torch.full((2, 3), 0.1{dtype})", False, True),
    "full_big": ("torch.full((2,), 300.7{dtype})", False, True),
    "eye": ("torch.eye(3{dtype})", False, True),
    "zeros_like": ("torch.zeros_like(BASE{dtype})", False, True),
    "full_like": ("torch.full_like(BASE, 0.1{dtype})", False, True),
    "empty_like": ("torch.empty_like(BASE{dtype})", False, False),
    "arange": ("torch.arange(0, 1, 0.1{dtype})", True, True),
    "linspace": ("torch.linspace(0, 1, 7{dtype})", True, True),
    "randn": ("torch.randn(3{dtype})", True, True),
}
# `.to`/`.cuda` forms: {dev} is the device, {dt} the target dtype (forms without {dt} keep the dtype)
MOVES = [
    ".to({dev})",
    ".to(device={dev})",
    ".to({dev}, non_blocking=True)",
    ".to({dev}, copy=True)",
    ".to({dev}, {dt})",
    ".to({dev}, dtype={dt})",
    ".to(device={dev}, dtype={dt})",
    ".to(dtype={dt}, device={dev})",
    ".to({dev}, {dt}, non_blocking=True)",
    ".cuda()",
    ".cuda(0)",
    ".cuda(device=0)",
    ".cuda(non_blocking=True)",
    '.to("cuda", {dt})',
    ".to(torch.device('cuda', 0), dtype={dt})",
]
DEVICES = ["device", "cpu", '"cuda"', "torch.device('cuda')"]


def _factory_case(index: int, factory: str, source: str, move: str, target: str, device: str) -> str:
    call, gpu_dependent, initialised = FACTORIES[factory]
    dtype = "" if source == "None" else f", dtype={source}"
    expression = call.format(dtype=dtype) + move.format(dev=device, dt=target)
    on_gpu = ".cuda" in move or "cuda" in device or device == "device"
    # An integer arange computes exact integers on every device.
    exact = factory == "arange" and source in ("torch.int64", "torch.bool")
    mark = "  # not-safe" if gpu_dependent and on_gpu and not exact else ""
    value = expression if initialised and "empty" not in expression else f"meta({expression})"
    return f"def case_{index}_{factory}():\n    return {value}{mark}\n"


def factory_matrix() -> list[Program]:
    """Every factory with every (source, target) dtype pair in one form, and every form with one pair."""
    header = 'import torch\n\ndevice = "cuda"\ncpu = torch.device("cpu")\nBASE = torch.ones(2, 3)\n\n\n'
    programs = []
    dtype_moves = [m for m in MOVES if "{dt}" in m]
    for factory in FACTORIES:
        cases = []
        pairs = itertools.product(DTYPES, TARGETS)
        for number, (source, target) in enumerate(pairs):
            move = dtype_moves[number % len(dtype_moves)]
            device = DEVICES[number % len(DEVICES)]
            cases.append(_factory_case(len(cases), factory, source, move, target, device))
        for number, (move, device) in enumerate(itertools.product(MOVES, DEVICES)):
            if "{dev}" not in move and device != DEVICES[0]:
                continue
            source = DTYPES[number % len(DTYPES)]
            target = TARGETS[number % len(TARGETS)]
            cases.append(_factory_case(len(cases), factory, source, move, target, device))
        programs.append(Program("TDL203", f"matrix-{factory}", header + "\n\n".join(cases)))
    return programs


# ---------------------------------------------------------------- loaders and copies (TDL204, TDL205)

LOADERS = [
    program(
        "TDL204",
        "pin-memory",
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        device = "cuda"


        def case_host_dataset():
            dataset = TensorDataset(torch.arange(8.0).reshape(4, 2), torch.arange(4))
            loader = DataLoader(dataset, batch_size=2)  # safe-fix
            out = []
            for x, y in loader:
                out.append((x.to(device), y.to(device)))
            return out


        def case_device_dataset():
            dataset = TensorDataset(torch.arange(8.0).reshape(4, 2).cuda())
            loader = DataLoader(dataset, batch_size=2)  # not-safe
            return [x.to(device) for (x,) in loader]


        def case_device_factory_dataset():
            dataset = TensorDataset(torch.ones(4, 2, device=device))
            loader = DataLoader(dataset, batch_size=2)  # not-safe
            return [x.to(device) for (x,) in loader]
        """,
    ),
    program(
        "TDL205",
        "non-blocking",
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        device = "cuda"


        def _loader():
            dataset = TensorDataset(torch.arange(8.0).reshape(4, 2), torch.arange(4))
            return DataLoader(dataset, batch_size=2, pin_memory=True)


        def case_plain():
            dataset = TensorDataset(torch.arange(8.0).reshape(4, 2), torch.arange(4))
            loader = DataLoader(dataset, batch_size=2, pin_memory=True)
            out = []
            for x, y in loader:
                x, y = x.to(device), y.cuda()  # safe-fix
                out.append((x, y))
            return out


        class Pair:  # a project batch class whose `to()` takes only a device

            def __init__(self, items):
                self.a = torch.stack([a for a, _ in items])
                self.b = torch.stack([b for _, b in items])

            def to(self, device):
                return (self.a.to(device), self.b.to(device))


        def case_project_class_from_collate_fn():
            dataset = TensorDataset(torch.arange(8.0).reshape(4, 2), torch.arange(4))
            loader = DataLoader(dataset, batch_size=2, pin_memory=True, collate_fn=Pair)
            out = []
            for step, pair in enumerate(loader):
                out.append(pair.to(device))  # not-safe
            for images, targets in DataLoader(dataset, batch_size=2, pin_memory=True, collate_fn=list):
                out.append(images.to(device))  # not-safe
            return out


        def case_may_be_mps():
            target = "mps" if torch.backends.mps.is_available() else "cpu"
            return [x.to(target) for x, y in _loader()]  # not-safe


        def case_written_after():
            out = []
            for x, y in _loader():
                moved = x.to(device)  # not-safe
                x.zero_()
                out.append(moved)
            return out


        def case_augmented_after():
            out = []
            for x, y in _loader():
                moved = x.cuda()  # not-safe
                x += 1
                out.append((moved, x))
            return out


        def case_setitem_after():
            out = []
            for x, y in _loader():
                moved = x.to(device)  # not-safe
                x[0] = 7.0
                out.append(moved)
            return out


        def case_out_after():
            out = []
            for x, y in _loader():
                moved = x.to(device)  # not-safe
                torch.mul(x, 2, out=x)
                out.append(moved)
            return out


        def case_dtype():
            return [x.to(device, dtype=torch.float16) for x, y in _loader()]
        """,
    ),
]

# ---------------------------------------------------------------- TDL303, TDL305, TDL306

PLACEMENT = [
    program(
        "TDL303",
        "numpy",
        """
        import torch
        from torch import nn


        def case_cpu_variable():
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            x = torch.randn(3).to(device)
            array = x.numpy()  # safe-fix
            x.add_(1)
            return array


        def case_module_output():
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(2, 2).to(device)
            with torch.no_grad():
                out = model(torch.ones(1, 2).to(device))
            return out.numpy()
        """,
    ),
    program(
        "TDL305",
        "eval-order",
        """
        import torch
        from torch import nn

        device = "cuda"


        def case_chain():
            return nn.Dropout(0.5).eval().to(device), nn.Linear(2, 2).train(False).cuda()  # safe-fix


        def case_statements():
            model = nn.BatchNorm1d(2)
            # inference only
            model.eval()  # no dropout
            model.to(device)
            return model


        def case_used_between():
            model = nn.Linear(2, 2)
            model.eval()
            first = model(torch.ones(1, 2))
            model.to(device)
            return first, model
        """,
    ),
    program(
        "TDL306",
        "discarded",
        """
        import torch


        def case_same_device():
            x = torch.randn(2)
            x.to("cpu")  # not-safe
            return x


        def case_half():
            x = torch.randn(2)
            x.half()  # keep half precision
            return x
        """,
    ),
]

# ---------------------------------------------------------------- TDL307 legacy types

TDL307 = [
    program(
        "TDL307",
        "legacy",
        """
        import numpy as np
        import torch


        def case_sizes():
            return meta(torch.FloatTensor(4, 16)), meta(torch.DoubleTensor()), meta(torch.ByteTensor(2, 3))


        def case_data():
            return torch.LongTensor([1, 2, 3]), torch.FloatTensor([0.1, 2.5]), torch.LongTensor([1.7, -1.7])


        def case_size_variable():
            n = 3
            return meta(torch.FloatTensor(n))


        def case_list_variable():
            data = [0.1, 0.2]
            return torch.FloatTensor(data)


        def case_size_object():
            return meta(torch.FloatTensor(torch.Size([2, 3])))


        def case_numpy():
            return torch.FloatTensor(np.array([0.1, 0.2]))


        def case_tensor_alias():
            base = torch.zeros(2)
            alias = torch.FloatTensor(base)
            base[0] = 5.0
            return alias


        def case_tensor_other_dtype():
            return torch.FloatTensor(torch.zeros(2, dtype=torch.float64))


        def case_hex_index():  # `.cuda(0x1)` is the device "cuda:1"
            return torch.FloatTensor(2, 3).zero_().cuda(0x1)  # safe-fix


        def case_filled():  # `zero_`/`fill_` folded: `torch.zeros`, `torch.full` (cast to the dtype as before)
            return (
                torch.FloatTensor(2, 3).zero_(),  # safe-fix
                torch.DoubleTensor(2, 3).fill_(0),
                torch.FloatTensor(2, 2).fill_(0.1),
                torch.FloatTensor(2, 2).fill_(-0.0),
                torch.LongTensor(3, 1).fill_(1.7),
                torch.BoolTensor(2, 1).fill_(2),
                torch.HalfTensor(1, 2).fill_(70000),
            )


        def case_fill_overflows():
            return torch.ByteTensor(2).fill_(300)  # safe-fix


        def case_filled_and_moved():  # the move folded too: `device=`
            device = torch.device("cuda")
            return (
                torch.FloatTensor(2, 3).zero_().to(device),  # safe-fix
                torch.FloatTensor(2, 3).fill_(0.1).cuda(),
                torch.DoubleTensor(2, 2).fill_(0.1).to(device, torch.float16),
                torch.FloatTensor(2, 2).zero_().to(device, dtype=torch.float16),
                torch.LongTensor(2, 2).cuda().fill_(-3),
                torch.FloatTensor([0.1, 2.5]).to(device, torch.float64, non_blocking=True),
                meta(torch.FloatTensor(3, 2).to("cuda")),
            )


        def case_type():
            x = torch.tensor([0.1, 2.5], dtype=torch.float64, requires_grad=True)
            return x.type(torch.FloatTensor), x.type(torch.HalfTensor, non_blocking=True), x.type(torch.DoubleTensor) is x


        def static_type_cuda_index():  # `.type` keeps the CUDA index, `.to("cuda")` takes the current device
            x = torch.ones(2).cuda(1)
            return x.type(torch.cuda.HalfTensor)  # not-safe


        def case_default_float():
            torch.set_default_dtype(torch.float64)
            torch.set_default_tensor_type(torch.FloatTensor)
            return torch.tensor([0.1]), torch.get_default_dtype()


        def case_default_string():
            torch.set_default_dtype(torch.float64)
            torch.set_default_tensor_type("torch.FloatTensor")
            return torch.tensor([0.1]), torch.get_default_dtype()


        def case_default_double():
            torch.set_default_tensor_type(torch.DoubleTensor)
            return torch.tensor([0.1]), torch.get_default_dtype()
        """,
    )
]

# ---------------------------------------------------------------- TDL312 amp

TDL312 = [
    program(
        "TDL312",
        "amp",
        """
        import torch
        from torch.cuda.amp import GradScaler, autocast


        def case_scalers():
            return (
                torch.cuda.amp.GradScaler(),  # safe-fix
                torch.cuda.amp.GradScaler(2.0**10, enabled=True),
                torch.cuda.amp.GradScaler(4.0, 3.0, 0.25, 10, True),
                GradScaler(init_scale=8.0, growth_interval=5),
                GradScaler(enabled=False),
            )


        def case_autocasts():
            return (
                torch.cuda.amp.autocast(),  # safe-fix
                torch.cuda.amp.autocast(dtype=torch.bfloat16),
                torch.cuda.amp.autocast(False, torch.float16),
                torch.cuda.amp.autocast(True, torch.bfloat16, False),
                autocast(enabled=True, cache_enabled=False),
            )


        def case_unpacked():
            flags = (False, torch.bfloat16)
            options = {"enabled": False}
            return torch.cuda.amp.autocast(*flags), torch.cuda.amp.GradScaler(**options)


        def case_changed_default_dtype():
            torch.set_autocast_dtype("cuda", torch.bfloat16)
            try:
                return torch.cuda.amp.autocast()
            finally:
                torch.set_autocast_dtype("cuda", torch.float16)


        def case_changed_cache_default():
            torch.set_autocast_cache_enabled(False)
            try:
                return torch.cuda.amp.autocast()
            finally:
                torch.set_autocast_cache_enabled(True)


        @autocast()
        def _decorated(x):
            return x * 2


        def case_decorated():
            return _decorated(torch.tensor([0.1]))


        def case_context():
            with torch.cuda.amp.autocast(dtype=torch.bfloat16):
                return torch.ones(2, 2) @ torch.ones(2, 2)


        def case_fstrings():
            return (
                f"{torch.cuda.amp.GradScaler().get_scale()}",
                f'{torch.cuda.amp.GradScaler().is_enabled()}',
                f\"\"\"{torch.cuda.amp.GradScaler().get_backoff_factor()}\"\"\",
                f"{f'{torch.cuda.amp.GradScaler().get_growth_factor()}'}",
            )
        """,
    )
]

# ---------------------------------------------------------------- rules whose fixes are all unsafe

UNSAFE_ONLY = [
    program(
        "TDL313",
        "unregistered-tensor",
        """
        import torch
        from torch import nn


        class Normalize(nn.Module):
            def __init__(self):
                super().__init__()
                self.mean = torch.tensor([0.5, 0.25]).view(1, 2)  # not-safe

            def forward(self, x):
                return x - self.mean


        def case_forward():
            return Normalize()(torch.ones(3, 2)), sorted(Normalize().state_dict())
        """,
    ),
    program(
        "TDL102",
        "weights-only",
        """
        import torch


        def case_loads():
            torch.save({"w": torch.ones(2)}, "w.pt")
            return torch.load("w.pt", map_location="cpu", weights_only=False), f"{torch.load('w.pt', map_location='cpu', weights_only=False)}"  # not-safe
        """,
    ),
    program(
        "TDL103",
        "save-module",
        """
        import torch
        from torch import nn


        def case_save():
            model = nn.Linear(2, 2)
            torch.save(model, "m.pt")  # not-safe
            return torch.load("m.pt", weights_only=False)
        """,
    ),
    program(
        "TDL105",
        "module-in-dict",
        """
        import torch
        from torch import nn


        def case_save():
            model = nn.Linear(2, 2)
            torch.save({"model": model, "epoch": 1}, "c.pt")  # not-safe
            return torch.load("c.pt", weights_only=False)["epoch"]
        """,
    ),
    program(
        "TDL301",
        "hardcoded",
        """
        import torch


        def case_moves(batch=None):
            x = torch.zeros(2).to("cuda")  # not-safe
            y = torch.ones(2, device="cuda")  # not-safe
            return x, y, f"{torch.zeros(2).to('cuda')}", f'{torch.device("cuda")}'
        """,
    ),
    program(
        "TDL302",
        "mismatch",
        """
        import torch


        def case_mix():
            weights = torch.ones(2, 4).cuda()
            noise = torch.randn(2, 4)
            total = weights + noise  # not-safe
            return total, f"{weights + noise}", f'{torch.cat([weights, noise])}'
        """,
    ),
]

# ---------------------------------------------------------------- TDL208 losses kept with graphs

TDL208 = [
    program(
        "TDL208",
        "accumulated-loss",
        """
        import torch
        from torch import nn


        def _setup():
            torch.manual_seed(0)
            model = nn.Linear(4, 1)
            data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(5)]
            return model, torch.optim.SGD(model.parameters(), lr=0.1), data


        def case_running_total():
            model, opt, data = _setup()
            criterion = nn.MSELoss()
            total = 0.0
            report = []
            for x, y in data:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                total += loss  # safe-fix
            report.append(float(total))
            report.append(model.weight.detach().clone())
            return report


        def case_history():
            model, opt, data = _setup()
            history = []
            running = 0
            for x, y in data:
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                history.append(loss)  # safe-fix
                running = running + loss * x.shape[0]  # safe-fix
            summary = torch.stack(history).sum().item()
            scaled = float(running)
            return summary, scaled


        def case_returned():
            model, opt, data = _setup()
            total = 0
            for x, y in data:
                loss = nn.functional.l1_loss(model(x), y)
                loss.backward()
                total += loss  # not-safe
            return total
        """,
    ),
]

PROGRAMS = [
    *TDL101,
    *TDL208,
    *TDL201,
    *HOISTS,
    *TDL203,
    *factory_matrix(),
    *LOADERS,
    *PLACEMENT,
    *TDL307,
    *TDL312,
    *UNSAFE_ONLY,
]


# ---------------------------------------------------------------- fixing and running


def fix(program: Program) -> Fixed:
    """Check and fix one program; a crash of the checker is kept for its tests to report."""
    try:
        return _fix(program)
    except Exception:  # noqa: BLE001 - one rule's crash must not hide the other rules' results
        return Fixed(program, program.source, program.source, error=traceback.format_exc())


def _fix(program: Program) -> Fixed:
    rules = select_rules([program.rule])
    source = program.source.encode()
    result = check_source("program.py", source, rules, Settings(), skip_filter=False)
    safeties: dict[int, list[str]] = {}
    for diagnostic in result.reported:
        if diagnostic.code == program.rule:
            safeties.setdefault(diagnostic.line, []).append(
                diagnostic.fix.safety if diagnostic.fix else "none"
            )
    safe = fix_source("program.py", source, rules, Settings()).source.decode()
    everything = fix_source("program.py", source, rules, Settings(), unsafe=True).source.decode()
    return Fixed(program, safe, everything, safeties)


def ids(programs: list[Program]) -> list[str]:
    return [p.ident for p in programs]


@cache
def fixed_programs() -> dict[str, Fixed]:
    return {p.ident: fix(p) for p in PROGRAMS}


def fixed_program(program: Program) -> Fixed:
    fixed = fixed_programs()[program.ident]
    assert fixed.error is None, f"checking or fixing the program crashed:\n{fixed.error}"
    return fixed


@cache
def runs() -> dict[str, dict[str, Any]]:
    """Every program and its safe-fixed version, run in one subprocess."""
    sources = {}
    for ident, fixed in fixed_programs().items():
        if fixed.error is not None:
            continue
        sources[f"{ident}:before"] = fixed.program.source
        if fixed.safe != fixed.program.source:
            sources[f"{ident}:after"] = fixed.safe
    return run_programs(sources)


@cache
def python310_failures() -> dict[str, str]:
    interpreter = python310()
    if interpreter is None:
        return {}
    sources = {}
    for ident, fixed in fixed_programs().items():
        sources[f"{ident}:safe"] = fixed.safe
        sources[f"{ident}:all"] = fixed.everything
    return python310_errors(interpreter, sources)


def _marks(source: str, mark: str) -> list[int]:
    return [n for n, line in enumerate(source.splitlines(), 1) if re.search(rf"#.*\b{mark}\b", line)]


def _function_of(source: str, case: str) -> str:
    match = re.search(rf"^def {case}\(.*?(?=^\S|\Z)", source, re.S | re.M)
    return match.group(0) if match else ""


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_safe_fixes_keep_behaviour(program: Program) -> None:
    fixed = fixed_program(program)
    results = runs()
    before = results[f"{program.ident}:before"]
    assert "<module>" not in before, f"the program itself fails: {before['<module>']}"
    assert list(before) == list(case_names(program.source))
    after = results.get(f"{program.ident}:after", before)
    changed = differences(before, after)
    report = []
    for line in changed:
        case = line.split(":", 1)[0]
        old, new = _function_of(program.source, case), _function_of(fixed.safe, case)
        report.append(
            f"{line}\n{''.join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), n=0))}"
        )
    assert not report, f"{program.rule}: safe fixes changed {len(changed)} case(s):\n" + "\n".join(report[:8])


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_safety_where_marked(program: Program) -> None:
    fixed = fixed_program(program)
    problems = []
    for line in _marks(program.source, "safe-fix"):
        if "safe" not in fixed.safeties.get(line, []):
            problems.append(
                f"line {line}: expected a safe {program.rule} fix, got {fixed.safeties.get(line)}"
            )
    for line in _marks(program.source, "not-safe"):
        if "safe" in fixed.safeties.get(line, []):
            text = program.source.splitlines()[line - 1].strip()
            problems.append(
                f"line {line}: {program.rule} offers a safe fix that can change behaviour: {text}"
            )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_fixed_sources_parse_on_oldest_python(program: Program) -> None:
    fixed = fixed_program(program)
    assert oldest_grammar_error(program.source) is None, "the program itself must be valid 3.10 code"
    problems = []
    for kind, text in (("safe", fixed.safe), ("all", fixed.everything)):
        error = oldest_grammar_error(text) or python310_failures().get(f"{program.ident}:{kind}")
        if error:
            problems.append(f"{kind} fixes: {error}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_fixes_keep_comments(program: Program) -> None:
    fixed = fixed_program(program)
    original = comments(program.source)
    for kind, text in (("safe", fixed.safe), ("all", fixed.everything)):
        lost, gained = original - comments(text), comments(text) - original
        assert not lost and not gained, f"{kind} fixes: lost {dict(lost)}, added {dict(gained)}"


# ---------------------------------------------------------------- property-based mixes

QUOTES = ['f"{{{}}}"', "f'{{{}}}'", 'f"""{{{}}}"""', "f'''{{{}}}'''", "f\"{{f'{{{}}}'}}\"", "rf'{{{}!r:>9}}'"]


@st.composite
def factory_expressions(draw: Any) -> str:
    factory = draw(st.sampled_from(sorted(FACTORIES)))
    source = draw(st.sampled_from(DTYPES))
    target = draw(st.sampled_from(TARGETS))
    move = draw(st.sampled_from(MOVES))
    device = draw(st.sampled_from(DEVICES))
    case = _factory_case(0, factory, source, move, target, device)
    expression = case.split("return ", 1)[1].split("  #")[0].strip()
    if draw(st.booleans()) and not expression.startswith("meta("):
        wrapped = draw(st.sampled_from(QUOTES)).format(expression)
        if oldest_grammar_error(wrapped) is None:  # the quotes inside may clash with the f-string's
            expression = wrapped
    return expression


@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate),
)
@given(st.lists(factory_expressions(), min_size=25, max_size=25))
def test_random_factory_mixes_keep_behaviour(expressions: list[str]) -> None:
    header = 'import torch\n\ndevice = "cuda"\ncpu = torch.device("cpu")\nBASE = torch.ones(2, 3)\n\n\n'
    body = "\n\n".join(f"def case_{n}():\n    return {text}\n" for n, text in enumerate(expressions))
    mixed = fix(Program("TDL203", "mix", header + body))
    assert mixed.error is None, mixed.error
    for text in (mixed.safe, mixed.everything):
        assert oldest_grammar_error(text) is None, text
    results = run_programs({"before": mixed.program.source, "after": mixed.safe})
    changed = differences(results["before"], results["after"])
    assert not changed, "\n".join(changed[:5]) + "\n" + mixed.safe
