"""What a statement's shape says for a gate: does a block exit, which calls does a statement always
make, does a decorator skip without CUDA, does one flag test imply another (`requirements` asks)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from torchdev_lint.analysis.context.guards import name_words, says_missing, says_present
from torchdev_lint.analysis.knowledge.cuda_modules import CUDA_WORDS
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name
from torchdev_lint.analysis.syntax.walk import children, first
from torchdev_lint.syntax import positional

_EXITS = frozenset({"sys.exit", "os._exit", "exit", "quit", "pytest.skip", "pytest.exit"})
_SKIP_METHODS = frozenset({"skipTest", "skip"})
# Decorator words that make a CUDA word mean "skip without CUDA": `skip_if_lt_x_gpu`, `skipIfNoCUDA`.
_SKIP_WITHOUT = frozenset({"no", "lt", "less", "without", "unless"})
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp})
_NESTED_SCOPES = frozenset({cst.Lambda, cst.FunctionDef, cst.ClassDef})
_LEAVING = frozenset({cst.Return, cst.Raise, cst.Break, cst.Continue})


def flag_leaves(test: cst.BaseExpression) -> frozenset[str]:
    """The flags an `if` test combines with `and`/`or` (`use_ddp`, `self.distributed`); empty when
    it is anything else (a comparison, a call: what it reads may change unseen)."""
    if isinstance(test, cst.BooleanOperation):
        left, right = flag_leaves(test.left), flag_leaves(test.right)
        return left | right if left and right else frozenset()
    name = dotted_name(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
    return frozenset() if name is None else frozenset({name})


def implies(test: cst.BaseExpression, other: cst.BaseExpression) -> bool:
    """Whenever flag test `test` is true, so is `other` (`a` implies `a or b`; `a and b` implies `a`)."""
    if isinstance(other, cst.BooleanOperation) and isinstance(other.operator, cst.Or):
        if implies(test, other.left) or implies(test, other.right):
            return True
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        if implies(test.left, other) or implies(test.right, other):
            return True
    if isinstance(other, cst.BooleanOperation) and isinstance(other.operator, cst.And):
        return implies(test, other.left) and implies(test, other.right)
    leaves = flag_leaves(test)
    return len(leaves) == 1 and isinstance(test, (cst.Name, cst.Attribute)) and leaves == flag_leaves(other)


def runs_later(function: cst.FunctionDef) -> bool:
    """Calling it runs none of its body: an `async def` or a generator."""
    return function.asynchronous is not None or contains(function.body, (cst.Yield,))


def may_return(statement: cst.BaseStatement) -> bool:
    """The statement can leave the function with a `return` (not one of a nested function)."""
    return contains(statement, (cst.Return,))


def may_leave(statement: cst.CSTNode) -> bool:
    """The statement can leave its block other than by running to its end: `return`, `raise`,
    `break`, `continue` or a call that ends the program (nested functions and classes aside)."""
    return first(statement, _leaves, prune=(cst.FunctionDef, cst.ClassDef, cst.Lambda)) is not None


def _leaves(node: cst.CSTNode) -> bool:
    kind = type(node)
    return kind in _LEAVING or (kind is cst.Call and (dotted_name(node.func) or "") in _EXITS)  # type: ignore[attr-defined]


def device_names(
    statement: cst.CSTNode, resolve: Callable[[cst.BaseExpression], str | None]
) -> frozenset[str]:
    """The names a statement binds to a device it only names (`device = torch.device("cuda:0")`,
    `dev = "cuda"`), touching no GPU; empty for any other statement. `resolve` names a callee."""
    if not (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(assignment := statement.body[0], cst.Assign)
    ):
        return frozenset()
    value = assignment.value
    if not isinstance(value, cst.SimpleString) and not (
        isinstance(value, cst.Call) and resolve(value.func) == "torch.device"
    ):
        return frozenset()
    names = frozenset(t.target.value for t in assignment.targets if isinstance(t.target, cst.Name))
    return names if len(names) == len(assignment.targets) else frozenset()


def _asks_for_gpus(arg: cst.Arg) -> bool:
    """`min_cuda_gpus=1`, `gpu=True`: a keyword named for GPUs given a positive count or `True`
    (`min_cuda_gpus=0` asks for none)."""
    if arg.keyword is None or not name_words(arg.keyword.value) & CUDA_WORDS:
        return False
    value = arg.value
    if isinstance(value, cst.Integer):
        return value.evaluated_value > 0
    return isinstance(value, cst.Name) and value.value == "True"


def unconditional_calls(statement: cst.CSTNode) -> list[cst.Call]:
    """The calls a statement always makes: not those after `and`/`or`, in a branch of `x if c
    else y`, in a comprehension's element or a lambda (`device or torch.cuda.current_device()`
    claims the GPU only when no device is passed)."""
    found: list[cst.Call] = []
    stack = [statement]
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types (LibCST's node classes are final): isinstance on ABCs is slow
        if kind is cst.Call:
            found.append(node)  # type: ignore[arg-type]
        if kind is cst.BooleanOperation:
            stack.append(node.left)  # type: ignore[attr-defined]
        elif kind is cst.IfExp:
            stack.append(node.test)  # type: ignore[attr-defined]
        elif kind in _COMPREHENSIONS:
            stack.append(node.for_in.iter)  # type: ignore[attr-defined]
        elif kind not in _NESTED_SCOPES:
            stack.extend(children(node))
    return found


def contains(root: cst.CSTNode, kinds: tuple[type[cst.CSTNode], ...]) -> bool:
    """A node of `kinds` (exact types) in `root`, outside nested functions, classes and lambdas."""
    stack = [root]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in kinds:
            return True
        if kind not in _NESTED_SCOPES:
            stack.extend(children(node))
    return False


def exits(body: cst.BaseSuite, *, returns: bool = True) -> bool:
    """The block ends the function or program: `return` (when `returns`), `raise`, `sys.exit()`,
    `pytest.skip()`."""
    if isinstance(body, cst.SimpleStatementSuite):
        last: cst.CSTNode | None = body.body[-1] if body.body else None
    else:
        line = body.body[-1] if body.body else None
        last = line.body[-1] if isinstance(line, cst.SimpleStatementLine) and line.body else None
    if isinstance(last, cst.Raise) or (returns and isinstance(last, cst.Return)):
        return True
    if not isinstance(last, cst.Expr) or not isinstance(last.value, cst.Call):
        return False
    name = dotted_name(last.value.func)
    if name is None:
        return False
    return name in _EXITS or name.rsplit(".", 1)[-1] in _SKIP_METHODS


def cuda_only_decorated(node: cst.FunctionDef | cst.ClassDef, scope: Scope) -> bool:
    return any(skips_without_cuda(decorator.decorator, scope) for decorator in node.decorators)


def skips_without_cuda(node: cst.BaseExpression, scope: Scope) -> bool:
    """`unittest.skipIf(not torch.cuda.is_available(), ...)`, `pytest.mark.skipif(...)`,
    `skipUnless(TEST_CUDA)`, `requires_cuda`, `onlyCUDA`, `skip_if_lt_x_gpu(2)`, a condition given
    a GPU count or flag (`RunIf(min_cuda_gpus=1)`); a list of marks holding one. Not
    `pytest.mark.parametrize("device", ["cpu", "cuda"])`: data, not a condition."""
    if isinstance(node, (cst.List, cst.Tuple)):
        return any(skips_without_cuda(element.value, scope) for element in node.elements)
    func = node.func if isinstance(node, cst.Call) else node
    name = dotted_name(func)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1].lower()
    if isinstance(node, cst.Call) and last in ("skipif", "skipunless"):
        args = positional(node)
        if not args:
            return False
        condition = args[0].value
        return says_missing(condition, scope) if last == "skipif" else says_present(condition, scope)
    if "param" in last or "expand" in last:
        return False
    if isinstance(node, cst.Call) and any(_asks_for_gpus(arg) for arg in node.args):
        return True
    words = name_words(name)
    if not words & CUDA_WORDS:
        return False
    return "skip" not in words or bool(words & _SKIP_WITHOUT)
