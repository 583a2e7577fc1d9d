"""Does code check whether an accelerator is there, or take its device from its caller?

`torch.cuda.is_available()` used to choose (`checks_availability`; one only printed or logged
chooses nothing), and a parameter that says device (`takes_device`; a process rank only where
the function places data with it). The rest of what code knows of CUDA (flags, tests that say
CUDA is there or missing, names about CUDA) is `guards`'.
"""

from __future__ import annotations

import re

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import VARIABLE, device_argument
from torchdev_lint.analysis.syntax.scopes import Scope, last_name, resolve
from torchdev_lint.analysis.syntax.walk import first, walk

AVAILABILITY_CALLS = frozenset(
    {
        "torch.cuda.is_available",
        "torch.cuda.device_count",
        "torch.accelerator.is_available",
        "torch.accelerator.device_count",
    }
)
_AVAILABILITY_METHODS = frozenset(name.rsplit(".", 1)[-1] for name in AVAILABILITY_CALLS)
_CACHE = "_availability_checked"
# A matrix's rank, not a process's: `reduced_rank`, `lora_rank` (but `local_rank`, `global_rank` are processes').
_MATRIX_RANK = re.compile(r"^(?!(local|global|node|process|dist|world)_)\w+_ranks?$", re.IGNORECASE)

# Methods of loggers and of `warnings` that only report what they are given.
_LOGGING_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "log", "print", "write"}
)


def is_availability_call(node: cst.CSTNode, scope: Scope) -> bool:
    """`torch.cuda.is_available()`, `torch.cuda.device_count()` (or torch.accelerator's)."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    last = last_name(func)
    return last in _AVAILABILITY_METHODS and resolve(func, scope) in AVAILABILITY_CALLS


def checks_availability(node: cst.CSTNode, scope: Scope) -> bool:
    """Does the code under `node` (a function or the module) call an availability check to choose
    with it? One only printed or logged (`print(torch.cuda.is_available())`, an f-string) chooses
    nothing."""
    cache: dict[cst.CSTNode, bool] = scope.module.__dict__.setdefault(_CACHE, {})
    if node not in cache:
        found = False
        reporting = 0  # how many of the nodes entered only report (a print's or a log's argument)

        def enter(child: cst.CSTNode) -> None:
            nonlocal found, reporting
            if _reports(child, scope):
                reporting += 1
            elif not found and not reporting and is_availability_call(child, scope):
                found = True

        def leave(child: cst.CSTNode) -> None:
            nonlocal reporting
            if _reports(child, scope):
                reporting -= 1

        walk(node, enter, leave)
        cache[node] = found
    return cache[node]


def _reports(node: cst.CSTNode, scope: Scope) -> bool:
    """An f-string's field, or a call that prints or logs (`print`, `logger.info`, `warnings.warn`)."""
    if isinstance(node, cst.FormattedStringExpression):
        return True
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    if isinstance(func, cst.Attribute):
        return func.attr.value in _LOGGING_METHODS
    return resolve(func, scope) == "builtins.print"


def takes_device(function: cst.FunctionDef | cst.Lambda, scope: Scope) -> bool:
    """A parameter named like a device (`device`, `dev`, `gpu_id`), annotated `torch.device`, or a
    process rank (`rank`, `local_rank`) the function uses to place data (`.to(rank)`,
    `device=f"cuda:{rank}"`, `torch.cuda.set_device(rank)`): a rank that only numbers the process
    says nothing about where its data goes."""
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        name = param.name.value
        if device_argument(param.name, scope) == VARIABLE and not _MATRIX_RANK.match(name):
            if not _RANK.search(name) or _places_with(function, name):
                return True
        annotation = param.annotation
        if annotation is not None and resolve(annotation.annotation, scope) == "torch.device":
            return True
    return False


def _places_with(function: cst.FunctionDef | cst.Lambda, name: str) -> bool:
    """Does `function` hand the name to a move or a device (`.to(rank)`, `device=rank`,
    `torch.device("cuda", rank)`, `set_device(rank)`, `.cuda(rank)`)?"""

    def places(node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        last = last_name(func)
        arguments = [
            arg.value
            for arg in node.args
            if last in _PLACING_CALLS or (arg.keyword is not None and arg.keyword.value == "device")
        ]
        return any(
            first(argument, lambda n: isinstance(n, cst.Name) and n.value == name) for argument in arguments
        )

    return first(function, places) is not None


_RANK = re.compile(r"(^|_)ranks?$", re.IGNORECASE)
# Calls whose arguments say where data goes.
_PLACING_CALLS = frozenset({"to", "cuda", "device", "set_device", "DistributedDataParallel"})
