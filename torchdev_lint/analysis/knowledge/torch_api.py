"""What torch's functions and methods do to devices: one table the analyses share.

Names are the last part of a `torch.<name>` function or a tensor/module
method. Each set answers one question the device-flow analysis asks ("does
this build a tensor?", "does this keep its receiver's device?", "does this
wait for the GPU?"), so a newcomer looks here, not in the interpreter, to
learn or extend what a torch API means.
"""

from __future__ import annotations

import re

# -- building tensors and modules ------------------------------------------------

# `torch.<name>(...)` that builds a new tensor, on the CPU unless told otherwise.
FACTORIES = frozenset(
    """zeros ones empty full rand randn randint randperm arange linspace logspace eye tensor
    as_tensor from_numpy zeros_like ones_like empty_like full_like rand_like randn_like
    randint_like""".split()
)
# Window functions (`torch.hann_window(n_fft)`): 1-dim tensors on the CPU unless given `device=`.
WINDOW_FACTORIES = frozenset(
    f"torch.{name}_window" for name in ("hann", "hamming", "blackman", "bartlett", "kaiser")
)
# Factories whose result always has at least one dimension.
ALWAYS_NONSCALAR_FACTORIES = frozenset({"arange", "linspace", "logspace", "randperm", "eye"})
# `torch.<name>([a, b])`: joins tensors that must share a device.
JOINS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack"})
# `tensor.<name>(...)`: a new tensor on the receiver's device (unless `device=` says otherwise).
NEW_TENSOR_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# torch.nn classes whose instances hold parameters or buffers.
STATEFUL_NN = re.compile(
    r"^(Lazy)?(Linear|Bilinear|Conv\w*|BatchNorm\w*|SyncBatchNorm|LayerNorm|GroupNorm|RMSNorm|"
    r"Embedding\w*|RNN\w*|LSTM\w*|GRU\w*|Transformer\w*|MultiheadAttention|PReLU)$"
)
# torch.nn containers: stateful when what they hold is.
CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})

# -- operations whose operands must share a device ---------------------------------

# The elementwise ones accept a CPU 0-dim tensor next to a CUDA tensor.
ELEMENTWISE = frozenset(
    """add sub subtract mul multiply div divide true_divide pow maximum minimum where eq ne lt le gt ge
    atan2 add_ sub_ mul_ div_ pow_""".split()
)
STRICT = frozenset({"matmul", "mm", "bmm", "mv", "dot", "index_select", "cdist", "linear", "bilinear"})
STRICT_FUNCTIONAL = frozenset({"linear", "bilinear", "conv1d", "conv2d", "conv3d", "embedding"})
# torch functions that do not return one tensor.
# Namespaces whose functions compute tensors from tensors (`torch.exp`, `torch.linalg.inv`); other
# namespaces hold classes and helpers that take tensors (`torch.distributions`, `torch.optim`).
TENSOR_FUNCTION_MODULES = frozenset({"torch", "torch.linalg", "torch.fft", "torch.special"})
NOT_ONE_TENSOR = frozenset(
    """split chunk unbind tensor_split sort topk max min median mode kthvalue var_mean std_mean meshgrid
    broadcast_tensors unique unique_consecutive frexp aminmax histogram save load equal allclose is_tensor
    numel is_nonzero is_floating_point is_complex result_type""".split()
)

# -- what a method returns --------------------------------------------------------

# Device moves (`.to()`, `.cuda()`, `.cpu()`).
MOVE_METHODS = frozenset({"to", "cuda", "cpu"})
# Module methods torch calls itself (`model(x)` runs `forward`): no call written in a project names them all.
IMPLICITLY_CALLED_METHODS = frozenset(
    {"forward", "extra_repr", "_apply", "_load_from_state_dict", "_save_to_state_dict"}
)
# Methods only an nn.Module has: optimizers share state_dict/load_state_dict/zero_grad,
# tensors share .to/.cuda/.half/.requires_grad_/.share_memory_.
MODULE_ONLY_METHODS = frozenset(
    {
        "eval",
        "train",
        "parameters",
        "named_parameters",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "buffers",
        "named_buffers",
        "forward",
        "register_buffer",
        "register_parameter",
        "register_module",
        "add_module",
        "get_submodule",
        "get_parameter",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
    }
)
# Module methods that run it, read it or set its mode: a loop calling them leaves the module
# as it was (any other, `adaptation(...)`, `load_state_dict(...)`, may change its tensors).
MODULE_KEEPING_METHODS = frozenset(
    """forward eval train zero_grad parameters named_parameters buffers named_buffers modules
    named_modules children named_children state_dict get_submodule get_parameter""".split()
)
# Module methods whose result is a submodule or yields submodules.
SUBMODULE_METHODS = frozenset({"modules", "named_modules", "children", "named_children", "get_submodule"})
# Moves, casts and mode switches: the result is the receiver's kind (a module stays a module).
SAME_KIND_METHODS = MOVE_METHODS | {"half", "float", "double", "bfloat16", "eval", "train"}
# Module methods that return the module itself.
MODULE_SAME = frozenset({"eval", "train", "half", "float", "double", "bfloat16", "share_memory"})
# Tensor methods returning a tensor on the receiver's device with at least its dimensions.
KEEP_SHAPE = frozenset(
    """detach clone contiguous float half double bfloat16 long int bool short byte char abs exp log sqrt
    rsqrt relu sigmoid tanh neg softmax log_softmax clamp clamp_ pin_memory requires_grad_ flatten
    unsqueeze permute transpose t reshape view expand expand_as repeat add sub mul div pow
    sin cos floor ceil round sign masked_fill detach_ add_ sub_ mul_ div_ zero_ fill_ normal_ uniform_
    copy_ cumsum flip roll eq ne lt le gt ge maximum minimum where""".split()
)
# Tensor methods returning a tensor on the receiver's device, maybe 0-dim.
SAME_DEVICE = frozenset(
    """sum mean prod std var norm argmax argmin squeeze matmul mm bmm mv dot index_select gather
    narrow select masked_select nonzero logsumexp all any""".split()
)
# Tensor methods whose result is a host value (a number, a list, a numpy array).
HOST_VALUES = frozenset({"numpy", "tolist", "item", "size", "dim", "numel", "data_ptr", "stride"})
# Tensor methods whose result lives on the host (a number, a list, an array, a CPU copy, a size).
HOST_RESULT_METHODS = frozenset(
    {"item", "tolist", "numpy", "cpu", "size", "dim", "numel", "nelement", "element_size", "data_ptr"}
)
# Tensor attributes that are the tensor itself (or a view of it) and ones that are host metadata.
SELF_ATTRIBUTES = frozenset({"T", "mT", "H", "data", "real", "imag"})
METADATA_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "requires_grad", "is_cuda"})

# -- synchronisation ----------------------------------------------------------------

# Methods that do not read a tensor's data (queue more device work, or look at metadata only).
NOT_READING = frozenset(
    {"to", "cuda", "record_stream", "size", "dim", "numel", "stride", "data_ptr", "is_pinned", "pin_memory"}
)
# Tensor methods that return a view of the receiver's memory: they read none of its values, so
# a view of a pending non-blocking copy is still pending.
VIEWS = frozenset(
    "view view_as reshape unsqueeze squeeze flatten permute transpose t expand narrow detach".split()
)
# Tensor methods that wait for the device to produce the value.
BLOCKING = frozenset({"item", "tolist"})
# Builtins that read the data they are given.
READERS = frozenset(
    f"builtins.{name}" for name in ("print", "int", "float", "bool", "str", "repr", "list", "tuple", "sum")
)
SYNCS = frozenset(
    {
        "torch.cuda.synchronize",
        "torch.accelerator.synchronize",
        "torch.xpu.synchronize",
        "torch.mps.synchronize",
    }
)
# Stream/event methods that wait for (or poll) queued work.
SYNC_METHODS = frozenset({"synchronize", "wait", "query"})

# Callables whose `device=` is a device *type* string compared as text (`"cuda"`, not
# `torch.device`): GradScaler disables itself with a warning where that type is unavailable.
DEVICE_TYPE_PARAMETERS = frozenset(
    {"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.GradScaler"}
)

# -- process-wide settings ------------------------------------------------------------

DEFAULT_DEVICE_SETTERS = frozenset({"torch.set_default_device", "torch.set_default_tensor_type"})
# Modes under which every tensor made is fake: its device is metadata, nothing is allocated.
FAKE_TENSOR_MODES = frozenset(
    {"torch._subclasses.FakeTensorMode", "torch._subclasses.fake_tensor.FakeTensorMode"}
)

# -- sets other analyses ask ------------------------------------------------------------
# ALIASING_METHODS and MEMORY_SHARING_METHODS answer the same question ("may the result share
# the receiver's memory?") with different members; TDL207's aliases ask their union (session 18),
# TDL205's watch MEMORY_SHARING_METHODS alone: one list once a precision pass measures TDL205's.

# Asked by `invariant_moves`.
# Methods that change where (or as what) a module or tensor lives.
RELOCATING_METHODS = frozenset(
    {"to", "cuda", "cpu", "xpu", "mps", "half", "float", "double", "bfloat16", "to_empty", "type"}
)
# Tensor methods whose result may share memory with the receiver (a view, or the receiver itself).
ALIASING_METHODS = RELOCATING_METHODS | frozenset(
    """view view_as reshape reshape_as flatten unflatten squeeze unsqueeze transpose permute t
    expand expand_as narrow select as_strided detach contiguous type_as long int bool real imag
    unfold split chunk unbind tensor_split movedim swapaxes diagonal""".split()
)

# Asked by `batches`.
# Methods whose result may share memory with their receiver (a view, or the receiver itself
# when nothing needs converting), so that writing the result writes the receiver.
MEMORY_SHARING_METHODS = frozenset(
    """numpy view view_as reshape reshape_as flatten squeeze unsqueeze permute transpose t narrow
    select expand expand_as unfold as_strided detach contiguous float half double bfloat16 int long
    short bool byte char type to cpu pin_memory unbind split chunk tensor_split movedim swapaxes
    diagonal values""".split()
)
# Tensor methods that only cast to a dtype (`x.float()`, as `x.to(torch.float32)` does): a move
# behind them (`x.float().to(d)`) still moves `x`.
DTYPE_CAST_METHODS = frozenset(
    "float half double bfloat16 long int short byte char bool cfloat cdouble chalf".split()
)
# Attributes that describe a tensor instead of sharing its memory.
DESCRIPTIVE_ATTRIBUTES = frozenset(
    {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "names"}
)

# Asked by `attribute_uses`.
# A use followed by one of these moves (or re-creates on) the right device where it is used.
MATCHING_METHODS = frozenset({"to", "cuda", "type_as", "new_tensor", "new_zeros", "new_ones", "new_full"})
REGISTERING_METHODS = frozenset({"register_buffer", "register_parameter", "register_module", "add_module"})

# Asked by `tensor_rank`.
# Calls whose first argument (data) decides the tensor's rank: a literal sequence is not a scalar.
DATA_FACTORIES = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray", "torch.from_numpy"})
# Methods that place a tensor by hand: its device is managed there.
PLACING_METHODS = frozenset({"to", "cuda", "cpu", "pin_memory"})

# Asked by `tensor_collections`.
# Factories whose positional arguments are the shape: equal arguments, equal shapes.
SHAPED_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty"})

# Asked by `kinds`.
# Capitalised names under torch.nn that are not modules.
NN_NON_MODULES = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer"})
# Methods that a tensor or a dict has and a module does not: negative evidence.
NON_MODULE_METHODS = frozenset(
    """item numpy tolist size dim numel view reshape unsqueeze squeeze permute transpose
    contiguous detach clone backward keys items values get update pop setdefault""".split()
)

# -- multi-GPU wrappers -----------------------------------------------------------------
# Asked by TDL308 and `parallel_choice`.

# Every public spelling of `nn.DataParallel` (one process driving every GPU). Resolved names are
# compared exactly, so DistributedDataParallel and FullyShardedDataParallel never match.
DATA_PARALLEL_CLASSES = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
# Wrappers that train with one process per GPU: DDP, FSDP, FSDP2's `fully_shard`, `replicate`.
DISTRIBUTED_WRAPPERS = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard",
        "torch.distributed._composable.replicate",
    }
)

# -- private helpers and their public lines -------------------------------------------------
# Asked by TDL309: private helpers that parse or place devices, each with the public line to
# write instead (torch's own public functions call exactly these).

_DEVICE_INDEX = "`torch.device(device).index` (or `torch.cuda.current_device()` when it is None)"
PRIVATE_DEVICE_HELPERS = {
    "torch._utils._get_device_index": _DEVICE_INDEX,
    "torch.cuda._utils._get_device_index": _DEVICE_INDEX,
    "torch.cuda._get_device_index": _DEVICE_INDEX,  # the same function, imported by `torch/cuda/__init__.py`
    "torch._C._cuda_getCurrentBlasHandle": "`torch.cuda.current_blas_handle()`",
    # Parses `Module.to`'s arguments; its result has already grown once (a fourth value, the memory format).
    "torch._C._nn._parse_to": (
        "`super().to(*args, **kwargs)` in the `to()` override and read the device from a parameter "
        "or buffer afterwards (or keep the device in a registered buffer)"
    ),
    "torch._C._cuda_getDeviceCount": "`torch.cuda.device_count()`",
    "torch._C._cuda_getDevice": "`torch.cuda.current_device()`",
    "torch._C._cuda_setDevice": "`torch.cuda.set_device()`",
    "torch._C._cuda_synchronize": "`torch.cuda.synchronize()`",
    "torch._C._cuda_emptyCache": "`torch.cuda.empty_cache()`",
    "torch._C._cuda_getCurrentStream": "`torch.cuda.current_stream()`",
    "torch._C._cuda_getDefaultStream": "`torch.cuda.default_stream()`",
    "torch._C._cuda_getArchFlags": "`torch.cuda.get_arch_list()`",
    "torch._C._cuda_memoryStats": "`torch.cuda.memory_stats()`",
    "torch._C._cuda_resetPeakMemoryStats": "`torch.cuda.reset_peak_memory_stats()`",
    "torch._C._cuda_setMemoryFraction": "`torch.cuda.set_per_process_memory_fraction()`",
    "torch._C._cuda_memorySnapshot": "`torch.cuda.memory_snapshot()`",
    "torch._C._cuda_ipc_collect": "`torch.cuda.ipc_collect()`",
    "torch._C._cuda_init": "`torch.cuda.init()`",
    "torch._C._cuda_get_sync_debug_mode": "`torch.cuda.get_sync_debug_mode()`",
    "torch._C._cuda_set_sync_debug_mode": "`torch.cuda.set_sync_debug_mode()`",
}
# Collectives of `torch.distributed` that take tensors, which an NCCL process group needs on CUDA.
COLLECTIVES = frozenset(
    f"torch.distributed.{name}"
    for name in (
        "all_reduce all_gather all_gather_into_tensor reduce reduce_scatter reduce_scatter_tensor "
        "broadcast all_to_all all_to_all_single gather scatter send recv isend irecv"
    ).split()
)
