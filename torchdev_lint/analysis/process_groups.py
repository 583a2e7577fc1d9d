"""Does code run only once a process group is initialised?

After `if not dist.is_initialized(): return` (or the same test through a helper of the file,
torchvision's `is_dist_avail_and_initialized()`), the program has joined a process group.
`requirements.CudaRequirements` asks here: in a file whose every `init_process_group` uses NCCL,
that group is NCCL's, and such code cannot meet a CPU-only machine (`torch.tensor(...,
device="cuda")` for `dist.all_reduce` is right there).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from torchdev_lint.analysis.scopes import Scope, block_statements, resolve

_IS_INITIALIZED = "torch.distributed.is_initialized"


class Initialization:
    """Tests that say a process group is initialised, following the file's own helpers (`functions`:
    the module's functions by name, as `CudaRequirements` indexes them)."""

    def __init__(self, module: Scope, functions: Mapping[str, list[cst.FunctionDef]]) -> None:
        self._scope = module
        self._functions = functions
        self._helpers: dict[int, bool] = {}

    def says_initialized(self, test: cst.BaseExpression) -> bool:
        """When `test` is true a process group is initialised: `dist.is_initialized()`,
        `dist.is_available() and dist.is_initialized()`, `is_dist_avail_and_initialized()`."""
        if isinstance(test, cst.BooleanOperation):
            left, right = self.says_initialized(test.left), self.says_initialized(test.right)
            return left or right if isinstance(test.operator, cst.And) else left and right
        if not isinstance(test, cst.Call) or test.args:
            return False
        if resolve(test.func, self._scope) == _IS_INITIALIZED:
            return True
        helpers = self._functions.get(test.func.value, []) if isinstance(test.func, cst.Name) else []
        return len(helpers) == 1 and self._helper_says(helpers[0])

    def true_uninitialized(self, test: cst.BaseExpression) -> bool:
        """`test` holds whenever no process group is initialised, so `if test: return` lets only
        distributed runs past: `not dist.is_initialized()`, `not dist.is_available() or not ...`."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self.says_initialized(test.expression)
        if isinstance(test, cst.BooleanOperation):
            left, right = self.true_uninitialized(test.left), self.true_uninitialized(test.right)
            return left or right if isinstance(test.operator, cst.Or) else left and right
        return False

    def _helper_says(self, function: cst.FunctionDef) -> bool:
        key = id(function)
        if key not in self._helpers:
            self._helpers[key] = False  # a recursive helper proves nothing
            self._helpers[key] = self._true_only_initialized(function)
        return self._helpers[key]

    def _true_only_initialized(self, function: cst.FunctionDef) -> bool:
        """The helper returns a true value only with a process group: it reaches `if not
        dist.is_initialized(): return False` (past other such falsy exits), or returns such a test.
        Any other statement that may hold a `return` ends the search."""
        for statement in block_statements(function.body):
            if isinstance(statement, cst.If):
                if statement.orelse is not None or not _returns_falsy(statement.body):
                    return False
                if self.true_uninitialized(statement.test):
                    return True
            elif isinstance(statement, cst.SimpleStatementLine):
                returned = next((s for s in statement.body if isinstance(s, cst.Return)), None)
                if returned is not None:
                    return returned.value is not None and self.says_initialized(returned.value)
            else:
                return False
        return False


def _returns_falsy(body: cst.BaseSuite) -> bool:
    """The block is only `return False` (or a bare `return`)."""
    lines = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if len(lines) != 1 or not isinstance(lines[0], (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return False
    smalls = lines[0].body
    if len(smalls) != 1 or not isinstance(smalls[0], cst.Return):
        return False
    value = smalls[0].value
    return value is None or (isinstance(value, cst.Name) and value.value == "False")
