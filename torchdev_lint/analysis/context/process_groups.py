"""Does code run only once a process group is initialised?

After `if not dist.is_initialized(): return` (or the same test through a helper of the file,
whatever its name, `in_group()`), the program has joined a process group. So it
has after `if get_world_size() == 1: return` (or under `if world_size > 1:`) where the size
comes from `dist.get_world_size()` (which raises without a group), from `dist.get_world_size() if
dist.is_initialized() else 1`, from a helper of the file that returns 1 whenever no group is
initialised, or from a local name bound once to such a size: its value is 1 unless the group exists.
`requirements.CudaRequirements` asks here: in a file whose every `init_process_group` uses NCCL,
that group is NCCL's, and such code cannot meet a CPU-only machine (`torch.tensor(...,
device="cuda")` for `dist.all_reduce` is right there). `is_nccl` and `nccl_by_default` tell a
backend argument that names NCCL, or a setting whose default is NCCL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence

import libcst as cst

from torchdev_lint.analysis.context.gate_shapes import may_leave
from torchdev_lint.analysis.knowledge.library_models import Fact, apis
from torchdev_lint.analysis.knowledge.torch_api import COLLECTIVES
from torchdev_lint.analysis.syntax.bindings import unpacked, walk_bindings
from torchdev_lint.analysis.syntax.scopes import (
    Scope,
    block_statements,
    dotted_name,
    last_name,
    parameters,
    resolve,
)
from torchdev_lint.syntax import keyword, positional

PROCESS_GROUP = "torch.distributed.init_process_group"

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
    the module's functions by name, as `CudaRequirements` indexes them), its module-level sizes
    (`global_writers`: the functions that rebind a module-level name, by name), where a name
    is read (`functions_around(node)`: the functions around it, innermost first) and the helpers
    of other project modules it imports (`imported_helpers`: names, each with whether it is a size,
    from pass 1's `group_helpers`)."""

    def __init__(
        self,
        module: Scope,
        functions: Mapping[str, list[cst.FunctionDef]],
        global_writers: Mapping[str, list[cst.FunctionDef]],
        functions_around: Callable[[cst.CSTNode], list[cst.FunctionDef]],
        imported_helpers: Callable[[], Collection[tuple[str, bool]]] = frozenset,
    ) -> None:
        self._scope = module
        self._functions = functions
        self._global_writers = global_writers
        self._functions_around = functions_around
        self._imported_helpers = imported_helpers
        self._helpers: dict[tuple[int, bool], bool] = {}
        self._globals: dict[str, bool] = {}
        self._locals: dict[tuple[int, str], bool] = {}

    def says_initialized(self, test: cst.BaseExpression) -> bool:
        """When `test` is true a process group is initialised: `dist.is_initialized()`,
        `dist.is_available() and dist.is_initialized()`, a helper of the file that returns such a test,
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
        return (helper is not None and self._helper_says(helper, sizes=False)) or self._imported(
            test, sizes=False
        )

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
        if isinstance(right, cst.Integer) and (operator, right.evaluated_value) in size_first:
            return self._one_unless_initialized(left)
        if isinstance(left, cst.Integer) and (operator, left.evaluated_value) in size_second:
            return self._one_unless_initialized(right)
        return False

    def _one_unless_initialized(self, size: cst.BaseExpression) -> bool:
        """`dist.get_world_size()` (it raises without a group), a library's size that is 1 without
        a group, a call of a helper of the file that returns 1 whenever no group is initialised, a
        local name bound once to such a size, or a module-level name bound to 1 that functions
        rebind only to such sizes."""
        if isinstance(size, cst.Name):
            return self._named_size(size)
        if isinstance(size, cst.IfExp):  # `dist.get_world_size() if dist.is_initialized() else 1`
            return self.says_initialized(size.test) and _is_one(size.orelse)
        if not isinstance(size, cst.Call) or size.args:
            return False
        name = resolve(size.func, self._scope)
        if name == _GET_WORLD_SIZE or name in apis(Fact.WORLD_SIZE):
            return True
        helper = self._helper(size)
        return (helper is not None and self._helper_says(helper, sizes=True)) or self._imported(
            size, sizes=True
        )

    def group_helpers(self) -> list[tuple[str, bool]]:
        """The module-level functions of the file that return a false value (`sizes`: 1) whenever no
        process group is initialised, each with whether it is a size (pass 1's summary)."""
        return [
            (name, sizes)
            for name, functions in sorted(self._functions.items())
            if len(functions) == 1 and any(b.node is functions[0] for b in self._scope.bindings.get(name, ()))
            for sizes in (False, True)
            if self._helper_says(functions[0], sizes=sizes)
        ]

    def _imported(self, call: cst.Call, *, sizes: bool) -> bool:
        """`dist_utils.in_group()`: an imported helper that another project
        module defines (`imported_helpers`); the name must come from an import, not this file."""
        name = last_name(call.func)
        if name is None or (name, sizes) not in self._imported_helpers():
            return False
        head = call.func
        while isinstance(head, cst.Attribute):
            head = head.value
        bindings = self._scope.bindings.get(head.value, []) if isinstance(head, cst.Name) else []
        return bool(bindings) and all(binding.import_target is not None for binding in bindings)

    def _named_size(self, read: cst.Name) -> bool:
        """`size` read where it is the innermost function's, bound there once (`world_size =
        get_world_size()`, then `if world_size > 1:`) to a size that is 1 without a group; or
        where it is the module's: `size = 1` at module level, and every function that rebinds it
        (`global size`) assigns it such a size."""
        name = read.value
        around = self._functions_around(read)
        if around and _binds_locally(around[0], name):
            return self._local_size(around[0], name)
        if any(_binds_locally(function, name) for function in around[1:]):
            return False
        if name not in self._globals:
            self._globals[name] = False  # a size defined through itself proves nothing
            self._globals[name] = self._module_size(name)
        return self._globals[name]

    def _local_size(self, function: cst.FunctionDef, name: str) -> bool:
        """A local variable, not a parameter, whose one binding is `name = <size>`: a name bound
        again (in a loop, by a branch) may hold anything by the time it is read."""
        key = (id(function), name)
        if key not in self._locals:
            self._locals[key] = False  # `size = size + 0` proves nothing
            bound = [
                b
                for b in walk_bindings(block_statements(function.body))
                if any(isinstance(t, cst.Name) and t.value == name for t in unpacked(b.target))
            ]
            self._locals[key] = (
                name not in {p.name.value for p in parameters(function)}
                and len(bound) == 1
                and bound[0].kind == "assign"
                and isinstance(bound[0].target, cst.Name)
                and bound[0].value is not None
                and self._one_unless_initialized(bound[0].value)
            )
        return self._locals[key]

    def _module_size(self, name: str) -> bool:
        writers = self._global_writers.get(name, [])
        module_values = [binding.value for binding in self._scope.bindings.get(name, [])]
        if not writers or not module_values or not all(v is not None and _is_one(v) for v in module_values):
            return False
        for function in writers:
            for bound in walk_bindings(block_statements(function.body)):
                if bound.kind == "global" or not any(
                    isinstance(t, cst.Name) and t.value == name for t in unpacked(bound.target)
                ):
                    continue
                if bound.kind != "assign" or bound.value is None or not isinstance(bound.target, cst.Name):
                    return False
                if not self._one_unless_initialized(bound.value):
                    return False
        return True

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
        exits), or returns such a test or size (`return dist.get_world_size() if
        dist.is_initialized() else 1`). Any other statement that may hold a `return` ends the search."""
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
                    if value is None:
                        return False
                    return self._one_unless_initialized(value) if sizes else self.says_initialized(value)
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


def _binds_locally(function: cst.FunctionDef, name: str) -> bool:
    """Is `name` a parameter or a local variable of `function` (not declared `global` there)?"""
    if name in {p.name.value for p in parameters(function)}:
        return True
    found = False
    for bound in walk_bindings(block_statements(function.body)):
        if (
            bound.kind in ("global", "nonlocal")
            and isinstance(bound.target, cst.Name)
            and bound.target.value == name
        ):
            return False
        found = found or any(isinstance(t, cst.Name) and t.value == name for t in unpacked(bound.target))
    return found


def feeds_collective(node: cst.CSTNode, parents: Mapping[int, cst.CSTNode], scope: Scope) -> bool:
    """Is the tensor made at `node` handed to a collective: in its own statement
    (`dist.all_reduce(torch.tensor([n], device="cuda"))`), or bound to a name (`total = ...`) that a
    later statement of its function hands to one (`dist.all_reduce(total)`) before anything returns
    or rebinds it? In a program whose process groups are all NCCL's, NCCL needs it on CUDA."""
    line, bound = _statement_name(node, parents)
    if _hands_to_collective(line, None, scope):
        return True
    child, parent = line, parents.get(id(line))
    while bound is not None and isinstance(parent, (cst.IndentedBlock, cst.If, cst.Else, cst.For, cst.While)):
        if isinstance(parent, cst.IndentedBlock):
            handed = _collective_after(parent.body, child, bound, scope)
            if handed is not None:
                return handed
        child, parent = parent, parents.get(id(parent))
    return False


def _statement_name(node: cst.CSTNode, parents: Mapping[int, cst.CSTNode]) -> tuple[cst.CSTNode, str | None]:
    """The simple statement line holding `node` (or `node` itself when it holds none), and the name it
    binds when it is `name = ...` alone (`total = torch.zeros([], device="cuda")`)."""
    line: cst.CSTNode | None = node
    while line is not None and not isinstance(line, cst.SimpleStatementLine):
        line = parents.get(id(line))
    if line is None:
        return node, None
    assert isinstance(line, cst.SimpleStatementLine)
    small = line.body[0] if len(line.body) == 1 else None
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
    ):
        return line, small.targets[0].target.value
    return line, None


def _hands_to_collective(line: cst.CSTNode, name: str | None, scope: Scope) -> bool:
    """`dist.all_reduce(torch.tensor([n], device="cuda"))`, or `dist.all_reduce(name)`: the line is a
    collective over the tensor it makes, or over `name`."""
    if not isinstance(line, cst.SimpleStatementLine):
        return False
    for small in line.body:
        call = small.value if isinstance(small, cst.Expr) else None
        if not isinstance(call, cst.Call) or resolve(call.func, scope) not in COLLECTIVES:
            continue
        if name is None:
            return True  # the site is inside the collective's own statement
        for arg in positional(call):
            items = arg.value.elements if isinstance(arg.value, (cst.List, cst.Tuple)) else [arg]
            if any(isinstance(item.value, cst.Name) and item.value.value == name for item in items):
                return True
    return False


def _collective_after(
    body: Sequence[cst.CSTNode], child: cst.CSTNode, name: str, scope: Scope
) -> bool | None:
    """After `child` in `body`: True when a statement hands `name` to a collective before anything
    rebinds it or leaves the block; False when something may (a rebinding, `return`, `raise`,
    `break`, `continue`, in a compound statement too); None when the block ends first (the caller
    goes on in the enclosing block)."""
    after = False
    for statement in body:
        if statement is child:
            after = True
            continue
        if not after:
            continue
        if _hands_to_collective(statement, name, scope):
            return True
        if _leaves_or_binds(statement, name):
            return False
    return None


def _leaves_or_binds(statement: cst.CSTNode, name: str) -> bool:
    return may_leave(statement) or any(
        isinstance(b.target, cst.Name) and b.target.value == name for b in walk_bindings([statement])
    )


class GroupStarts:
    """The process groups one file starts (`calls`, noted by the file's walk) and the names it
    gives strings, which may name a backend (`backend = "nccl"`, `def __init__(self, backend="nccl")`)."""

    def __init__(self, resolve: Callable[[cst.BaseExpression], str | None]) -> None:
        self._resolve = resolve
        self.calls: list[cst.Call] = []
        self._nccl_names: set[str] = set()  # assigned `"nccl"`, or a parameter defaulting to it
        self._other_names: set[str] = set()  # also assigned another string: `backend = "gloo"`
        self._starts: list[bool] | None = None

    def note_string(self, name: str | None, value: cst.SimpleString) -> None:
        if name is not None:
            (self._nccl_names if is_nccl(value) else self._other_names).add(name)

    def nccl_group(self, call: cst.Call, *, default: bool = False) -> bool:
        """`init_process_group("nccl")`, a setting whose default is NCCL (`kwargs.get("backend",
        "nccl")`), or `backend=args.dist_backend` where the file assigns that name `"nccl"` and no
        other string; with `default`, also a call naming no backend."""
        backend = keyword(call, "backend")
        args = positional(call)
        value = backend.value if backend is not None else args[0].value if args else None
        if value is None:
            return default
        dotted = dotted_name(value)
        return (
            is_nccl(value)
            or nccl_by_default(value)
            or (dotted is not None and dotted in self._nccl_names and dotted not in self._other_names)
        )

    def starts(self) -> list[bool]:
        """For each process group the file starts: does it use NCCL?"""
        if self._starts is None:
            starters = apis(Fact.NCCL_GROUP)
            groups = [(call, self._resolve(call.func)) for call in self.calls]
            self._starts = [
                self.nccl_group(call, default=name in starters)
                for call, name in groups
                if name == PROCESS_GROUP or name in starters
            ]
        return self._starts


@functools.cache
def group_starter_names() -> frozenset[str]:
    """The last names of the calls that may start a process group (resolved later)."""
    return frozenset({"init_process_group"} | {api.rsplit(".", 1)[-1] for api in apis(Fact.NCCL_GROUP)})


def is_nccl(node: cst.BaseExpression) -> bool:
    """`"nccl"` (or `"cuda:nccl"`), not a mixed `"cpu:gloo,cuda:nccl"`."""
    if not isinstance(node, cst.SimpleString):
        return False
    text = node.evaluated_value
    return isinstance(text, str) and "nccl" in text and "gloo" not in text


def nccl_by_default(node: cst.BaseExpression) -> bool:
    """`kwargs.get("backend", "nccl")`, `getattr(args, "backend", "nccl")`: NCCL unless configured."""
    if not isinstance(node, cst.Call):
        return False
    args = positional(node)
    if isinstance(node.func, cst.Attribute) and node.func.attr.value == "get" and len(args) == 2:
        return is_nccl(args[1].value)
    if isinstance(node.func, cst.Name) and node.func.value == "getattr" and len(args) == 3:
        return is_nccl(args[2].value)
    return False
