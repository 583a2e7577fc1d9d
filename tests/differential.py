"""Run programs before and after fixing them, on the CPU, and compare what they computed.

A program is a module whose `case_*` functions each return a value (its
`static_*` functions are only checked and fixed, never run). The driver
(this file run as a script, in a subprocess so that global torch state and the
CUDA emulation never touch the test process) imports each program, calls every
case once from the same seed, and writes a fingerprint of each result or
exception as JSON. CUDA is emulated on the CPU (`torchdev_lint.verify.emulation`):
`.cuda()`, `device="cuda"` and `map_location="cuda"` run on the CPU and answer
`.device` as CUDA would, so moves show up as device changes.

Fingerprints are compared for equality: a tensor's dtype, (emulated) device,
shape, strides, `requires_grad`, `is_leaf` and raw bytes (bit for bit, so NaN
payloads and signed zeros count; wrap a tensor in `meta(...)` when its memory
is uninitialised), a module's mode and state, an exception's type and message.

Also here: the oldest-grammar check (Python 3.10) and the comment multiset,
which the corpus script shares.
"""

from __future__ import annotations

import ast
import collections
import functools
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tokenize
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

OLDEST_PYTHON = (3, 10)


# ------------------------------------------------------------------ grammar and comments


def oldest_grammar_error(source: bytes | str) -> str | None:
    """Why `source` does not parse under Python 3.10's grammar, or None when it does.

    `ast.parse(feature_version=...)` rejects newer syntax that this interpreter
    knows (`except*`); the quote rules inside f-strings are those of 3.11 and
    older as long as this interpreter is 3.11 (PEP 701 came in 3.12).
    `python310_errors` asks a real 3.10 where one is installed.
    """
    try:
        ast.parse(source, feature_version=OLDEST_PYTHON)
    except (SyntaxError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def python310() -> str | None:
    """A Python 3.10 interpreter: `$TDL_PYTHON310`, `python3.10` on PATH, or pyenv's; None if none runs."""
    candidates = [os.environ.get("TDL_PYTHON310") or "", shutil.which("python3.10") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return candidate
    return None


_COMPILE_ALL = """
import json, sys
errors = {}
for name, text in json.load(sys.stdin).items():
    try:
        compile(text, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        errors[name] = f"{type(error).__name__}: {error}"
json.dump(errors, sys.stdout)
"""


def python310_errors(interpreter: str, sources: Mapping[str, str]) -> dict[str, str]:
    """Compile every source with a real Python 3.10 in one process; the ones that fail, with why."""
    done = subprocess.run(
        [interpreter, "-c", _COMPILE_ALL],
        input=json.dumps(dict(sources)),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout)


def comments(source: bytes | str) -> collections.Counter[str]:
    """The multiset of comments in `source` (empty if it does not tokenize)."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    found: collections.Counter[str] = collections.Counter()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                found[token.string.rstrip()] += 1
    except (tokenize.TokenError, SyntaxError):
        return collections.Counter()
    return found


# ------------------------------------------------------------------ the parent side


def run_programs(programs: Mapping[str, str], timeout: float = 600) -> dict[str, dict[str, Any]]:
    """Run each program (id -> source) in one subprocess; id -> case name -> fingerprint."""
    with tempfile.TemporaryDirectory(prefix="tdl-differential-") as temp:
        manifest = []
        for index, (ident, source) in enumerate(programs.items()):
            path = os.path.join(temp, f"program_{index}.py")
            Path(path).write_text(source, encoding="utf-8")
            manifest.append({"id": ident, "path": path})
        spec = os.path.join(temp, "manifest.json")
        out = os.path.join(temp, "results.json")
        Path(spec).write_text(json.dumps({"programs": manifest, "out": out}), encoding="utf-8")
        env = dict(os.environ, PYTHONHASHSEED="0", CUDA_VISIBLE_DEVICES="")
        done = subprocess.run(
            [sys.executable, __file__, spec], capture_output=True, text=True, timeout=timeout, env=env
        )
        if done.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"differential driver failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(Path(out).read_text(encoding="utf-8"))


def differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """One line per case whose outcome differs: where in the value, and how."""
    lines = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, "<not run>"), after.get(name, "<not run>")
        if old != new:
            lines.append(f"{name}: " + "; ".join(_delta(old, new, "")[:6]))
    return lines


def _delta(old: object, new: object, path: str) -> list[str]:
    """Paths at which two fingerprints differ, with both sides (bytes abbreviated)."""
    if isinstance(old, dict) and isinstance(new, dict) and set(old) == set(new):
        return [d for key in old for d in _delta(old[key], new[key], f"{path}.{key}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _delta(a, b, f"{path}[{i}]")
        ]
    if old == new:
        return []
    return [f"{path or 'value'}: {_short(old)} -> {_short(new)}"]


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) < 120 else text[:120] + "..."


# ------------------------------------------------------------------ the driver (subprocess)


class Meta:
    """A tensor whose memory is uninitialised: compare everything but its values."""

    def __init__(self, tensor: object) -> None:
        self.tensor = tensor


def _fingerprint(value: object, device_of: Any, depth: int = 0) -> object:
    import numpy
    import torch

    if depth > 6:
        return "<deep>"
    if isinstance(value, Meta):
        return {"meta": _tensor(value.tensor, device_of, with_values=False)}
    if isinstance(value, torch.Tensor):
        return _tensor(value, device_of, with_values=True)
    if isinstance(value, torch.nn.Module):
        state = {
            k: _fingerprint(v, device_of, depth + 1) for k, v in value.state_dict(keep_vars=True).items()
        }
        return {"module": type(value).__name__, "training": value.training, "state": state}
    if isinstance(value, numpy.ndarray):
        return {"ndarray": str(value.dtype), "shape": list(value.shape), "bytes": value.tobytes().hex()}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [_fingerprint(v, device_of, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[repr(k), _fingerprint(v, device_of, depth + 1)] for k, v in value.items()]}
    if isinstance(value, float):
        return {"float": value.hex()}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return repr(value)
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        fields = {k: _fingerprint(v, device_of, depth + 1) for k, v in sorted(attributes.items())}
        return {"object": type(value).__name__, "fields": fields}
    return {"object": type(value).__name__}


def _tensor(tensor: Any, device_of: Any, with_values: bool) -> dict[str, object]:
    import torch

    print_ = {
        "dtype": str(tensor.dtype),
        "device": str(device_of(tensor)),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()) if tensor.layout == torch.strided else None,
        "requires_grad": tensor.requires_grad,
        "is_leaf": tensor.is_leaf,
    }
    if with_values:
        data = torch._C.TensorBase.detach(tensor).contiguous().reshape(-1)
        print_["bytes"] = data.view(torch.uint8).numpy().tobytes().hex()
    return print_


def _outcome(call: Any, mode: Any) -> object:
    try:
        with mode:
            value = call()
    except Exception as error:  # noqa: BLE001 - the exception is the outcome
        message = str(error).splitlines()[0] if str(error) else ""
        return {"raised": type(error).__name__, "message": message[:300]}
    return _fingerprint(value, mode.device_of)


def _reset(torch: Any, seed: int = 0) -> None:
    import random

    import numpy

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)


def _drive(spec_path: str) -> None:
    import importlib.util
    import warnings

    import torch
    import torch.cuda.amp.common

    from torchdev_lint.verify.emulation import DeviceMode

    warnings.simplefilter("ignore")
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    mode = DeviceMode(emulate=True)
    torch.load = torch.serialization.load = mode.wrap_load(torch.serialization.load)
    torch.save = torch.serialization.save = mode.wrap_save(torch.serialization.save)
    # CUDA is emulated: let amp objects configure themselves as they would with a GPU.
    torch.cuda.amp.common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *args, **kwargs: True
    results: dict[str, dict[str, object]] = {}
    start = os.getcwd()
    for index, program in enumerate(spec["programs"]):
        cases: dict[str, object] = {}
        work = tempfile.mkdtemp(prefix=f"run{index}-")
        os.chdir(work)
        _reset(torch)
        module_spec = importlib.util.spec_from_file_location(f"differential_program_{index}", program["path"])
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        module.__dict__["meta"] = Meta
        loaded = _outcome(functools.partial(module_spec.loader.exec_module, module), mode)
        if loaded is not None:
            cases["<module>"] = loaded
        else:
            for name, function in list(vars(module).items()):
                if name.startswith("case_") and callable(function):
                    _reset(torch)
                    cases[name] = _outcome(function, mode)
        _reset(torch)
        os.chdir(start)
        shutil.rmtree(work, ignore_errors=True)
        results[program["id"]] = cases
    Path(spec["out"]).write_text(json.dumps(results), encoding="utf-8")


def case_names(source: str) -> Iterable[str]:
    """The `case_*` functions a program defines, in order."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("case_"):
            yield node.name


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    _drive(sys.argv[1])
