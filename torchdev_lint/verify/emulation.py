"""Counting host/device traffic, and running CUDA code on the CPU when no GPU is present.

`DeviceMode` is a `TorchFunctionMode`: it sees every torch call a fixture makes
(functions, tensor methods, factories, property getters) before dispatch, so it
knows which Python-level call moved data, which a dispatch-level view would
blur (`torch.tensor(data, device=...)` and `.to()` both become copies there).

Counting works on *virtual* devices. Without emulation a tensor's virtual device
is its real one. With emulation every tensor lives on the CPU, and tensors that
would be on CUDA carry a tag (an attribute, so `swap_tensors` and the
`param.data = ...` of `Module.to` carry it along): calls naming a CUDA device
run on the CPU and tag their results, results of calls on tagged tensors are
tagged, and `.device`/`.is_cuda` answer as CUDA would. A copy is counted
whenever data crosses between the (virtual) host and device, so the counts are
the ones a GPU run would show, while the timings are of the CPU.

Device mismatches are emulated too: an operation mixing a (virtual) CUDA tensor
with a CPU tensor of one or more dimensions raises the error CUDA raises
("Expected all tensors to be on the same device"), except where CUDA accepts the
mix (copies and moves, `*_as` shape helpers, assigning into a CUDA tensor, a CUDA
tensor indexed by CPU indices, CPU scalars).

Not emulated: CUDA's separate random number generator (random factories given
`device="cuda"` draw from the CPU generator here), streams and events;
`torch.cuda.is_available()` keeps answering False.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

TAG = "_torchdev_verify_device"
PINNED = "_torchdev_verify_pinned"
CPU = torch.device("cpu")

Tensor = torch.Tensor
_Base = torch._C.TensorBase

# Calls whose Python data becomes device memory: an H2D copy when the target is a device.
_DATA_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}
# Calls that read device data on the host: a D2H copy that blocks until the device is done.
_HOST_READS = {
    _Base.item,
    _Base.tolist,
    _Base.__bool__,
    _Base.__int__,
    _Base.__float__,
    _Base.__index__,
    Tensor.__repr__,
    Tensor.__format__,
}
# Calls whose output size depends on device data, so CUDA waits for the device (no copy counted).
_SHAPE_SYNCS = {torch.nonzero, _Base.nonzero, torch.masked_select, _Base.masked_select, torch.unique}
# Calls CUDA accepts with tensors on different devices: they copy, or read only shapes or dtypes.
_MIXED_DEVICES_ALLOWED = {
    _Base.__setitem__,
    _Base.view_as,
    _Base.expand_as,
    _Base.reshape_as,
    _Base.type_as,
    _Base.new_tensor,
    _Base.new_zeros,
    _Base.new_ones,
    _Base.new_empty,
    _Base.new_full,
    torch.tensor,
    torch.as_tensor,
    torch.asarray,
}


@dataclass
class Counts:
    """Transfers and synchronisations seen during one run."""

    h2d: int = 0
    d2h: int = 0
    syncs: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _as_device(value: object) -> torch.device | None:
    """The device a `device=` argument names; plain "cuda" is CUDA's current device, 0 here."""
    if isinstance(value, str):
        value = torch.device(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        value = torch.device("cuda", value)
    if not isinstance(value, torch.device):
        return None
    return torch.device("cuda", 0) if value.type == "cuda" and value.index is None else value


def _tensors(value: object) -> list[Tensor]:
    """The tensors in call arguments or results: cheaper than a pytree walk on the hot path."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _getter_of(func: Callable[..., Any]) -> str | None:
    """The property name when `func` is a tensor property getter, else None."""
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", None) == "__get__" and owner is not None:
        return getattr(owner, "__name__", None)
    return None


def _setter_of(func: Callable[..., Any]) -> str | None:
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", None) == "__set__" and owner is not None:
        return getattr(owner, "__name__", None)
    return None


class DeviceMode(TorchFunctionMode):
    """Counts H2D/D2H copies and syncs; with `emulate`, maps CUDA onto the CPU."""

    def __init__(self, emulate: bool) -> None:
        super().__init__()
        self.emulate = emulate
        self.counting = False
        self.counts = Counts()

    # -- virtual devices -------------------------------------------------------------

    def device_of(self, tensor: Tensor) -> torch.device:
        tag = tensor.__dict__.get(TAG) if self.emulate else None
        return tag if tag is not None else _Base.device.__get__(tensor)

    def _on_device(self, tensor: Tensor) -> bool:
        return self.device_of(tensor).type != "cpu"

    def _tag(self, value: object, device: torch.device) -> None:
        """Mark every tensor in `value` as living on `device` (emulation only)."""
        if not self.emulate:
            return
        for tensor in _tensors(value):
            if device.type == "cpu":
                tensor.__dict__.pop(TAG, None)
            else:
                tensor.__dict__[TAG] = device

    def _real(self, device: torch.device | None) -> torch.device | None:
        """The device a call really runs on: the CPU for emulated CUDA."""
        if device is not None and self.emulate and device.type == "cuda":
            return CPU
        return device

    def _count(self, h2d: int = 0, d2h: int = 0, syncs: int = 0) -> None:
        if self.counting:
            self.counts.h2d += h2d
            self.counts.d2h += d2h
            self.counts.syncs += syncs

    def synchronize(self) -> None:
        """Stands for `torch.cuda.synchronize()`: counted, and real when CUDA is."""
        self._count(syncs=1)

    def wrap_load(self, load: Callable[..., Any]) -> Callable[..., Any]:
        """`torch.load` that counts one H2D per tensor it puts on a device.

        Under emulation a `map_location` naming CUDA loads to the CPU and tags the
        tensors; tensors saved from (emulated) CUDA keep their tag through the pickle.
        """

        def patched(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
            named = _as_device(map_location)
            if named is not None:
                map_location = self._real(named)
            result = load(f, map_location, *args, **kwargs)
            tensors = _tensors(result)
            if named is not None:
                self._tag(tensors, named)
            self._count(h2d=sum(1 for t in tensors if self._on_device(t)))
            return result

        return patched

    def wrap_save(self, save: Callable[..., Any]) -> Callable[..., Any]:
        """`torch.save` that counts one D2H copy (and wait) per device tensor it writes."""

        def patched(obj: Any, *args: Any, **kwargs: Any) -> Any:
            on_device = sum(1 for t in _tensors(obj) if self._on_device(t))
            self._count(d2h=on_device, syncs=on_device)
            return save(obj, *args, **kwargs)

        return patched

    # -- the mode --------------------------------------------------------------------

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        getter = _getter_of(func)
        if getter is not None:
            return self._get(func, getter, args, kwargs)
        if _setter_of(func) == "data" and self.emulate:
            result = func(*args, **kwargs)
            self._tag(args[0], self.device_of(args[1]))
            return result
        if func is _Base.to:
            return self._move(func, args, kwargs)
        if func is _Base.cuda:
            return self._cuda(func, args, kwargs)
        if func is _Base.cpu:
            return self._move_to(args[0], CPU, False, lambda: func(*args, **kwargs))
        if func is _Base.copy_:
            return self._copy(func, args, kwargs)
        if func in _HOST_READS:
            return self._host_read(func, args, kwargs)
        if func is _Base.numpy and self._on_device(args[0]):
            raise TypeError(
                f"can't convert {self.device_of(args[0])} device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        if self.emulate and func is _Base.pin_memory:
            result = _Base.clone(args[0])
            result.__dict__[PINNED] = True
            return result
        if self.emulate and func is _Base.is_pinned:
            return bool(args[0].__dict__.get(PINNED))
        return self._call(func, args, kwargs)

    def _get(self, func: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> object:
        tensor = args[0]
        if self.emulate and isinstance(tensor, Tensor) and TAG in tensor.__dict__:
            device = tensor.__dict__[TAG]
            if name == "device":
                return device
            if name == "is_cuda":
                return True
            if name == "is_cpu":
                return False
        result = func(*args, **kwargs)
        if isinstance(result, Tensor) and result is not tensor and isinstance(tensor, Tensor):
            self._tag(result, self.device_of(tensor))
        return result

    def _call(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> object:
        """Any other call: map a named CUDA device, count data factories, propagate tags."""
        named = _as_device(kwargs.get("device"))
        if named is not None:
            kwargs["device"] = self._real(named)
        if self.emulate and kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        inputs = _tensors(args) + _tensors(kwargs)
        if self.emulate and func not in _MIXED_DEVICES_ALLOWED:
            self._refuse_mixed_devices(func, args, inputs)
        if func in _SHAPE_SYNCS or (func is _Base.__getitem__ and self._bool_mask(args)):
            if any(self._on_device(t) for t in inputs):
                self._count(syncs=1)
        if named is not None and named.type != "cpu" and func in _DATA_FACTORIES:
            source = args[0] if args else kwargs.get("data")
            if not (isinstance(source, Tensor) and self._on_device(source)):
                self._count(h2d=1)
        if func is _Base.new_tensor and self._on_device(args[0]) and named is None:
            self._count(h2d=1)
        if func is _Base.__setitem__ and self._on_device(args[0]):
            value = args[2] if len(args) > 2 else None
            if isinstance(value, Tensor) and not self._on_device(value):
                self._count(h2d=1)
        result = func(*args, **kwargs)
        if self.emulate:
            target = named
            if target is None:
                target = next((self.device_of(t) for t in inputs if TAG in t.__dict__), None)
            if target is not None and target.type != "cpu":
                ids = {id(t) for t in inputs}
                fresh = [t for t in _tensors(result) if id(t) not in ids]
                self._tag(fresh, target)
        return result

    def _refuse_mixed_devices(self, func: Callable[..., Any], args: tuple, inputs: list[Tensor]) -> None:
        """Raise CUDA's error for an operation mixing CUDA and CPU tensors (CPU scalars are allowed)."""
        devices = {self.device_of(t) for t in inputs if TAG in t.__dict__}
        name = getattr(func, "__name__", "")
        if not devices or (name.startswith("_") and not name.startswith("__")):
            return  # private helpers (`_has_compatible_shallow_copy_type`) compare metadata only
        if func is _Base.__getitem__:
            inputs = inputs[:1]  # a CUDA tensor may be indexed by CPU indices, not the reverse
            if TAG in inputs[0].__dict__:
                return
        host = [t for t in inputs if TAG not in t.__dict__ and _Base.dim(t) > 0]
        if host:
            cuda = min(devices, key=str)
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{cuda} and cpu! (emulated CUDA: the same error a GPU raises)"
            )

    def _bool_mask(self, args: tuple) -> bool:
        index = args[1] if len(args) > 1 else None
        return any(t.dtype == torch.bool for t in _tensors(index))

    # -- moves -----------------------------------------------------------------------

    def _move(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> object:
        tensor, rest = args[0], args[1:]
        if rest and isinstance(rest[0], Tensor):
            other = rest[0]
            target: torch.device | None = self.device_of(other)
            real_args: tuple = (tensor, _Base.device.__get__(other), other.dtype, *rest[1:])
            non_blocking = bool(kwargs.get("non_blocking", rest[1] if len(rest) > 1 else False))
        else:
            # `_parse_to` knows no `copy=` (Tensor.to does): it changes no device.
            options = {k: v for k, v in kwargs.items() if k != "copy"}
            parsed, _, non_blocking, _ = torch._C._nn._parse_to(*rest, **options)
            target = _as_device(parsed)
            real_args = args
            if "device" in kwargs:
                kwargs["device"] = self._real(_as_device(kwargs["device"]))
            elif rest and _as_device(rest[0]) is not None:
                real_args = (tensor, self._real(_as_device(rest[0])), *rest[1:])
        if target is None:
            result = func(*real_args, **kwargs)
            if result is not tensor:
                self._tag(result, self.device_of(tensor))
            return result
        return self._move_to(tensor, target, non_blocking, lambda: func(*real_args, **kwargs))

    def _cuda(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> object:
        tensor = args[0]
        index = kwargs.get("device", args[1] if len(args) > 1 else None)
        device = _as_device(index if index is not None else "cuda")
        if device is None:
            return func(*args, **kwargs)  # not a device: torch reports it
        non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
        if not self.emulate:
            return self._move_to(tensor, device, non_blocking, lambda: func(*args, **kwargs))
        memory_format = kwargs.get("memory_format", torch.preserve_format)
        return self._move_to(
            tensor,
            device,
            non_blocking,
            lambda: _Base.to(tensor, CPU, copy=True, memory_format=memory_format),
        )

    def _move_to(
        self, tensor: Tensor, target: torch.device, non_blocking: bool, call: Callable[[], Tensor]
    ) -> Tensor:
        """Run a move and count it; emulated moves between host and CUDA really copy."""
        source = self.device_of(tensor)
        crossing = (source.type == "cpu") != (target.type == "cpu")
        if crossing and target.type != "cpu":
            self._count(h2d=1)
        elif crossing:
            self._count(d2h=1, syncs=0 if non_blocking else 1)
        result = call()
        if self.emulate and crossing and result is tensor:
            result = _Base.clone(tensor)
        if result is not tensor:
            self._tag(result, target)
        return result

    def _copy(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> object:
        destination, source = args[0], args[1]
        non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
        to_device, from_device = self._on_device(destination), self._on_device(source)
        if to_device and not from_device:
            self._count(h2d=1)
        elif from_device and not to_device:
            self._count(d2h=1, syncs=0 if non_blocking else 1)
        return func(*args, **kwargs)

    def _host_read(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> object:
        if self._on_device(args[0]):
            self._count(d2h=1, syncs=1)
        return func(*args, **kwargs)


def to_host(value: object) -> object:
    """A copy of a fixture's result that `torch.load(weights_only=True)` can read back.

    Tensors become detached CPU tensors without tags; modules their state dicts;
    objects torch cannot load safely their `repr`.
    """

    def convert(leaf: object) -> object:
        if isinstance(leaf, Tensor):
            return _Base.clone(_Base.to(_Base.detach(leaf), CPU))
        if isinstance(leaf, torch.nn.Module):
            return to_host(dict(leaf.state_dict()))
        if leaf is None or isinstance(leaf, (bool, int, float, complex, str, bytes, torch.dtype)):
            return leaf
        if type(leaf).__module__ == "numpy":
            numpy_value: Any = leaf  # an array or a scalar; numpy is not imported here
            return torch.from_numpy(numpy_value.copy()) if hasattr(leaf, "shape") else numpy_value.item()
        return repr(leaf)

    return tree_map(convert, value)
