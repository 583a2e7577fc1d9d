"""Where a program chooses how to spread a model over GPUs.

`nn.DataParallel` is a deliberate fallback only where the same decision picks the recommended
path the other way: the other branch of the same `if`/`elif`/`else` chain, conditional
expression or `match`, in the same function, wraps the model for distributed training
(`DistributedDataParallel`, FSDP, a helper whose name says DDP/FSDP). A DDP elsewhere in the
file (another function, module level, a separate `if`) is no such decision, unless that `if` and
the one holding the DataParallel test one option for two values (`mode == "ddp"`, `mode == "dp"`):
one decision spread over the file. A program that
itself warns, next to the wrap, that DataParallel is not recommended says the wrap is not a
choice it stands by. A wrap that only loads a checkpoint saved from a DataParallel and is
unwrapped right after (`net = net.module`) spreads nothing: it never runs a forward pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import libcst as cst

from torchdev_lint.analysis.knowledge.library_models import Fact, endings
from torchdev_lint.analysis.knowledge.torch_api import DISTRIBUTED_WRAPPERS
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, resolve, scope_body, small_statements
from torchdev_lint.analysis.syntax.walk import first

_BOUNDARIES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_NESTED = (cst.FunctionDef, cst.ClassDef)
# The words of an identifier: `smart_DDP` -> smart, DDP; `DDPWrapper` -> DDP, Wrapper.
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_DISTRIBUTED_WORDS = frozenset({"ddp", "fsdp"})
# A message that tells the user DataParallel is the wrong choice ("DP not recommended, use DDP").
_NAMES_DATA_PARALLEL = re.compile(r"(?<![A-Za-z])(?:data[ _-]?parallel|dp)(?![A-Za-z])", re.IGNORECASE)
_ADVISES_AGAINST = re.compile(
    r"not recommended|not advised|discouraged|deprecated|slower than|less efficient", re.IGNORECASE
)


def distributed_alternative(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode], scope: Scope) -> bool:
    """Is `node` in one branch of a decision (an `if`/`elif`/`else` chain, a conditional
    expression, a `match`) in the current function whose other branch wraps a model for
    distributed training? The tests themselves are not branches: `elif isinstance(m, DDP)` picks
    nothing."""
    child = node
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, _BOUNDARIES):
            return False
        for branch in _other_branches(ancestor, child):
            if first(branch, lambda found: _wraps_distributed(found, scope), prune=_NESTED) is not None:
                return True
        child = ancestor
    return False


def option_alternative(
    node: cst.CSTNode, ancestors: Sequence[cst.CSTNode], scope: Scope, module: cst.Module
) -> bool:
    """Is `node` in the block of an `if S == A:` (or `elif`) of the current function, where an
    `if`/`elif` anywhere in the file tests the same option `S` for another value and wraps a model
    for distributed training in its block? Equality tests of one option against two values are
    branches of one decision, however many functions act on it (`cfg.multi_gpu ==
    Mode.DATA_PARALLEL` in one method, `== Mode.DISTRIBUTED` in another)."""
    chosen = set(_options_chosen(node, ancestors))
    if not chosen:
        return False
    names = scope.module  # the other branch may be in any function: names as the module binds them

    def picks_distributed(found: cst.CSTNode) -> bool:
        if type(found) is not cst.If:
            return False
        option = _option_test(found.test)
        if option is None or option in chosen or option[0] not in {subject for subject, _ in chosen}:
            return False
        return first(found.body, lambda call: _wraps_distributed(call, names), prune=_NESTED) is not None

    return first(module, picks_distributed) is not None


def _options_chosen(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> Iterator[tuple[str, str]]:
    """(option, value) of each `if option == value:` of the current function whose block holds `node`."""
    child = node
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, _BOUNDARIES):
            return
        if isinstance(ancestor, cst.If) and child is ancestor.body:
            option = _option_test(ancestor.test)
            if option is not None:
                yield option
        child = ancestor


def _option_test(test: cst.BaseExpression) -> tuple[str, str] | None:
    """`("cfg.mode", "Mode.DP")` of `cfg.mode == Mode.DP` (or `is`; a name or an attribute
    against a name, an attribute, a string or a number); None for any other test."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    (comparison,) = test.comparisons
    if not isinstance(comparison.operator, (cst.Equal, cst.Is)):
        return None
    subject, value = dotted_name(test.left), comparison.comparator
    if isinstance(value, (cst.SimpleString, cst.Integer)):
        return (subject, value.value) if subject is not None else None
    named = dotted_name(value)
    return (subject, named) if subject is not None and named is not None else None


def _other_branches(decision: cst.CSTNode, child: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    if isinstance(decision, cst.If):
        if child is decision.body:
            return tuple(_chain_bodies(decision.orelse))
        return (decision.body,) if child is decision.orelse else ()  # not the test
    if isinstance(decision, cst.IfExp):
        if child is decision.body:
            return (decision.orelse,)
        return (decision.body,) if child is decision.orelse else ()
    if isinstance(decision, cst.Match) and any(case is child for case in decision.cases):
        return tuple(case.body for case in decision.cases if case is not child)
    return ()


def _chain_bodies(orelse: cst.If | cst.Else | None) -> Iterator[cst.CSTNode]:
    """The blocks of an `elif ...`/`else:` chain, without its tests (`elif is_ddp(m):` wraps nothing)."""
    while isinstance(orelse, cst.If):
        yield orelse.body
        orelse = orelse.orelse
    if isinstance(orelse, cst.Else):
        yield orelse.body


def _wraps_distributed(node: cst.CSTNode, scope: Scope) -> bool:
    if type(node) is not cst.Call:
        return False
    name = resolve(node.func, scope) or dotted_name(node.func)
    if name is None:
        return False
    if name in DISTRIBUTED_WRAPPERS:
        return True
    last = name.rsplit(".", 1)[-1]
    if last.endswith(endings(Fact.DISTRIBUTED_WRAPPER)):
        return True
    return any(word.lower() in _DISTRIBUTED_WORDS for word in _WORDS.findall(last))


def warned_against(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> bool:
    """Does a statement of the block holding `node` (the wrap's own statement included) call
    something (`print`, `warnings.warn`, `logger.warning`) with a message saying DataParallel is
    not recommended?"""
    for index in range(len(ancestors) - 1, -1, -1):
        ancestor = ancestors[index]
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
            statements: Sequence[cst.CSTNode] = ancestor.body
            break
        if isinstance(ancestor, _BOUNDARIES):
            return False
    else:
        return False
    return any(first(statement, _warning, prune=_NESTED) is not None for statement in statements)


def _warning(node: cst.CSTNode) -> bool:
    if type(node) is not cst.Call:
        return False
    text = " ".join(_literal_text(arg.value) for arg in node.args)
    return bool(_NAMES_DATA_PARALLEL.search(text) and _ADVISES_AGAINST.search(text))


def _literal_text(value: cst.BaseExpression) -> str:
    if isinstance(value, cst.SimpleString):
        return value.raw_value
    if isinstance(value, cst.ConcatenatedString):
        return _literal_text(value.left) + _literal_text(value.right)
    if isinstance(value, cst.FormattedString):
        return "".join(part.value for part in value.parts if isinstance(part, cst.FormattedStringText))
    return ""


def data_parallel_backend(class_name: str) -> bool:
    """Does a class's name say it implements a DataParallel backend (`DataParallelStrategy`,
    `DPEngine`, `MyDP`)? A DDP/FSDP name (`DDPTrainer`, `FSDPStrategy`) does not."""
    for distributed in endings(Fact.DISTRIBUTED_WRAPPER):
        class_name = class_name.replace(distributed, "")
    return "DataParallel" in class_name or "DP" in _WORDS.findall(class_name)


def unwrapped_after_loading(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> bool:
    """`net = nn.DataParallel(net)`, `net.load_state_dict(ckpt)`, then `net = net.module` in the same
    function: the wrapper is there to read a checkpoint whose keys a DataParallel prefixed with
    `module.`, and nothing else (no forward pass, not passed on) uses it before it is unwrapped."""
    parent = ancestors[-2] if len(ancestors) >= 2 else None
    function = next((n for n in reversed(ancestors) if isinstance(n, cst.FunctionDef)), None)
    if function is None or not (isinstance(parent, cst.Assign) and len(parent.targets) == 1):
        return False
    name = dotted_name(parent.targets[0].target)
    if name is None:
        return False
    after = False
    for statement in small_statements(scope_body(function)):
        if statement is parent:
            after = True
        elif after and _unwraps(statement, name):
            return True
        elif (
            after
            and first(statement, lambda n: _names(n, name)) is not None
            and not _loads_into(statement, name)
        ):
            return False
    return False


def _names(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, (cst.Name, cst.Attribute)) and dotted_name(node) == name


def _unwraps(statement: cst.BaseSmallStatement, name: str) -> bool:
    """`net = net.module`."""
    return (
        isinstance(statement, cst.Assign)
        and len(statement.targets) == 1
        and dotted_name(statement.targets[0].target) == name
        and isinstance(statement.value, cst.Attribute)
        and statement.value.attr.value == "module"
        and dotted_name(statement.value.value) == name
    )


def _loads_into(statement: cst.BaseSmallStatement, name: str) -> bool:
    """`net.load_state_dict(...)` as a statement, `net` used nowhere else in it."""
    call = statement.value if isinstance(statement, cst.Expr) else None
    return (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "load_state_dict"
        and _names(call.func.value, name)
        and all(first(arg, lambda n: _names(n, name)) is None for arg in call.args)
    )
