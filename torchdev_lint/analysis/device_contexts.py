"""Where a hard-coded CUDA device is not a portability bug.

A device that is compared (`d == torch.device("cuda")`), looked up under a
`try:` that expects a missing GPU, written where a test expects an error, used
as data (a dict key, a set member, a test parameter, a parameter default), or
stored as configuration that whoever runs the code overrides (`args.device =
"cuda"`, `parser.set_defaults(device="cuda")`).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from torchdev_lint.analysis.scopes import dotted_name

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


def is_config(name: str) -> bool:
    """`cfg.MODEL.DEVICE`, `args.device`, `self.config.device`: a setting, overridden by whoever runs the code."""
    owners = name.split(".")[:-1]
    return any(part.lower() in _CONFIG_OWNERS or (part.isupper() and len(part) > 1) for part in owners)


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
    """`d == torch.device("cuda")`: a test of a device, not a choice of one."""
    for ancestor in reversed(ancestors):
        if isinstance(ancestor, cst.Comparison):
            return True
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.Arg, cst.FunctionDef)) and ancestor is not node:
            return False
    return False
