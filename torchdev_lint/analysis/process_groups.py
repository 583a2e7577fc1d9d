"""Does code run only once a process group is initialised?

After `if not dist.is_initialized(): return` (or the same test through a helper of the file,
torchvision's `is_dist_avail_and_initialized()`), the program has joined a process group. So it
has after `if get_world_size() == 1: return` (or under `if world_size() > 1:`) where the size
comes from `dist.get_world_size()` (which raises without a group) or from a helper of the file
that returns 1 whenever no group is initialised: the helper's value is 1 unless the group exists.
`requirements.CudaRequirements` asks here: in a file whose every `init_process_group` uses NCCL,
that group is NCCL's, and such code cannot meet a CPU-only machine (`torch.tensor(...,
device="cuda")` for `dist.all_reduce` is right there).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from torchdev_lint.analysis.scopes import Scope, block_statements, resolve

_IS_INITIALIZED = "torch.distributed.is_initialized"
_GET_WORLD_SIZE = "torch.distributed.get_world_size"
# Comparisons of a world size with a number that hold for one process, by the side the size is on.
_Sizes = frozenset[tuple[type[cst.BaseCompOp], int]]
_ONE_PROCESS: _Sizes = frozenset({(cst.Equal, 1), (cst.LessThanEqual, 1), (cst.LessThan, 2)})
_ONE_PROCESS_MIRRORED: _Sizes = frozenset({(cst.Equal, 1), (cst.GreaterThanEqual, 1), (cst.GreaterThan, 2)})
_MANY_PROCESSES: _Sizes = frozenset({(cst.GreaterThan, 1), (cst.GreaterThanEqual, 2), (cst.NotEqual, 1)})
_MANY_PROCESSES_MIRRORED: _Sizes = frozenset({(cst.LessThan, 1), (cst.LessThanEqual, 2), (cst.NotEqual, 1)})


class Initialization:
    """Tests that say a process group is initialised, following the file's own helpers (`functions`:
    the module's functions by name, as `CudaRequirements` indexes them)."""

    def __init__(self, module: Scope, functions: Mapping[str, list[cst.FunctionDef]]) -> None:
        self._scope = module
        self._functions = functions
        self._helpers: dict[tuple[int, bool], bool] = {}

    def says_initialized(self, test: cst.BaseExpression) -> bool:
        """When `test` is true a process group is initialised: `dist.is_initialized()`,
        `dist.is_available() and dist.is_initialized()`, `is_dist_avail_and_initialized()`,
        `get_world_size() > 1`."""
        if isinstance(test, cst.BooleanOperation):
            left, right = self.says_initialized(test.left), self.says_initialized(test.right)
            return left or right if isinstance(test.operator, cst.And) else left and right
        if isinstance(test, cst.Comparison):
            return self._compares_size(test, _MANY_PROCESSES, _MANY_PROCESSES_MIRRORED)
        if not isinstance(test, cst.Call) or test.args:
            return False
        if resolve(test.func, self._scope) == _IS_INITIALIZED:
            return True
        helper = self._helper(test)
        return helper is not None and self._helper_says(helper, sizes=False)

    def true_uninitialized(self, test: cst.BaseExpression) -> bool:
        """`test` holds whenever no process group is initialised, so `if test: return` lets only
        distributed runs past: `not dist.is_initialized()`, `not dist.is_available() or not ...`."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self.says_initialized(test.expression)
        if isinstance(test, cst.BooleanOperation):
            left, right = self.true_uninitialized(test.left), self.true_uninitialized(test.right)
            return left or right if isinstance(test.operator, cst.Or) else left and right
        if isinstance(test, cst.Comparison):
            return self._compares_size(test, _ONE_PROCESS, _ONE_PROCESS_MIRRORED)
        return False

    def _compares_size(self, test: cst.Comparison, size_first: _Sizes, size_second: _Sizes) -> bool:
        """`size <op> n` with (op, n) in `size_first`, or `n <op> size` in `size_second`, where the
        size is 1 unless a process group is initialised."""
        if len(test.comparisons) != 1:
            return False
        left, target = test.left, test.comparisons[0]
        right, operator = target.comparator, type(target.operator)
        if isinstance(right, cst.Integer) and (operator, int(right.value)) in size_first:
            return self._one_unless_initialized(left)
        if isinstance(left, cst.Integer) and (operator, int(left.value)) in size_second:
            return self._one_unless_initialized(right)
        return False

    def _one_unless_initialized(self, size: cst.BaseExpression) -> bool:
        """`dist.get_world_size()` (it raises without a group), or a call of a helper of the file
        that returns 1 whenever no group is initialised."""
        if not isinstance(size, cst.Call) or size.args:
            return False
        if resolve(size.func, self._scope) == _GET_WORLD_SIZE:
            return True
        helper = self._helper(size)
        return helper is not None and self._helper_says(helper, sizes=True)

    def _helper(self, call: cst.Call) -> cst.FunctionDef | None:
        helpers = self._functions.get(call.func.value, []) if isinstance(call.func, cst.Name) else []
        return helpers[0] if len(helpers) == 1 else None

    def _helper_says(self, function: cst.FunctionDef, *, sizes: bool) -> bool:
        key = (id(function), sizes)
        if key not in self._helpers:
            self._helpers[key] = False  # a recursive helper proves nothing
            self._helpers[key] = self._exits_without_group(function, sizes)
        return self._helpers[key]

    def _exits_without_group(self, function: cst.FunctionDef, sizes: bool) -> bool:
        """The helper returns a false value (with `sizes`, 1) whenever no process group is
        initialised: it reaches `if not dist.is_initialized(): return False` (past other such
        exits), or returns such a test (`return dist.get_world_size() if dist.is_initialized()
        else 1`). Any other statement that may hold a `return` ends the search."""
        exit_value = _returns_one if sizes else _returns_falsy
        for statement in block_statements(function.body):
            if isinstance(statement, cst.If):
                if statement.orelse is not None or not exit_value(statement.body):
                    return False
                if self.true_uninitialized(statement.test):
                    return True
            elif isinstance(statement, cst.SimpleStatementLine):
                returned = next((s for s in statement.body if isinstance(s, cst.Return)), None)
                if returned is not None:
                    value = returned.value
                    if sizes:
                        return (
                            isinstance(value, cst.IfExp)
                            and self.says_initialized(value.test)
                            and _is_one(value.orelse)
                        )
                    return value is not None and self.says_initialized(value)
            else:
                return False
        return False


def _returned(body: cst.BaseSuite) -> tuple[bool, cst.BaseExpression | None]:
    """Is the block only a `return`, and its value."""
    lines = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if len(lines) != 1 or not isinstance(lines[0], (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return False, None
    smalls = lines[0].body
    if len(smalls) != 1 or not isinstance(smalls[0], cst.Return):
        return False, None
    return True, smalls[0].value


def _returns_falsy(body: cst.BaseSuite) -> bool:
    """The block is only `return False` (or a bare `return`)."""
    only, value = _returned(body)
    return only and (value is None or (isinstance(value, cst.Name) and value.value == "False"))


def _returns_one(body: cst.BaseSuite) -> bool:
    """The block is only `return 1`."""
    only, value = _returned(body)
    return only and value is not None and _is_one(value)


def _is_one(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Integer) and value.value == "1"
