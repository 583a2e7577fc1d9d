"""Library knowledge as data: what the analysis assumes of APIs outside the checked project.

One `Model` per API: the API as the analysis meets it (a qualified name, a module, a method
name where the receiver's library cannot be named, a class-name ending), the `Fact` taken
from it, why, and an example program in which the fact decides a finding (the test suite checks
each example with and without its entry: `tests/test_library_models.py`). Analysis modules ask
`apis(fact)`; no rule names a third-party library, and analysis modules name none outside this
table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum


class Fact(Enum):
    """What an API tells the analysis."""

    # Calling it returns data in host memory, whatever its arguments (`host_values`).
    HOST_RESULT = "host result"
    # Every function of this module returns host data (`host_values`, `host_data`).
    HOST_MODULE = "host module"
    # Its result is on the device of its first argument (`host_values`).
    SAME_DEVICE = "same device as the first argument"
    # Importing it makes a module CUDA-only code: it needs an NVIDIA GPU (`requirements`).
    CUDA_ONLY = "CUDA-only module"
    # Calling it raises where no CUDA device is (it initialises CUDA, or claims a GPU): a
    # statement calling it unconditionally lets the program past only where CUDA is (`requirements`).
    NEEDS_CUDA = "raises without a CUDA device"
    # A method that takes a `DataLoader` over and puts its batches on the device itself (`loaders`).
    PLACES_BATCHES = "places batches on the device"
    # A subclass of torch's `DataLoader` that keeps its `pin_memory` and yields host batches
    # (`loaders`): a loader as torch's is, for TDL204 and TDL205.
    TORCH_LOADER = "a torch DataLoader subclass"
    # Functions of this module find checkpoint files that pickle arbitrary objects, so that
    # reading them needs `weights_only=False` (`checkpoint_loads`).
    PICKLED_CHECKPOINTS = "pickled checkpoints"
    # It takes host data only: a loaded checkpoint value handed to it needs no `map_location`
    # (`checkpoint_loads`).
    HOST_CONSUMER = "takes host data only"
    # Creates learnable state in a store of the library's own, which `Module.to()` never moves
    # (`module_classes`).
    PARAM_STORE = "parameter store"
    # A class whose name ends so is a distributed (DDP-like) wrapper of a module (`parallel_choice`).
    DISTRIBUTED_WRAPPER = "distributed wrapper"
    # Joins a process group whose backend is NCCL unless a `backend=` argument says otherwise; it
    # may return without one (a single process), so it is no gate by itself (`requirements`).
    NCCL_GROUP = "starts an NCCL process group"
    # Returns the process group's size, 1 whenever no group is initialised (`process_groups`).
    WORLD_SIZE = "world size, 1 without a process group"
    # A decorator whose function runs once per instance or per arguments, its result kept: the
    # body is setup code (`setup_code`).
    CACHED_RESULT = "result computed once and cached"
    # Returns a tensor (of at least one dimension) in host memory, whatever its arguments: an
    # image decoded or converted on the CPU (`flow_calls`).
    CPU_TENSOR = "returns a CPU tensor"


@dataclass(frozen=True)
class Model:
    api: str
    fact: Fact
    why: str
    # A program in which the fact decides a finding, and what the finding is without the entry:
    # (code, line) reported without it, absent with it; with `finds`, the other way round (a fact
    # that lets a rule see a problem: absent without the entry, reported with it).
    example: str
    without: tuple[str, int]
    finds: bool = False


_K2_HOST = """\
import k2
import torch

def prepare(arcs, lang_dir):
    torch.save({call}.as_dict(), lang_dir / "L.pt")

def load(lang_dir):
    return torch.load(lang_dir / "L.pt")
"""
_CONSUMED = """\
import numpy as np
import torch

def restore(path):
    state = torch.load(path)
    return {call}
"""
_STORED = """\
import {root}
import torch
from torch import nn

class Topics(nn.Module):
    def __init__(self, n_words, n_topics):
        super().__init__()
        self.prior = torch.tensor([1.0, 0.5])
        self.shape = (n_topics, n_words)

    def guide(self, docs):
        loc = {api}("loc", torch.zeros(self.shape))
        return (loc + self.prior) @ docs
"""
_CUDA_ONLY = """\
import {api}
import torch

def run(model, x):
    return model(x.cuda())
"""
_NEEDS_CUDA = """\
import torch

def timed(model, x):
    {call}
    return model(x.cuda())
"""
_PLACED = """\
import torch
from torch.utils.data import DataLoader

def build(dataset, accelerator):
    return accelerator.{api}(DataLoader(dataset, batch_size=8))

def train(model, loader):
    for x, y in loader:
        model(x.to("cuda"), y.to("cuda"))
"""
_LOADER = """\
import torch
from {module} import {name}

def train(model, dataset):
    for batch in {name}(dataset, batch_size=32):
        model(batch.to("cuda"))
"""
_DORA_DISTRIB = """\
import torch
from dora import distrib

size = 1

def init():
    global size
    distrib.init()
    size = {size}

def average(values):
    if size == 1:
        return values
    total = torch.tensor(values, device="cuda")
    return (total.sum() / size).item()
"""
_WRAPPED = """\
import torch
from torch.nn import DataParallel
from fairscale.nn import {api}

def wrap(model, distributed):
    if distributed:
        return {api}(model)
    else:
        return DataParallel(model)
"""
_CACHED = """\
import torch
{imports}

class Embedder:
    def __init__(self, model, device):
        self.model, self.device = model, device

    @{decorator}
    def dimension(self):
        probe = torch.rand(1, 16000).to(self.device)
        return self.model(probe).shape[-1]
"""


_IMAGE_INPUT = """\
import torch
from torch import nn
import {module}

def classify(path):
    model = nn.Linear(3, 2).to(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    return model({call}.unsqueeze(0))
"""


def _cpu_tensor(api: str, call: str, why: str) -> Model:
    module = api.rsplit(".", 1)[0]
    example = _IMAGE_INPUT.format(module=module, call=call.format(api=api))
    return Model(api, Fact.CPU_TENSOR, why, example, ("TDL302", 7), finds=True)


def _k2(call: str, why: str, fact: Fact = Fact.HOST_RESULT) -> Model:
    api = call.split("(", 1)[0]
    return Model(api, fact, why, _K2_HOST.format(call=call), ("TDL101", 8))


def _consumer(call: str, why: str) -> Model:
    api = call.split("(", 1)[0].replace("np.", "numpy.", 1)
    return Model(api, Fact.HOST_CONSUMER, why, _CONSUMED.format(call=call), ("TDL101", 5))


def _cuda_only(api: str, why: str) -> Model:
    return Model(api, Fact.CUDA_ONLY, why, _CUDA_ONLY.format(api=api), ("TDL301", 5))


def _needs_cuda(call: str, why: str) -> Model:
    api = call.split("(", 1)[0]
    return Model(api, Fact.NEEDS_CUDA, why, _NEEDS_CUDA.format(call=call), ("TDL301", 5))


def _placing(api: str, why: str) -> Model:
    return Model(api, Fact.PLACES_BATCHES, why, _PLACED.format(api=api), ("TDL204", 5))


def _loader(api: str, why: str) -> Model:
    module, name = api.rsplit(".", 1)
    return Model(
        api, Fact.TORCH_LOADER, why, _LOADER.format(module=module, name=name), ("TDL204", 5), finds=True
    )


def _cached(api: str, decorator: str, why: str) -> Model:
    module, name = api.rsplit(".", 1)
    example = _CACHED.format(imports=f"from {module} import {name}", decorator=decorator)
    return Model(api, Fact.CACHED_RESULT, why, example, ("TDL203", 10))


MODELS: tuple[Model, ...] = (
    Model(
        "torch.from_numpy",
        Fact.HOST_RESULT,
        "shares the NumPy array's host memory",
        "import numpy as np\nimport torch\n\ndef prepare(values, out):\n"
        '    torch.save(torch.from_numpy(values), out / "table.pt")\n\n'
        'def load(out):\n    return torch.load(out / "table.pt")\n',
        ("TDL101", 8),
    ),
    Model(
        "numpy",
        Fact.HOST_MODULE,
        "NumPy arrays live in host memory",
        'import numpy as np\nimport torch\n\ndef prepare(values, out):\n    torch.save(np.stack(values), out / "table.pt")\n\n'
        'def load(out):\n    return torch.load(out / "table.pt")\n',
        ("TDL101", 8),
    ),
    Model(
        "torch.tensor",
        Fact.SAME_DEVICE,
        "copies its data, which stays where it was unless `device=` says otherwise",
        "import numpy as np\nimport torch\n\ndef prepare(values, out):\n"
        '    torch.save(torch.tensor(np.stack(values)), out / "table.pt")\n\n'
        'def load(out):\n    return torch.load(out / "table.pt")\n',
        ("TDL101", 8),
    ),
    _k2("k2.Fsa.from_str(arcs)", "an FSA parsed from text is built on the CPU"),
    _k2("k2.Fsa.from_openfst(arcs)", "an FSA parsed from OpenFst text is built on the CPU"),
    _k2(
        "k2.Fsa.from_dict(k2.Fsa.from_str(arcs).as_dict())",
        "keeps the device of its tensors",
        Fact.SAME_DEVICE,
    ),
    _k2("k2.arc_sort(k2.Fsa.from_str(arcs))", "FSA algorithms keep the FSA's device", Fact.SAME_DEVICE),
    _k2("k2.top_sort(k2.Fsa.from_str(arcs))", "FSA algorithms keep the FSA's device", Fact.SAME_DEVICE),
    _k2("k2.connect(k2.Fsa.from_str(arcs))", "FSA algorithms keep the FSA's device", Fact.SAME_DEVICE),
    _k2("k2.remove_epsilon(k2.Fsa.from_str(arcs))", "FSA algorithms keep the FSA's device", Fact.SAME_DEVICE),
    _k2("k2.determinize(k2.Fsa.from_str(arcs))", "FSA algorithms keep the FSA's device", Fact.SAME_DEVICE),
    _consumer('torch.from_numpy(state["table"])', "reads a NumPy array, which is host memory"),
    _consumer('np.asarray(state["table"])', "makes a host array of what it is given"),
    _consumer('np.array(state["table"])', "makes a host array of what it is given"),
    _consumer('np.random.set_state(state["numpy_rng"])', "NumPy's generator state is host data"),
    Model(
        "pyro.param",
        Fact.PARAM_STORE,
        "Pyro's param store holds the state; the module runs where the default device puts it",
        _STORED.format(root="pyro", api="pyro.param"),
        ("TDL313", 8),
    ),
    Model(
        "pyro.primitives.param",
        Fact.PARAM_STORE,
        "the same function under its defining module",
        _STORED.format(root="pyro.primitives", api="pyro.primitives.param"),
        ("TDL313", 8),
    ),
    _cuda_only("tensorrt", "TensorRT engines run on NVIDIA GPUs only"),
    _cuda_only("torch_tensorrt", "compiles to TensorRT engines, NVIDIA GPUs only"),
    _cuda_only("torch2trt", "NVIDIA's converter to TensorRT engines, which run on NVIDIA GPUs only"),
    _cuda_only("pycuda", "binds the CUDA driver API"),
    _cuda_only("cupy", "CuPy arrays live on NVIDIA GPUs"),
    _cuda_only("apex", "NVIDIA's fused kernels and AMP need CUDA"),
    _cuda_only("flash_attn", "FlashAttention kernels are CUDA kernels"),
    _cuda_only("cutlass", "NVIDIA CUTLASS kernels"),
    _cuda_only("isaacgym", "NVIDIA Isaac Gym needs an NVIDIA GPU and driver (its system requirements)"),
    _cuda_only("setGPU", "picks an NVIDIA GPU as it is imported and fails without one"),
    _needs_cuda("torch.cuda.set_device(0)", "selects a GPU; raises without one"),
    _needs_cuda("torch.cuda.current_device()", "initialises CUDA to name the current GPU"),
    _needs_cuda("torch.cuda.synchronize()", "initialises CUDA to wait for the current GPU"),
    _needs_cuda("torch.cuda.init()", "initialises CUDA"),
    _needs_cuda("torch.cuda.get_device_name()", "reads the GPU's properties, initialising CUDA"),
    _needs_cuda("torch.cuda.get_device_properties(0)", "initialises CUDA to read a GPU's properties"),
    _needs_cuda("torch.cuda.get_device_capability()", "reads the GPU's properties, initialising CUDA"),
    _needs_cuda("torch.cuda.current_stream()", "initialises CUDA for the current GPU's stream"),
    _needs_cuda("torch.cuda.default_stream()", "initialises CUDA for the current GPU's stream"),
    _needs_cuda("torch.cuda.Stream()", "creates a stream on the current GPU"),
    _needs_cuda("torch.cuda.mem_get_info()", "asks the current GPU's driver for free memory"),
    _needs_cuda("torch.cuda.reset_peak_memory_stats()", "names the current GPU, initialising CUDA"),
    _needs_cuda("torch.cuda.set_per_process_memory_fraction(0.5)", "initialises CUDA to cap a GPU's memory"),
    _needs_cuda("torch.cuda.get_rng_state()", "initialises CUDA to read a GPU's generator"),
    _loader(
        "torch_geometric.loader.DataLoader", "PyG's graph loader subclasses torch's, `**kwargs` passed on"
    ),
    _loader(
        "torch_geometric.data.DataLoader", "PyG's deprecated alias of `torch_geometric.loader.DataLoader`"
    ),
    _loader("monai.data.DataLoader", "MONAI's loader subclasses torch's, `**kwargs` passed on"),
    _placing("prepare", "accelerate's `Accelerator.prepare` wraps the loader to put batches on its device"),
    _placing("prepare_data_loader", "accelerate's `prepare_data_loader` does the same for one loader"),
    _placing("setup_dataloaders", "Lightning Fabric's `setup_dataloaders` moves batches to the device"),
    Model(
        "deepspeed",
        Fact.PICKLED_CHECKPOINTS,
        "DeepSpeed's optimizer and model-state files pickle client state and optimizer classes",
        "import torch\nfrom deepspeed.utils.zero_to_fp32 import get_optim_files\n\n"
        "def restore(folder):\n    return torch.load(get_optim_files(folder)[0], weights_only=False)\n",
        ("TDL102", 5),
    ),
    _cached(
        "functools.cached_property", "cached_property", "computed on first access, then kept per instance"
    ),
    _cached("functools.cache", "cache", "computed once per arguments, then returned from the cache"),
    _cached("functools.lru_cache", "lru_cache(maxsize=None)", "computed once per arguments while cached"),
    Model(
        "dora.distrib.init",
        Fact.NCCL_GROUP,
        "Dora's `init(backend='nccl')` sets the CUDA device and asserts CUDA for NCCL; one process starts no group",
        _DORA_DISTRIB.format(size="distrib.world_size()"),
        ("TDL301", 14),
    ),
    Model(
        "dora.distrib.world_size",
        Fact.WORLD_SIZE,
        "Dora's `world_size()` is `torch.distributed.get_world_size()` with a group, 1 without",
        _DORA_DISTRIB.format(size="distrib.world_size()"),
        ("TDL301", 14),
    ),
    Model(
        "DistributedDataParallel",
        Fact.DISTRIBUTED_WRAPPER,
        "other libraries' DDP wrappers (apex, fairscale) keep torch's class name",
        _WRAPPED.format(api="DistributedDataParallel"),
        ("TDL308", 9),
    ),
    Model(
        "ShardedDataParallel",
        Fact.DISTRIBUTED_WRAPPER,
        "fairscale's sharded DDP",
        _WRAPPED.format(api="ShardedDataParallel"),
        ("TDL308", 9),
    ),
    _cpu_tensor(
        "torchvision.transforms.functional.to_tensor",
        "{api}(path)",
        "converts a PIL image or NumPy array into a new CPU tensor",
    ),
    _cpu_tensor(
        "torchvision.transforms.functional.pil_to_tensor",
        "{api}(path)",
        "converts a PIL image into a new CPU tensor",
    ),
    _cpu_tensor("torchvision.io.read_image", "{api}(path)", "reads and decodes a file on the CPU"),
    _cpu_tensor("torchvision.io.decode_image", "{api}(path)", "decodes the image on the CPU"),
)


@functools.cache
def apis(fact: Fact) -> frozenset[str]:
    """The APIs the table models with `fact` (asked at each use, never copied into a module's
    constant, so that the table is the one place to change)."""
    return frozenset(model.api for model in MODELS if model.fact is fact)


@functools.cache
def endings(fact: Fact) -> tuple[str, ...]:
    """`apis(fact)` as a tuple, for `str.endswith`."""
    return tuple(sorted(apis(fact)))


def host_module(name: str) -> bool:
    """Is `name` (resolved, `numpy.stack`) a function of a module whose functions return host data?"""
    return name.split(".", 1)[0] in apis(Fact.HOST_MODULE)


def pickled_checkpoint_finder(name: str) -> bool:
    """Is `name` (resolved) a function of a library whose checkpoint files pickle objects?"""
    return name.split(".", 1)[0] in apis(Fact.PICKLED_CHECKPOINTS)


@functools.cache
def value_libraries() -> tuple[str, ...]:
    """The modules whose functions the table knows as values (for a project package that
    re-exports one under its own name: `analysis/provenance/host_facts.py`)."""
    roots = {m.api.split(".", 1)[0] for m in MODELS if m.fact in (Fact.HOST_RESULT, Fact.SAME_DEVICE)}
    return tuple(sorted(roots | apis(Fact.HOST_MODULE)))
