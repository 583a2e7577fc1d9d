"""Functions that profile CUDA: CUDA-only on purpose, like a benchmark.

A function that records CUDA activity (`torch.profiler.profile(activities=[...,
ProfilerActivity.CUDA])`) or sorts its table by CUDA time (`sort_by="self_cuda_time_total"`)
measures the GPU; its `.to("cuda")` is what it is for, not a slip that breaks a CPU-only
machine. A test of the activities (`ProfilerActivity.CUDA in args.activities`) or a sort key
chosen at run time is no such evidence.
"""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.context.guards import name_words
from torchdev_lint.analysis.syntax.scopes import Scope, resolve
from torchdev_lint.analysis.syntax.walk import first

_CACHE = "_profiles_cuda"


def in_cuda_profiler(scope: Scope) -> bool:
    """Does code in `scope` lie in a function (or one enclosing it) that profiles CUDA?"""
    current: Scope | None = scope
    while current is not None:
        if isinstance(current.node, cst.FunctionDef) and profiles_cuda(current.node, current):
            return True
        current = current.parent
    return False


def profiles_cuda(function: cst.FunctionDef, scope: Scope) -> bool:
    """The function (nested ones included) passes `activities=` a literal list holding
    `ProfilerActivity.CUDA`, or `sort_by=` a string naming CUDA time."""
    cache: dict[cst.CSTNode, bool] = scope.module.__dict__.setdefault(_CACHE, {})
    if function not in cache:
        cache[function] = (
            first(
                function.body,
                lambda node: (
                    isinstance(node, cst.Arg)
                    and node.keyword is not None
                    and _cuda_profiling_argument(node.keyword.value, node.value, scope)
                ),
            )
            is not None
        )
    return cache[function]


def _cuda_profiling_argument(keyword: str, value: cst.BaseExpression, scope: Scope) -> bool:
    if keyword == "activities" and isinstance(value, (cst.List, cst.Tuple, cst.Set)):
        return any(_is_cuda_activity(element.value, scope) for element in value.elements)
    if keyword == "sort_by" and isinstance(value, cst.SimpleString):
        text = value.evaluated_value
        return isinstance(text, str) and {"cuda", "time"} <= name_words(text)
    return False


def _is_cuda_activity(node: cst.BaseExpression, scope: Scope) -> bool:
    """`torch.profiler.ProfilerActivity.CUDA`, however imported."""
    name = resolve(node, scope)
    return name is not None and name.startswith("torch.") and name.endswith("ProfilerActivity.CUDA")
