"""Code that runs once, at setup, where one allocation or copy more cannot matter.

`runs_once(ctx)` answers for the node being visited: at module level outside any loop (a script's
setup before its training loop runs once per process), inside a function named for setup
(`__init__`, `_init_weights`, `_setup_train`, an availability probe, a conversion for
deployment such as `switch_to_deploy` or `_fuse_bn_tensor`), in a first-use branch
(`if not hasattr(self, "queue"):`, `if len(state) == 0:`, `if k not in self.d:` storing
`self.d[k]`), in a function whose result is cached (`@cached_property`, `@lru_cache`: once per
instance or arguments), in a private helper that this
file calls only from such code or lists only in a registry named for setup
(`ROPE_INIT_FUNCTIONS = {"linear": _compute_linear_rope, ...}`), a dummy input for an
export or trace (made in an exporter, or passed to `export_onnx(model, im)`,
`torch.jit.trace(model, im)`), a lambda traced once (`torch.jit.trace(lambda: ...)`), or a
tensor registered as model state on the spot (`register_buffer(name, ...)`, `nn.Parameter(...)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.context.guards import name_words
from torchdev_lint.analysis.knowledge.library_models import Fact, apis
from torchdev_lint.analysis.syntax.scopes import Scope, block_statements, last_name, resolve
from torchdev_lint.analysis.syntax.walk import children, walk

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# Words of a function's name that say it runs once, at setup: `_setup_train`, `initialize`,
# availability probes (`_is_fp16_available`), conversions for deployment (`switch_to_deploy`,
# `reparameterize`, `_fuse_bn_tensor`; a kernel used per step is `fused_*`, another word).
_SETUP_WORDS = frozenset(
    {"initialize", "initialise", "setup", "available", "deploy", "fuse", "reparameterize", "reparameterise"}
)
# Words of a module-level registry's name that say its functions run at setup: `ROPE_INIT_FUNCTIONS`.
_SETUP_REGISTRY_WORDS = frozenset({"init", "initialize", "initialise", "setup"})
# With "init", words that say what is set up once: `_init_weights`, `distributed_init`
# (`init_hidden`, `init_state` run per batch).
_INITIALIZED_ONCE = frozenset({"weights", "weight", "params", "parameters", "distributed", "model", "module"})
# Words of a function, class or callee that say a tensor is a dummy input for one export or
# trace: `export_onnx(model, im)`, `torch.jit.trace(model, im)`, `class Exporter`, `convert_to_trt`.
_EXPORT_WORDS = frozenset({"export", "exporter", "trace", "onnx", "trt", "tensorrt", "torchscript"})
# Calls that register a tensor as model state once: `register_buffer(name, t)`, `nn.Parameter(t)`.
_STATE_REGISTRATIONS = frozenset({"register_buffer", "register_parameter", "Parameter", "Buffer"})
_CACHE = "_setup_callers"
# What may run a statement more than once (or later, again): functions, loops, comprehensions.
_REPEATING = (cst.FunctionDef, cst.Lambda, cst.For, cst.While, cst.BaseComp)


def runs_once(ctx: FileContext) -> bool:
    """Whether the node being visited is setup code run once (see the module docstring)."""
    ancestors = ctx.ancestors
    functions = [node for node in ancestors if isinstance(node, cst.FunctionDef)]
    if _in_setup_code(ancestors, ctx.scope):
        return True
    # Climb the chain the visited node's result goes through: `.to(d).type_as(p)`, `[... .to(d)]`.
    depth = 1
    while True:
        parent, grandparent = ctx.parent(depth), ctx.parent(depth + 1)
        if (
            isinstance(parent, cst.Attribute)
            and isinstance(grandparent, cst.Call)
            and grandparent.func is parent
        ):
            depth += 2
        elif isinstance(parent, cst.Element) and isinstance(grandparent, (cst.List, cst.Tuple)):
            depth += 2
        else:
            break
    holder = ctx.parent(depth)
    if isinstance(holder, cst.Arg):
        registration = ctx.parent(depth + 1)
        return isinstance(registration, cst.Call) and last_name(registration.func) in _STATE_REGISTRATIONS
    if not functions or not isinstance(holder, cst.Assign) or len(holder.targets) != 1:
        return False
    target = holder.targets[0].target
    return isinstance(target, cst.Name) and _passed_to_export(target.value, functions[-1])


def _in_setup_code(ancestors: Sequence[cst.CSTNode], scope: Scope, *, top_level: bool = True) -> bool:
    """Code under `ancestors` (outermost first) runs at setup: with `top_level`, at module level
    outside any loop (not what it calls: a script's `main()`); in a function named for setup or
    export, in a first-use branch of its function, in a lambda handed to an export or trace call,
    or in a private helper called only from such code."""
    if top_level and not any(isinstance(node, _REPEATING) for node in ancestors):
        return True  # module level outside loops: a script's setup before its loop, an import-time table
    functions = [node for node in ancestors if isinstance(node, cst.FunctionDef)]
    if any(_names_setup(function.name.value) or _cached(function, scope) for function in functions):
        return True
    owners = [node.name.value for node in ancestors if isinstance(node, (cst.FunctionDef, cst.ClassDef))]
    if any(_EXPORT_WORDS & name_words(owner) for owner in owners):
        return True
    for call, arg, inner in zip(ancestors, ancestors[1:], ancestors[2:], strict=False):
        if isinstance(inner, cst.Lambda) and isinstance(arg, cst.Arg) and isinstance(call, cst.Call):
            callee = last_name(call.func)
            if callee is not None and _EXPORT_WORDS & name_words(callee):
                return True  # `torch.jit.trace(lambda: ..., example_inputs=[])`: run once, to trace
    innermost = next((i for i, node in enumerate(ancestors) if functions and node is functions[-1]), 0)
    for branch, body in pairwise(ancestors[innermost:]):
        if isinstance(branch, cst.If) and body is branch.body and _first_use(branch, scope):
            return True
    # Only a private function can be called from setup code alone (asked before the file's index is built).
    return (
        bool(functions)
        and _private(functions[-1].name.value)
        and _setup_callers(scope).called_only_at_setup(functions[-1])
    )


def _cached(function: cst.FunctionDef, scope: Scope) -> bool:
    """`@cached_property`, `@lru_cache(...)`: the body runs once per instance or arguments."""
    for decorator in function.decorators:
        target = decorator.decorator
        target = target.func if isinstance(target, cst.Call) else target
        if resolve(target, scope) in apis(Fact.CACHED_RESULT):
            return True
    return False


def _setup_callers(scope: Scope) -> _SetupCallers:
    """The index of the module `scope` belongs to, built once per file."""
    module = scope.module
    found = module.__dict__.get(_CACHE)
    if found is None:
        found = _SetupCallers(module)
        module.__dict__[_CACHE] = found
    return found


class _SetupCallers:
    """Where one module names its private functions (`_helper`) and methods (`self._helper`,
    `block._helper`), to tell the helpers it calls only from setup code.

    Only private names count: other modules may call a public function per step. A use other
    than a call (`register_forward_hook(self._hook)` in `__init__`) may run at any time, and so
    may a call at module level (`main()` of a script runs its training loop); the one use
    besides a call that counts is a value in a module-level registry named for setup.
    """

    def __init__(self, module: Scope) -> None:
        assert isinstance(module.node, cst.Module)
        self._module = module
        self._definitions: dict[str, list[cst.FunctionDef]] = {}
        # Each use of a private name: the nodes from the module down to it. Kept for these
        # few nodes only; a parent for every node cost a fifth of a large file's check.
        self._uses: dict[str, list[tuple[cst.CSTNode, ...]]] = {}
        self._once: dict[int, bool] = {}
        self._stack: list[cst.CSTNode] = []
        walk(module.node, self._enter, self._leave)

    def _enter(self, node: cst.CSTNode) -> None:
        stack = self._stack
        stack.append(node)
        if len(stack) == 1:
            return
        # Exact types (LibCST has no subclasses of these): isinstance on its ABCs is slow.
        if type(node) is cst.FunctionDef:
            name = node.name.value
            if _private(name):
                in_class = len(stack) > 2 and type(stack[-3]) is cst.ClassDef
                self._definitions.setdefault("." + name if in_class else name, []).append(node)
        elif type(node) is cst.Name:
            if _private(node.value) and not _names_definition(node, stack[-2]):
                self._uses.setdefault(node.value, []).append(tuple(stack))
        elif type(node) is cst.Attribute and _private(node.attr.value):
            # `self._helper`, and (a method called from elsewhere) `Block._helper`, `block._helper`.
            self._uses.setdefault("." + node.attr.value, []).append(tuple(stack))

    def _leave(self, node: cst.CSTNode) -> None:
        self._stack.pop()

    def called_only_at_setup(self, function: cst.FunctionDef) -> bool:
        """Every use of the function's name in this file is a call from setup code or an entry
        of a registry named for setup, and there is one at least."""
        key = id(function)
        if key not in self._once:
            self._once[key] = False  # a recursive function: its own calls prove nothing
            uses = self._uses_of(function)
            self._once[key] = bool(uses) and all(self._use_at_setup(use) for use in uses)
        return self._once[key]

    def _uses_of(self, function: cst.FunctionDef) -> list[tuple[cst.CSTNode, ...]]:
        """Where this file names a private function it defines once; empty when unknown."""
        for key in (function.name.value, "." + function.name.value):
            if self._definitions.get(key) == [function]:
                return self._uses.get(key, [])
        return []

    def _use_at_setup(self, path: tuple[cst.CSTNode, ...]) -> bool:
        use, parent = path[-1], path[-2]
        if isinstance(parent, cst.DictElement) and parent.value is use:
            return _in_setup_registry(path[:-1])
        if not isinstance(parent, cst.Call) or parent.func is not use:
            return False
        return _in_setup_code(list(path), self._module, top_level=False)  # a script's `main()` loops


def _in_setup_registry(path: tuple[cst.CSTNode, ...]) -> bool:
    """`ROPE_INIT_FUNCTIONS = {"linear": _compute_linear_rope, ...}` at module level (`path`: the
    nodes from the module down to the dict element)."""
    if len(path) < 5 or not isinstance(path[-5], cst.Module):
        return False
    line, assignment = path[-4], path[-3]
    if not isinstance(line, cst.SimpleStatementLine):
        return False
    if isinstance(assignment, cst.Assign) and len(assignment.targets) == 1:
        target: cst.BaseExpression = assignment.targets[0].target
    elif isinstance(assignment, cst.AnnAssign):
        target = assignment.target
    else:
        return False
    return isinstance(target, cst.Name) and bool(_SETUP_REGISTRY_WORDS & name_words(target.value))


def _names_definition(name: cst.Name, parent: cst.CSTNode) -> bool:
    """`def _helper`, `x._helper`: the name is not a use of a function."""
    return isinstance(parent, cst.FunctionDef) or (isinstance(parent, cst.Attribute) and parent.attr is name)


def _private(name: str) -> bool:
    """`_helper`, not `__init__` or a public name."""
    return name.startswith("_") and not name.endswith("__")


def _names_setup(name: str) -> bool:
    """`__init__`, `_init_weights`, `distributed_init`, `_setup_train`, `_is_fp16_available`."""
    words = name_words(name)
    return (
        name == "__init__"
        or bool(_SETUP_WORDS & words)
        or ("init" in words and bool(_INITIALIZED_ONCE & words))
    )


def _first_use(branch: cst.If, scope: Scope) -> bool:
    """`not hasattr(self, "queue")`, `self.cache is None`, `len(state) == 0`, `k not in self.d`
    storing `self.d[k]`: state made on first use and kept."""
    test = branch.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        return isinstance(inner, cst.Call) and resolve(inner.func, scope) == "builtins.hasattr"
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, (comparison,) = test.left, test.comparisons
    right = comparison.comparator
    if isinstance(comparison.operator, cst.Is) and isinstance(right, cst.Name) and right.value == "None":
        return _self_attribute(left)
    if isinstance(comparison.operator, cst.NotIn):
        return _self_attribute(right) and _stores_under(branch.body, right, left)
    return (
        isinstance(comparison.operator, cst.Equal)
        and isinstance(right, cst.Integer)
        and right.value == "0"
        and isinstance(left, cst.Call)
        and resolve(left.func, scope) == "builtins.len"
    )


def _self_attribute(node: cst.BaseExpression) -> bool:
    """`self.cache`: state the object keeps between calls."""
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"


def _stores_under(body: cst.BaseSuite, mapping: cst.BaseExpression, key: cst.BaseExpression) -> bool:
    """Does a statement of `body` (not nested) assign `mapping[key] = ...`? Then the guard
    `key not in mapping` holds once per key: what the body makes is kept."""
    lines = block_statements(body)
    for small in (s for line in lines if isinstance(line, cst.SimpleStatementLine) for s in line.body):
        if isinstance(small, cst.Assign):
            for target in small.targets:
                item = target.target
                if (
                    isinstance(item, cst.Subscript)
                    and item.value.deep_equals(mapping)
                    and len(item.slice) == 1
                    and isinstance(item.slice[0].slice, cst.Index)
                    and item.slice[0].slice.value.deep_equals(key)
                ):
                    return True
    return False


def _passed_to_export(name: str, function: cst.FunctionDef) -> bool:
    """Is `name` handed (alone or in a list or tuple) to an export or trace call in `function`?"""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        stack.extend(children(node))
        if not isinstance(node, cst.Call):
            continue
        callee = last_name(node.func)
        if callee is None or not _EXPORT_WORDS & name_words(callee):
            continue
        for arg in node.args:
            items = (
                [e.value for e in arg.value.elements]
                if isinstance(arg.value, (cst.List, cst.Tuple))
                else [arg.value]
            )
            if any(isinstance(item, cst.Name) and item.value == name for item in items):
                return True
    return False
