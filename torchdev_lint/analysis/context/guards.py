"""Does code know whether CUDA is there? Availability checks, device parameters, CUDA flags.

A hard-coded `"cuda"` is harmless in a function that checks
`torch.cuda.is_available()` or receives its device from the caller, and a move
under `if use_cuda:` was chosen by a flag. Rules ask here instead of scanning
for those patterns themselves. Whether a test, when true, says that CUDA is
there (`says_present`) or missing (`says_missing`) is answered here too, and
whether code runs only where a value passed an `isinstance` test (`instance_guarded`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import libcst as cst

from torchdev_lint.analysis.context.availability import (
    checks_availability,
    is_availability_call,
    takes_device,
)
from torchdev_lint.analysis.knowledge.cuda_modules import CUDA_WORDS
from torchdev_lint.analysis.knowledge.devices import (
    is_cuda_literal,
    is_formatted_cuda,
)
from torchdev_lint.analysis.syntax.python_numbers import integer_literal
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, dotted_name, resolve
from torchdev_lint.analysis.syntax.walk import walk
from torchdev_lint.analysis.values.module_classes import attribute_assignments, instance_name

# Boolean switches: `cuda`, `use_cuda`, `args.use_gpu`, `gpu`, `cuda_enabled`, `no_cuda`, `args.cpu`.
_FLAG = re.compile(
    r"^(use_|enable_|enabled_|with_|has_|no_|on_|run_on_|using_)?(cuda|gpu|gpus|cpu)(_enabled|_available|_on|_flag)?$",
    re.IGNORECASE,
)
# GPU counts compared against a number: `n_gpu > 0`, `args.ngpu >= 1`, `num_gpus != 0`.
_COUNT = re.compile(r"^(n_?gpus?|num_?gpus?|gpu_count)$", re.IGNORECASE)
# A GPU index whose -1 means the CPU, the convention of a `--gpu` option: `args.gpu >= 0`, `gpu_id != -1`.
_INDEX = re.compile(r"^gpu(_?(id|index|idx))?$", re.IGNORECASE)
_INDEX_VERDICTS: dict[tuple[type[cst.BaseCompOp], int | None], bool] = {
    (cst.GreaterThanEqual, 0): True,
    (cst.GreaterThan, -1): True,
    (cst.NotEqual, -1): True,
    (cst.LessThan, 0): False,
    (cst.LessThanEqual, -1): False,
    (cst.Equal, -1): False,
}
# Owners whose `is_cuda` is a setting, not a tensor's placement: `self.is_cuda`, `args.is_cuda`.
_FLAG_OWNERS = frozenset({"self", "cls", "args", "cfg", "config", "opt", "opts", "hparams"})
# A setting named like a tensor's own placement test: a flag only where the class stores one.
_OWN_DEVICE = re.compile(r"^is_(cuda|gpu)$", re.IGNORECASE)
_STORED_CACHE = "_stored_flags"
# How far names assigned from names are followed (`a = b`, `b = torch.cuda.is_available()`).
_MAX_DEPTH = 4

# Names that say where data is kept, not which device computes: `self.cpu_cache`, `offload`.
PLACEMENT_WORDS = frozenset({"cpu", "offload", "offloaded", "offloading"})
# Functions that measure a GPU on purpose: `def benchmark(self, events)`.
BENCHMARK_WORDS = frozenset({"benchmark", "benchmarks", "benchmarking", "bench"})
# Words that turn a CUDA name around: `no_cuda`, `disable_gpu`, `skip_if_no_cuda`.
_NEGATING_WORDS = frozenset({"no", "not", "disable", "disabled", "without"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")


def name_words(name: str) -> set[str]:
    """`CUDATestBase` → {"cuda", "test", "base"}; `self.has_cuda_inputs` → {"self", "has", "cuda", "inputs"}."""
    return {word.lower() for word in _WORD.findall(name)}


# Methods that implement moving a module: `def to(self, *args)` calls `.cuda(device)` on purpose.
_MOVE_METHODS = frozenset({"to", "_apply", "cuda"})


def availability_guarded(scope: Scope, *, device_parameter: bool = True) -> bool:
    """Code in `scope` knows whether CUDA is there.

    Inside functions: the function or one enclosing it checks availability or
    (with `device_parameter`) takes a device parameter, or a function or class
    around the code is about CUDA, host offloading or benchmarking by its name
    (`CUDATestBase`, `_nccl_estimate`, `enable_cpu_offload`, `benchmark`), or implements a
    move (`def to`).
    Top-level code (module and class bodies): the module checks availability somewhere.
    """
    inside_function = False
    current: Scope | None = scope
    while current is not None:
        node = current.node
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and (
            (CUDA_WORDS | PLACEMENT_WORDS | BENCHMARK_WORDS) & name_words(node.name.value)
            or node.name.value in _MOVE_METHODS
        ):
            return True
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            inside_function = True
            if (device_parameter and takes_device(node, current)) or checks_availability(node, current):
                return True
        current = current.parent
    return not inside_function and checks_availability(scope.module.node, scope.module)


def is_cuda_flag(node: cst.BaseExpression, scope: Scope, *, availability: bool = True) -> bool:
    """A boolean that says "use CUDA": `use_cuda`, `args.cuda`, `not args.no_cuda`, `args.cpu`,
    `n_gpu > 0`, or a boolean combination with one; with `availability` also
    `torch.cuda.is_available()` and `torch.cuda.device_count() > 0` themselves."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        return is_cuda_flag(node.expression, scope, availability=availability)
    if isinstance(node, cst.BooleanOperation):
        return is_cuda_flag(node.left, scope, availability=availability) or is_cuda_flag(
            node.right, scope, availability=availability
        )
    if isinstance(node, cst.Comparison):
        if len(node.comparisons) != 1:
            return False
        target = node.comparisons[0]
        if _mode_test(node.left, target, scope):
            return True
        if not _any_gpu(target):
            return False
        left = node.left
        if is_availability_call(left, scope):
            return availability
        name = dotted_name(left)
        return name is not None and bool(_COUNT.match(name.rsplit(".", 1)[-1]))
    if is_availability_call(node, scope):
        return availability
    return _flag_name(node, scope)


def _flag_name(node: cst.BaseExpression, scope: Scope) -> bool:
    """`use_cuda`, `args.no_cuda`, `self._gpu`; `self.is_cuda` where the class stores a flag there."""
    name = dotted_name(node)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1].lstrip("_")
    return bool(_FLAG.match(last)) or (bool(_OWN_DEVICE.match(last)) and _stored_flag(node, scope))


def _mode_test(left: cst.BaseExpression, target: cst.ComparisonTarget, scope: Scope) -> bool:
    """`use_cuda == "all"`, `self.use_cuda in ["all", "batch"]`, `args.gpu != ""`: a CUDA flag
    whose values are mode strings, compared with string literals, chooses CUDA all the same."""
    operator, other = target.operator, target.comparator
    if isinstance(operator, (cst.Equal, cst.NotEqual)) and _only_strings(left):
        left, other = other, left
    return (
        isinstance(operator, (cst.Equal, cst.NotEqual, cst.In, cst.NotIn))
        and _only_strings(other)
        and _flag_name(left, scope)
    )


def _only_strings(node: cst.BaseExpression) -> bool:
    """`"all"`, `["all", "batch"]`, `("a", "b")`: string literals and nothing else."""
    elements = (
        [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List, cst.Set)) else [node]
    )
    return bool(elements) and all(isinstance(e, (cst.SimpleString, cst.ConcatenatedString)) for e in elements)


def _stored_flag(node: cst.BaseExpression, scope: Scope) -> bool:
    """`self.is_cuda` in a method of a class whose every `self.is_cuda = ...` stores a flag (a
    parameter, `True`/`False`, a CUDA flag: `self.is_cuda = cuda`), not a tensor's placement
    (`next(model.parameters()).is_cuda`, `device.type == "cuda"`); nowhere assigned, it is unknown."""
    if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
        return False
    method: Scope | None = scope
    while method is not None and (method.parent is None or method.parent.kind != "class"):
        method = method.parent
    if method is None or method.parent is None or not isinstance(method.node, cst.FunctionDef):
        return False
    klass = method.parent.node
    if not isinstance(klass, cst.ClassDef) or instance_name(method.node) != node.value.value:
        return False
    cache: dict[tuple[cst.ClassDef, str], bool] = scope.module.__dict__.setdefault(_STORED_CACHE, {})
    key = (klass, node.attr.value)
    if key not in cache:
        cache[key] = False  # `self.is_cuda = self.is_cuda or ...` asks this again
        stores = attribute_assignments(klass, node.attr.value)
        cache[key] = bool(stores) and all(
            _flag_value(value, function, scope) for function, value in stores or ()
        )
    return cache[key]


def _flag_value(value: cst.BaseExpression, function: cst.FunctionDef, scope: Scope) -> bool:
    """What `self.is_cuda = value` stores is a flag: a parameter of `function` (not annotated as
    something else than `bool`), `True`/`False`, a CUDA flag or availability check, or `not`/`and`/`or`
    of these."""
    if isinstance(value, cst.Name):
        params = function.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.name.value == value.value:
                annotation = param.annotation
                return annotation is None or dotted_name(annotation.annotation) in ("bool", "str")
        if value.value in ("True", "False"):
            return True
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not):
        return _flag_value(value.expression, function, scope)
    if isinstance(value, cst.BooleanOperation):
        return _flag_value(value.left, function, scope) and _flag_value(value.right, function, scope)
    return is_cuda_flag(value, scope)


def _any_gpu(target: cst.ComparisonTarget) -> bool:
    """`> 0`, `!= 0`, `>= 1`: "there is a GPU" (`> 1` asks for a second one, not for CUDA)."""
    value = target.comparator
    if not isinstance(value, cst.Integer):
        return False
    if isinstance(target.operator, (cst.GreaterThan, cst.NotEqual)):
        return value.evaluated_value == 0
    return isinstance(target.operator, cst.GreaterThanEqual) and value.evaluated_value == 1


def _is_count(node: cst.BaseExpression, scope: Scope) -> bool:
    """`torch.cuda.device_count()`, `n_gpu`, `args.num_gpus`, `opt["num_gpu"]`, and a setting named
    after GPUs or CUDA (`self.gpus`) or its length (`len(gpu_ids)`): `self.gpus > 0` asks whether the
    program was given GPUs, as `use_gpu` would."""
    if is_availability_call(node, scope):
        return True
    if isinstance(node, cst.Call) and len(node.args) == 1 and resolve(node.func, scope) == "builtins.len":
        node = node.args[0].value
    name = _setting_name(node)
    return name is not None and (bool(_COUNT.match(name)) or _name_says(node) is True)


def _setting_name(node: cst.BaseExpression) -> str | None:
    """The last part of `args.use_gpu`, or the key of `opt["num_gpu"]`."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            key = index.value.evaluated_value
            return key if isinstance(key, str) else None
    name = dotted_name(node)
    return None if name is None else name.rsplit(".", 1)[-1]


def _count_test(node: cst.Comparison, scope: Scope) -> bool | None:
    """`n_gpu > 0` → True (there is a GPU), `device_count() < 2` → False (maybe none); else None
    (`gpu_id >= 0` is an index's test: `_index_test`)."""
    if len(node.comparisons) != 1 or not _is_count(node.left, scope):
        return None
    target = node.comparisons[0]
    value = target.comparator
    if not isinstance(value, cst.Integer):
        return None
    number = value.evaluated_value
    operator = target.operator
    if isinstance(operator, (cst.GreaterThan, cst.NotEqual)):
        return number >= 0
    if isinstance(operator, cst.GreaterThanEqual):
        return True if number >= 1 else None
    if isinstance(operator, (cst.LessThan, cst.LessThanEqual, cst.Equal)):
        return False
    return None


def _index_test(node: cst.Comparison) -> bool | None:
    """`args.gpu >= 0`, `gpu_id > -1`, `gpu != -1` → True (a GPU was chosen: -1 names the CPU);
    `args.gpu < 0`, `gpu_id == -1` → False; else None (`gpu_id >= 1`, another name)."""
    name = _setting_name(node.left)
    if len(node.comparisons) != 1 or name is None or not _INDEX.match(name):
        return None
    target = node.comparisons[0]
    return _INDEX_VERDICTS.get((type(target.operator), integer_literal(target.comparator)))


def _strings(node: cst.BaseExpression) -> list[str]:
    """The string literals of `"cuda"` or `("cuda", "mps")`."""
    elements = (
        [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List, cst.Set)) else [node]
    )
    return [
        e.evaluated_value
        for e in elements
        if isinstance(e, cst.SimpleString) and isinstance(e.evaluated_value, str)
    ]


def _string_test(node: cst.Comparison) -> bool | None:
    """`x.device.type == "cuda"` → True; `d != torch.device("cuda")`, `x not in ("cuda",)` → False; else None."""
    if len(node.comparisons) != 1:
        return None
    target = node.comparisons[0]
    sides = [node.left, target.comparator]
    texts = [text for side in sides for text in _strings(_device_argument(side))]
    if not texts or not any(CUDA_WORDS & name_words(text) for text in texts):
        return None
    if any("cpu" in name_words(text) for text in texts):
        return None
    if isinstance(target.operator, (cst.Equal, cst.Is, cst.In)):
        return True
    if isinstance(target.operator, (cst.NotEqual, cst.IsNot, cst.NotIn)):
        return False
    return None


def _device_argument(node: cst.BaseExpression) -> cst.BaseExpression:
    """`torch.device("cuda")` → `"cuda"`, so that device objects compare like strings."""
    if isinstance(node, cst.Call) and node.args and dotted_name(node.func) in ("torch.device", "device"):
        return node.args[0].value
    return node


def _name_says(node: cst.BaseExpression) -> bool | None:
    """`use_cuda`, `x.is_cuda`, `TEST_CUDA`, `is_cuda_available()` → True; `no_cuda`, `args.cpu` → False."""
    if isinstance(node, cst.Call):
        node = node.func
    name = _setting_name(node)
    if name is None:
        return None
    words = name_words(name)
    if words & CUDA_WORDS:
        return not words & _NEGATING_WORDS
    if "cpu" in words and not words & _NEGATING_WORDS:
        return False
    return None


def says_present(test: cst.BaseExpression, scope: Scope, *, tensors: bool = True) -> bool:
    """When `test` is true, CUDA is there (or the program chose it): `use_cuda`,
    `torch.cuda.is_available()`, `x.is_cuda`, `args.device == "cuda"`, `not args.cpu`, a name
    assigned one of these (`_HAS_FLASH = torch.cuda.is_available() and ...`). Without `tensors`,
    a test of a tensor's own device (`x.is_cuda`) does not count."""
    return _says(test, scope, True, tensors)


def says_missing(test: cst.BaseExpression, scope: Scope, *, tensors: bool = True) -> bool:
    """When `test` is true, CUDA is not there (or not chosen): `not torch.cuda.is_available()`,
    `torch.cuda.device_count() < 2`, `device.type != "cuda"`, `args.cpu`."""
    return _says(test, scope, False, tensors)


def _tensor_device_test(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """(tensor, whether true means on CUDA) for a test of a tensor's own device: `mask.is_cuda`,
    `x.device.type == "cuda"`, `x.device != torch.device("cuda")`; None for flags (`self.is_cuda`,
    `args.is_cuda`) and anything else."""
    if isinstance(test, cst.Attribute) and test.attr.value == "is_cuda":
        owner, on_cuda = test.value, True
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        verdict = _string_test(test)
        left = test.left
        device = left.value if isinstance(left, cst.Attribute) and left.attr.value == "type" else left
        if verdict is None or not isinstance(device, cst.Attribute) or device.attr.value != "device":
            return None
        owner, on_cuda = device.value, verdict
    else:
        return None
    name = dotted_name(owner)
    return None if name in _FLAG_OWNERS else (owner, on_cuda)


def cuda_choices(node: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression]:
    """The CUDA literals `node` can be: itself (`"cuda"`, `f"cuda:{rank}"`), or a branch of a conditional expression
    whose test does not say that CUDA is there (`"xpu" if is_xpu_available() else "cuda"`, not
    `"cuda" if torch.cuda.is_available() else "cpu"` nor `"cpu" if args.cpu else "cuda"`)."""
    if is_cuda_literal(node) or is_formatted_cuda(node):
        return [node]
    if not isinstance(node, cst.IfExp) or mentions_placement(node.test):
        return []
    found = [] if says_present(node.test, scope) else cuda_choices(node.body, scope)
    return found if says_missing(node.test, scope) else found + cuda_choices(node.orelse, scope)


def _says(
    test: cst.BaseExpression, scope: Scope, present: bool, tensors: bool = True, depth: int = 0
) -> bool:
    if not tensors and _tensor_device_test(test) is not None:
        return False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _says(test.expression, scope, not present, tensors, depth)
    if isinstance(test, cst.BooleanOperation):
        left = _says(test.left, scope, present, tensors, depth)
        right = _says(test.right, scope, present, tensors, depth)
        # `a and b` true: both are, so either one's word holds; `a or b` true: only what both say.
        return left or right if isinstance(test.operator, cst.And) else left and right
    if isinstance(test, cst.Comparison):
        verdict = _count_test(test, scope)
        if verdict is None:
            verdict = _index_test(test)
        if verdict is None:
            verdict = _string_test(test)
        if verdict is None and len(test.comparisons) == 1:
            target = test.comparisons[0]
            if isinstance(target.comparator, cst.Name) and target.comparator.value == "None":
                # `args.gpu is not None` names a GPU; `args.gpu is None` does not.
                named = _name_says(test.left)
                if named is not None:
                    verdict = named == isinstance(target.operator, (cst.IsNot, cst.NotEqual))
            elif _name_says(test.left) or _name_says(target.comparator):
                # `ProfilerActivity.CUDA in activities`, `kind == DeviceType.CUDA`.
                if isinstance(target.operator, (cst.In, cst.Equal, cst.Is)):
                    verdict = True
                elif isinstance(target.operator, (cst.NotIn, cst.NotEqual, cst.IsNot)):
                    verdict = False
        return verdict is not None and verdict == present
    if is_availability_call(test, scope):
        return present
    named = _name_says(test)
    if named is not None:
        return named == present
    return depth < _MAX_DEPTH and _assigned_says(test, scope, present, tensors, depth + 1)


def _assigned_says(test: cst.BaseExpression, scope: Scope, present: bool, tensors: bool, depth: int) -> bool:
    """A name whose every assignment says it: `_SUPPORTS_FLEX = torch.cuda.is_available() and ...`."""
    found = assigned_values(test, scope)
    if found is None:
        return False
    values, owner = found
    return all(_says(value, owner, present, tensors, depth) for value in values)


def mentions_placement(test: cst.BaseExpression) -> bool:
    """A test about where data is kept (`if self.cpu_cache:`, `if offload:`), in either sense."""
    found = False

    def enter(child: cst.CSTNode) -> None:
        nonlocal found
        if not found and isinstance(child, (cst.Name, cst.Attribute)):
            name = dotted_name(child)
            found = name is not None and bool(PLACEMENT_WORDS & name_words(name.rsplit(".", 1)[-1]))

    walk(test, enter, lambda child: None)
    return found


def flag_condition(
    node: cst.CSTNode, ancestors: Sequence[cst.CSTNode], scope: Scope, *, strict: bool = True
) -> cst.BaseExpression | None:
    """The test of an `if`/conditional expression, within the current function,
    that chooses whether `node` runs, when that test is about CUDA.

    `strict` asks for a boolean CUDA flag carried around (`is_cuda_flag`, not an
    availability check itself), on either branch. Otherwise the branch taken must
    say that CUDA is there (`if use_cuda:`, `else` of `if args.cpu:`), or the test
    is about where data is kept; a test of a tensor's own device (`if t.is_cuda:`,
    `if t.device != torch.device("cuda"):`) is neither: see `followed_tensor`.
    """
    child = node
    for ancestor in reversed(ancestors):
        if ancestor is node:
            continue
        # A lambda made under the test exists only where it held (`if "cuda" in device: return
        # lambda s, loc: s.cuda(i)`); a nested function may be called from anywhere.
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return None
        if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and child is not ancestor.test:
            test = ancestor.test
            if strict:
                if is_cuda_flag(test, scope, availability=False):
                    return test
            else:
                taken = child is ancestor.body
                if mentions_placement(test) or (
                    says_present(test, scope, tensors=False)
                    if taken
                    else says_missing(test, scope, tensors=False)
                ):
                    return test
        child = ancestor
    return None


def followed_tensor(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> cst.BaseExpression | None:
    """The tensor whose placement `node` follows, within the current function: `mask` for
    `if mask.is_cuda: filler = filler.cuda()` or `w.cuda() if x.device.type == "cuda" else w`
    (also under `if mask.is_cuda and ...:`). Such a move should name `mask.device`."""
    for test, taken in branch_tests(node, ancestors):
        tensor = _tested_tensor(test, taken)
        if tensor is not None:
            return tensor
    return None


def branch_tests(
    node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]
) -> Iterator[tuple[cst.BaseExpression, bool]]:
    """The tests of the `if`s and conditional expressions around `node`, innermost first, within
    the current function, each with whether `node` is in its body (True) or its `else` (False)."""
    child = node
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            yield ancestor.test, child is ancestor.body
        child = ancestor


def instance_guarded(
    node: cst.CSTNode, ancestors: Sequence[cst.CSTNode], scope: Scope, classes: frozenset[str]
) -> bool:
    """Does `node` run only where an enclosing test found a value to be one of `classes` (resolved
    names): the body of `if isinstance(model, nn.DataParallel):`, the `else` of `if not isinstance(...)`."""
    return any(_instance_test(test, taken, scope, classes) for test, taken in branch_tests(node, ancestors))


def _instance_test(test: cst.BaseExpression, taken: bool, scope: Scope, classes: frozenset[str]) -> bool:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _instance_test(test.expression, not taken, scope, classes)
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And if taken else cst.Or):
        return _instance_test(test.left, taken, scope, classes) or _instance_test(
            test.right, taken, scope, classes
        )
    if not taken or not isinstance(test, cst.Call) or resolve(test.func, scope) != "builtins.isinstance":
        return False
    if len(test.args) != 2 or any(arg.keyword is not None or arg.star for arg in test.args):
        return False
    tested = test.args[1].value
    options = [element.value for element in tested.elements] if isinstance(tested, cst.Tuple) else [tested]
    return any(resolve(option, scope) in classes for option in options)


def names_gpu(move: cst.CSTNode) -> bool:
    """`.cuda(i)`, `.cuda(device=i)`, `"cuda:%d" % x.get_device()`: a move or device that names its
    GPU (under `if bias.is_cuda:`, `bias`'s)."""
    if isinstance(move, cst.BaseExpression) and is_formatted_cuda(move):
        return True
    if not isinstance(move, cst.Call):
        return False
    return any(arg.keyword is None or arg.keyword.value == "device" for arg in move.args)


def _tested_tensor(test: cst.BaseExpression, taken: bool) -> cst.BaseExpression | None:
    """The tensor on CUDA when the branch (`taken`: the body, else the `else`) runs: `x` for the
    body of `if x.is_cuda and ...:`, for the `else` of `if x.device != torch.device("cuda"):`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _tested_tensor(test.expression, not taken)
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And if taken else cst.Or):
        return _tested_tensor(test.left, taken) or _tested_tensor(test.right, taken)
    found = _tensor_device_test(test)
    return found[0] if found is not None and found[1] == taken else None
