"""Does code know whether CUDA is there? Availability checks, device parameters, CUDA flags.

A hard-coded `"cuda"` is harmless in a function that checks
`torch.cuda.is_available()` or receives its device from the caller, and a move
under `if use_cuda:` was chosen by a flag. Rules ask here instead of scanning
for those patterns themselves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

from torchdev_lint.analysis.devices import VARIABLE, device_of
from torchdev_lint.analysis.scopes import Scope, dotted_name, resolve
from torchdev_lint.analysis.walk import walk

AVAILABILITY_CALLS = frozenset(
    {
        "torch.cuda.is_available",
        "torch.cuda.device_count",
        "torch.accelerator.is_available",
        "torch.accelerator.device_count",
    }
)
_AVAILABILITY_METHODS = frozenset(name.rsplit(".", 1)[-1] for name in AVAILABILITY_CALLS)
# Boolean CUDA switches: `cuda`, `use_cuda`, `args.use_gpu`, `gpu`, `cuda_enabled`, `no_cuda`.
_FLAG = re.compile(
    r"^(use_|enable_|enabled_|with_|has_|no_|on_|run_on_|using_)?(cuda|gpu|gpus)(_enabled|_available|_on|_flag)?$",
    re.IGNORECASE,
)
# GPU counts compared against a number: `n_gpu > 0`, `args.ngpu >= 1`, `num_gpus != 0`.
_COUNT = re.compile(r"^(n_?gpus?|num_?gpus?|gpu_count)$", re.IGNORECASE)
_CACHE = "_availability_checked"


def is_availability_call(node: cst.CSTNode, scope: Scope) -> bool:
    """`torch.cuda.is_available()`, `torch.cuda.device_count()` (or torch.accelerator's)."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    last = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
    return last in _AVAILABILITY_METHODS and resolve(func, scope) in AVAILABILITY_CALLS


def checks_availability(node: cst.CSTNode, scope: Scope) -> bool:
    """Does the code under `node` (a function or the module) call an availability check?"""
    cache: dict[int, bool] = scope.module.__dict__.setdefault(_CACHE, {})
    key = id(node)
    if key not in cache:
        found = False

        def enter(child: cst.CSTNode) -> None:
            nonlocal found
            if not found and is_availability_call(child, scope):
                found = True

        walk(node, enter, lambda child: None)
        cache[key] = found
    return cache[key]


def takes_device(function: cst.FunctionDef | cst.Lambda, scope: Scope) -> bool:
    """A parameter named like a device (`device`, `dev`, `gpu_id`, `rank`) or annotated `torch.device`."""
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if device_of(param.name, scope) == VARIABLE:
            return True
        annotation = param.annotation
        if annotation is not None and resolve(annotation.annotation, scope) == "torch.device":
            return True
    return False


def availability_guarded(scope: Scope) -> bool:
    """Code in `scope` knows whether CUDA is there.

    Inside functions: the function or one enclosing it checks availability or
    takes a device parameter, or a function or class around the code is about
    CUDA by its name (`CUDATestBase`, `_nccl_estimate`) or a decorator
    (`@skip_if_lt_x_gpu(2)`, `@unittest.skipIf(not TEST_CUDA, ...)`). Top-level code (module and class bodies): the
    module checks availability somewhere.
    """
    inside_function = False
    current: Scope | None = scope
    while current is not None:
        node = current.node
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and (
            _CUDA_WORD & _name_words(node.name.value)
            or any(_mentions_cuda(decorator.decorator, current) for decorator in node.decorators)
        ):
            return True
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            inside_function = True
            if takes_device(node, current) or checks_availability(node, current):
                return True
        current = current.parent
    return not inside_function and checks_availability(scope.module.node, scope.module)


def _any_gpu(target: cst.ComparisonTarget) -> bool:
    """`> 0`, `!= 0`, `>= 1`: "there is a GPU" (`> 1` asks for a second one, not for CUDA)."""
    value = target.comparator
    if not isinstance(value, cst.Integer):
        return False
    if isinstance(target.operator, (cst.GreaterThan, cst.NotEqual)):
        return value.evaluated_value == 0
    return isinstance(target.operator, cst.GreaterThanEqual) and value.evaluated_value == 1


def is_cuda_flag(node: cst.BaseExpression, scope: Scope) -> bool:
    """A boolean that says "use CUDA": `use_cuda`, `args.cuda`, `not args.no_cuda`,
    `torch.cuda.is_available()`, `n_gpu > 0`, or a boolean combination with one."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        return is_cuda_flag(node.expression, scope)
    if isinstance(node, cst.BooleanOperation):
        return is_cuda_flag(node.left, scope) or is_cuda_flag(node.right, scope)
    if isinstance(node, cst.Comparison):
        if len(node.comparisons) != 1 or not _any_gpu(node.comparisons[0]):
            return False
        left = node.left
        if is_availability_call(left, scope):
            return True
        name = dotted_name(left)
        return name is not None and bool(_COUNT.match(name.rsplit(".", 1)[-1]))
    if is_availability_call(node, scope):
        return True
    name = dotted_name(node)
    return name is not None and bool(_FLAG.match(name.rsplit(".", 1)[-1].lstrip("_")))


# `nccl` is CUDA-only: code under `if backend == "nccl":` runs with GPUs.
_CUDA_WORD = frozenset({"cuda", "gpu", "gpus", "nccl"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")


def _name_words(name: str) -> set[str]:
    """`CUDATestBase` → {"cuda", "test", "base"}; `_nccl_estimate` → {"nccl", "estimate"}."""
    return {word.lower() for word in _WORD.findall(name)}


def _words(node: cst.Name | cst.Attribute) -> set[str]:
    """`self.has_cuda_inputs` → {"has", "cuda", "inputs"}; `x.is_cuda` → {"is", "cuda"}."""
    last = node.value if isinstance(node, cst.Name) else node.attr.value
    return set(last.lower().split("_"))


def _mentions_cuda(node: cst.BaseExpression, scope: Scope) -> bool:
    """A test that depends on CUDA being there, anywhere inside it: a flag, an availability
    check, a name with a `cuda`/`gpu` part (`x.is_cuda`, `has_cuda_inputs`, `args.gpu is not
    None`), or the string "cuda" (`x.device.type == "cuda"`)."""
    found = False

    def enter(child: cst.CSTNode) -> None:
        nonlocal found
        if found:
            return
        if isinstance(child, cst.BaseExpression) and is_cuda_flag(child, scope):
            found = True
        elif isinstance(child, (cst.Name, cst.Attribute)) and _CUDA_WORD & _words(child):
            found = True
        elif isinstance(child, cst.SimpleString) and child.evaluated_value in ("cuda", "gpu", "nccl"):
            found = True

    walk(node, enter, lambda child: None)
    return found


def flag_condition(
    node: cst.CSTNode, ancestors: Sequence[cst.CSTNode], scope: Scope, *, strict: bool = True
) -> cst.BaseExpression | None:
    """The test of the innermost `if`/conditional expression, within the current function,
    that chooses whether `node` runs, when that test is about CUDA.

    `strict` asks for a boolean CUDA flag (`is_cuda_flag`); otherwise any test that
    depends on CUDA counts (`x.is_cuda`, `device.type == "cuda"`, ...).
    """
    child = node
    for ancestor in reversed(ancestors):
        if ancestor is node:
            continue
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and child is not ancestor.test:
            test = ancestor.test
            if is_cuda_flag(test, scope) if strict else _mentions_cuda(test, scope):
                return test
        child = ancestor
    return None
