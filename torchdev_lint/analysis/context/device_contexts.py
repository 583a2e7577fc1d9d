"""Where a hard-coded CUDA device is not a portability bug.

A device that is compared (`d == torch.device("cuda")`), looked up under a
`try:` that expects a missing GPU, written where a test expects an error, used
as data (a dict key, a set member, a test parameter, a parameter default, a
cache key in a test that fakes the work), or stored as configuration that whoever runs the code overrides (`args.device =
"cuda"`, `parser.set_defaults(device="cuda")`), or given to a factory under a fake-tensor mode
(`with FakeTensorMode():`), where a device is metadata.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.context.cuda_only_code import benchmark_path
from torchdev_lint.analysis.context.guards import availability_guarded, flag_condition
from torchdev_lint.analysis.context.profiling import in_cuda_profiler
from torchdev_lint.analysis.context.requirements import cuda_requirements
from torchdev_lint.analysis.knowledge.torch_api import FAKE_TENSOR_MODES
from torchdev_lint.analysis.syntax.bindings import read_anywhere
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, dotted_name, resolve
from torchdev_lint.analysis.syntax.walk import visit
from torchdev_lint.analysis.values import flow

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# Names that hold a device: `device`, `DEVICE`, `dev`, `train_device`, `device0` (not `device_type`).
_DEVICE_NAME = re.compile(r"^(\w*_)?(device|dev)\d*$", re.IGNORECASE)
# Keywords of torch's `Tensor.cuda` / `Module.cuda`.
_CUDA_METHOD_KEYWORDS = frozenset({"device", "non_blocking", "memory_format"})

# Owners whose attributes are configuration: `cfg.MODEL.DEVICE`, `args.device`, `self.config.device`.
_CONFIG_OWNERS = frozenset(
    {
        "cfg",
        "config",
        "conf",
        "configs",
        "args",
        "opt",
        "opts",
        "hparams",
        "options",
        "settings",
        "defaults",
        "hp",
        "_c",
    }
)
# Calls that build configuration rather than tensors: `parser.set_defaults(device="cuda")`, `dict(device="cuda")`.
_CONFIG_CALLS = frozenset(
    {
        "set_defaults",
        "add_argument",
        "dict",
        "update",
        "setdefault",
        "SimpleNamespace",
        "Namespace",
        "EasyDict",
        "edict",
        "create",
    }
)


def harmless_here(
    node: cst.BaseExpression, site: cst.CSTNode, ctx: FileContext, *, device_parameter: bool = True
) -> bool:
    """A device compared, chosen under an availability check or a CUDA flag, expected to fail, in a
    benchmark or a function that profiles CUDA, or in code that only runs where CUDA is (`site`: the
    call or assignment holding it)."""
    scope = ctx.scope
    return (
        in_comparison(node, ctx.ancestors)
        or availability_guarded(scope, device_parameter=device_parameter)
        or bool(flag_condition(node, ctx.ancestors, scope, strict=False))
        or expected_to_raise(ctx.ancestors)
        or benchmark_path(ctx.path)
        or in_cuda_profiler(scope)
        or cuda_requirements(scope, ctx.path, ctx.project).requires_cuda(site)
        or under_fake_tensors(ctx.ancestors, scope)
        or bound_and_never_read(ctx)
    )


def bound_and_never_read(ctx: FileContext) -> bool:
    """`device = torch.device("cuda")` in a function that never reads the name: a device bound to a
    name that says so (not `model = net.cuda()`, which runs) and never used is dead code, and needs
    no GPU. (At module level other files may import the name, which a file checked alone cannot tell.)"""
    ancestors = ctx.ancestors
    for depth in range(len(ancestors) - 1, -1, -1):
        statement = ancestors[depth]
        if isinstance(statement, cst.Assign):
            break
        if isinstance(statement, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
    else:
        return False
    if depth + 1 < len(ancestors) and ancestors[depth + 1] is not statement.value:
        return False
    if len(statement.targets) != 1 or not isinstance(target := statement.targets[0].target, cst.Name):
        return False
    if not names_device(target.value):
        return False
    owner = ctx.scope.owner
    return owner.kind == "function" and not read_anywhere(owner.node, target.value, target)


def under_fake_tensors(ancestors: Sequence[cst.CSTNode], scope: Scope) -> bool:
    """In the body of `with FakeTensorMode():` (or of a name bound only to one): tensors made there
    are fake, their device is metadata, and nothing needs a GPU."""
    for parent, child in zip(ancestors, ancestors[1:], strict=False):
        if isinstance(parent, cst.With) and child is parent.body:
            if any(_fake_tensor_mode(item.item, scope) for item in parent.items):
                return True
    return False


def _fake_tensor_mode(context: cst.BaseExpression, scope: Scope) -> bool:
    found = assigned_values(context, scope)
    values = found[0] if found is not None else [context]
    return all(isinstance(v, cst.Call) and resolve(v.func, scope) in FAKE_TENSOR_MODES for v in values)


def names_device(name: str) -> bool:
    """`DEVICE`, `self.train_device`: a name that holds a device and is not a setting (`args.device`)."""
    return bool(_DEVICE_NAME.match(name.rsplit(".", 1)[-1])) and not is_config(name)


def torch_cuda_signature(call: cst.Call) -> bool:
    """`.cuda()`, `.cuda(i, non_blocking=True)`: torch's method, not a quantizer's `cuda(qtensor, meta=...)`."""
    return all(arg.keyword is None or arg.keyword.value in _CUDA_METHOD_KEYWORDS for arg in call.args)


def used_as_data(ancestors: Sequence[cst.CSTNode]) -> bool:
    """`{torch.device("cuda:0"): ...}`, set members, subscripts, test parameters, parameter defaults."""
    child = ancestors[-1]
    for ancestor in reversed(ancestors[:-1]):
        if isinstance(ancestor, (cst.Set, cst.SubscriptElement, cst.Decorator, cst.Param)):
            return True
        if isinstance(ancestor, cst.DictElement):
            return child is ancestor.key
        if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement, cst.Arg)):
            return False
        child = ancestor
    return False


def discarded_tensor_move(method: cst.Attribute, ctx: FileContext) -> bool:
    """`t.cuda()` as a statement on a tensor: a no-op whose real bug is TDL306's; where it would go is moot."""
    return isinstance(ctx.parent(1), cst.Expr) and flow.is_tensor(method.value, ctx)


def device_object_harmless(call: cst.Call, ancestors: Sequence[cst.CSTNode]) -> bool:
    """`torch.device("cuda")` used as data, looked up expecting failure, or a cache key in a faked test."""
    return used_as_data(ancestors) or probed(ancestors) or key_in_faked_test(call, ancestors)


def key_in_faked_test(call: cst.Call, ancestors: Sequence[cst.CSTNode]) -> bool:
    """`device_0 = torch.device("cuda:0")` in a test that swaps the work for fakes (`monkeypatch`) and only
    hands the name to the code under test (a cache key): nothing is ever placed on that device."""
    assign = ancestors[-2] if len(ancestors) > 1 else None
    function = next((a for a in reversed(ancestors) if isinstance(a, (cst.FunctionDef, cst.ClassDef))), None)
    if (
        not isinstance(assign, cst.Assign)
        or assign.value is not call
        or len(assign.targets) != 1
        or not isinstance(assign.targets[0].target, cst.Name)
        or not isinstance(function, cst.FunctionDef)
        or not function.name.value.startswith("test")
        or "monkeypatch" not in {param.name.value for param in function.params.params}
    ):
        return False
    name = assign.targets[0].target.value
    uses = _NameUses(name)
    visit(function.body, uses)
    return uses.total == uses.handed_over + 1  # the assignment's own target


class _NameUses(cst.CSTVisitor):
    """How often a name occurs, and how often as a positional argument of a call that is not a move
    or a torch function (`resampler.lookup(size, device_0)`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.total = 0
        self.handed_over = 0

    def visit_Name(self, node: cst.Name) -> None:
        self.total += node.value == self.name

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if method in ("to", "cuda") or (dotted_name(func) or "").split(".", 1)[0] == "torch":
            return
        self.handed_over += sum(
            arg.keyword is None and isinstance(arg.value, cst.Name) and arg.value.value == self.name
            for arg in node.args
        )


def is_config(name: str) -> bool:
    """`cfg.MODEL.DEVICE`, `args.device`, `self.config.device`: a setting, overridden by whoever runs the code."""
    owners = name.split(".")[:-1]
    return any(part.lower() in _CONFIG_OWNERS or (part.isupper() and len(part) > 1) for part in owners)


def overridden_by_exec(ancestors: Sequence[cst.CSTNode]) -> bool:
    """A module-level statement that a later module-level `exec(...)` may undo: the script runs a
    configurator (`exec(open("configurator.py").read())`) that rebinds its globals from the
    command line, so what it assigns before is a setting's default."""
    if len(ancestors) < 3 or not isinstance(ancestors[0], cst.Module):
        return False
    module, statement = ancestors[0], ancestors[1]
    later = False
    for each in module.body:
        if later and _runs_exec(each):
            return True
        later = later or each is statement
    return False


def _runs_exec(statement: cst.CSTNode) -> bool:
    """`exec(...)` as a module-level statement."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and isinstance(small.value.func, cst.Name)
        and small.value.func.value == "exec"
        for small in statement.body
    )


def configures(call: cst.Call) -> bool:
    """A call that records or tests a device rather than placing data: `set_defaults(device=...)`,
    `check_device(a, b, device="cuda")`."""
    name = dotted_name(call.func)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1]
    return last in _CONFIG_CALLS or last.startswith(("check", "is_", "has_"))


def probed(ancestors: Sequence[cst.CSTNode]) -> bool:
    """Inside `try:` with a handler for the error a missing GPU raises: a device looked up, expecting failure.

    Only for device objects (`group.get_backend(torch.device("cuda"))`): a move under such a
    `try:` usually guards against something else (out of memory) and still breaks without a GPU.
    """
    child: cst.CSTNode | None = None
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, cst.Try) and child is ancestor.body:
            return any(_catches_missing_gpu(handler) for handler in ancestor.handlers)
        child = ancestor
    return False


def expected_to_raise(ancestors: Sequence[cst.CSTNode]) -> bool:
    """Under `with self.assertRaises(...)` / `with pytest.raises(...)`: the test wants it to fail."""
    for ancestor in ancestors:
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                call = item.item
                name = dotted_name(call.func) if isinstance(call, cst.Call) else None
                if name is not None and name.rsplit(".", 1)[-1].startswith(("assertRaises", "raises")):
                    return True
    return False


def _catches_missing_gpu(handler: cst.ExceptHandler) -> bool:
    """`except:`, `except Exception`, `except RuntimeError`, `except (AssertionError, ...)`."""
    if handler.type is None:
        return True
    types = (
        [e.value for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) else [handler.type]
    )
    names = {dotted_name(t) for t in types}
    return bool(names & {"Exception", "BaseException", "RuntimeError", "AssertionError"})


def in_comparison(node: cst.CSTNode, ancestors: Sequence[cst.CSTNode]) -> bool:
    """`d == torch.device("cuda")`: a test of a device, not a choice of one; not a tensor made on
    the device and then computed on (`torch.ones(2, device="cuda").sum() == 2`)."""
    child: cst.CSTNode = node
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, cst.Comparison):
            return True
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.Arg, cst.FunctionDef)) and ancestor is not node:
            return False
        if isinstance(ancestor, cst.Call) and child is ancestor.func and child is not node:
            return False  # `<made on the device>.sum()`: a method computes on it
        child = ancestor
    return False
