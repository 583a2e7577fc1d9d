"""Can this code run without CUDA? Programs, tests and modules that never meet a CPU-only machine.

A script that exits when `torch.cuda.is_available()` is false, a test skipped
without CUDA, or a process that joins an NCCL process group before the code
runs: a hard-coded `"cuda"` there cannot fail for want of a GPU. The per-file
answer is `CudaRequirements.requires_cuda(node)`. A gate in another file of the
project (`utils.init_distributed_mode(args)`) comes in as `GatingCallees`: the
project analysis (`analysis/project/project_facts.py`) tells which callees, named as this
file writes them, stop the program where CUDA is missing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

import libcst as cst

from torchdev_lint.analysis.context.cuda_only_code import (
    BUILDERS,
    compiles_cuda,
    cuda_specific_path,
    imports_cuda_only,
    imports_cuda_only_dynamically,
)
from torchdev_lint.analysis.context.gate_shapes import (
    cuda_only_decorated,
    device_names,
    exits,
    flag_leaves,
    implies,
    may_leave,
    may_return,
    runs_later,
    skips_without_cuda,
    unconditional_calls,
)
from torchdev_lint.analysis.context.guards import says_missing, says_present
from torchdev_lint.analysis.context.process_groups import (
    PROCESS_GROUP,
    GroupStarts,
    Initialization,
    feeds_collective,
    group_starter_names,
)
from torchdev_lint.analysis.knowledge.library_models import Fact, apis
from torchdev_lint.analysis.knowledge.torch_api import IMPLICITLY_CALLED_METHODS
from torchdev_lint.analysis.syntax.loops import bound_in
from torchdev_lint.analysis.syntax.reaching_bindings import after_exit
from torchdev_lint.analysis.syntax.scopes import (
    EnclosingScopes,
    Scope,
    block_statements,
    dotted_name,
    last_name,
    resolve,
)
from torchdev_lint.analysis.syntax.walk import first, walk

# `with torch.cuda.stream(s):` / `with torch.cuda.device(i):` bodies run on a GPU.
_CUDA_CONTEXTS = frozenset({"torch.cuda.stream", "torch.cuda.device"})
_CACHE = "_cuda_requirements"


class GatingCallees(Protocol):
    """Facts from outside the file: which callees (`utils.init_distributed_mode`, as the
    file writes them) stop the program where CUDA is missing, whether the calls other
    files make of a module-level function of this file all run only where CUDA is, whether
    every process group the project starts is NCCL's, and whether the module imports a project
    module that needs a CUDA-only library."""

    def gates(self, callee: str) -> bool: ...

    def called_with_cuda(self, function: str) -> bool | None: ...

    def nccl_program(self) -> bool: ...

    def imported_group_helpers(self) -> Collection[tuple[str, bool]]: ...

    def imports_cuda_only(self) -> bool: ...


def cuda_requirements(scope: Scope, path: str, facts: GatingCallees | None = None) -> CudaRequirements:
    """The analysis of the module `scope` belongs to, built once per file."""
    module = scope.module
    found = module.__dict__.get(_CACHE)
    if found is None:
        found = CudaRequirements(module, path, facts)
        module.__dict__[_CACHE] = found
    return found


class CudaRequirements:
    """Which code of one module runs only where CUDA is."""

    def __init__(
        self, module: Scope, path: str, facts: GatingCallees | None = None, *, walk_module: bool = True
    ) -> None:
        """`walk_module=False`: the caller's own walk of the module calls `index_enter` and
        `index_leave` for every node (one traversal serving two analyses)."""
        assert isinstance(module.node, cst.Module)
        self._scope = module
        self._path = path
        self._facts = facts
        self._parents: dict[int, cst.CSTNode] = {}
        self._functions: dict[str, list[cst.FunctionDef]] = {}
        # The `__init__` of each module-level class, by class name (a call of the class runs it).
        self._constructors: dict[str, list[cst.FunctionDef]] = {}
        # Uses of each name: `helper` for functions, `.helper` for `self.helper` (methods).
        self._references: dict[str, list[cst.Name | cst.Attribute]] = {}
        self._foreign_attributes: set[str] = set()  # `x.name` of objects other than `self`: maybe a method
        self._groups = GroupStarts(self._resolve)
        # Module-level names functions rebind through `global name`: the functions, by name.
        self._global_writers: dict[str, list[cst.FunctionDef]] = {}
        # Functions (ids) that import a CUDA-only library, in their own body or a nested one.
        self._cuda_importing: set[int] = set()
        self._enclosing = EnclosingScopes(module, self._parents)
        self._initialization = Initialization(
            module,
            self._functions,
            self._global_writers,
            self._functions_around,
            self._imported_group_helpers,
        )
        self._module_only = cuda_specific_path(path) or (facts is not None and facts.imports_cuda_only())
        self._gates: dict[int, bool] = {}
        self._required: dict[int, bool] = {}
        # Per statement (each is asked once per later statement and per node below it).
        self._statement_gates: dict[tuple[int, bool], bool] = {}
        self._statement_claims: dict[int, bool] = {}
        self._statement_calls: dict[int, list[cst.Call]] = {}
        self._statement_bindings: dict[int, frozenset[str]] = {}
        self._blocks: dict[int, _Block] = {}
        self._stack: list[cst.CSTNode] = []
        if walk_module:
            walk(module.node, self.index_enter, self.index_leave)

    def index_enter(self, node: cst.CSTNode) -> None:
        stack = self._stack
        parent = stack[-1] if stack else None
        if parent is not None:
            self._parents[id(node)] = parent
        stack.append(node)
        kind = type(node)  # exact types (LibCST's node classes are final): isinstance on ABCs is slow
        if kind is cst.Name:
            if not _is_definition(node, parent):  # type: ignore[arg-type]
                self._references.setdefault(node.value, []).append(node)  # type: ignore[attr-defined, arg-type]
        elif kind is cst.Attribute:
            value = node.value  # type: ignore[attr-defined]
            if type(value) is cst.Name and value.value in ("self", "cls"):
                self._references.setdefault(f".{node.attr.value}", []).append(node)  # type: ignore[attr-defined, arg-type]
            else:
                self._foreign_attributes.add(node.attr.value)  # type: ignore[attr-defined]
        elif kind is cst.Call:
            if imports_cuda_only_dynamically(node):  # type: ignore[arg-type]
                self._module_only = True
            elif (last_name(node.func) or "") in BUILDERS and compiles_cuda(node, self._scope):  # type: ignore[attr-defined, arg-type]
                self._module_only = self._module_only or _at_module_level(node, self._parents)
            elif (last_name(node.func) or "") in group_starter_names():  # type: ignore[attr-defined]
                self._groups.calls.append(node)  # type: ignore[arg-type]
        elif kind is cst.Global:
            function = next((n for n in reversed(stack) if type(n) is cst.FunctionDef), None)
            if function is not None:
                for item in node.names:  # type: ignore[attr-defined]
                    self._global_writers.setdefault(item.name.value, []).append(function)
        elif kind is cst.FunctionDef:
            name = node.name.value  # type: ignore[attr-defined]
            owner = self._parents.get(id(parent))
            if (
                name == "__init__"
                and type(owner) is cst.ClassDef
                and type(self._parents.get(id(owner))) is cst.Module
            ):
                self._constructors.setdefault(owner.name.value, []).append(node)  # type: ignore[arg-type]
            if type(owner) is cst.ClassDef:
                # Methods count by `self.helper(...)` (other files' calls: `called_with_cuda`); not
                # those Python or torch call unseen (`__call__`, `forward`).
                name = "" if name.endswith("__") or name in IMPLICITLY_CALLED_METHODS else f".{name}"
            if name:
                self._functions.setdefault(name, []).append(node)  # type: ignore[arg-type]
        elif kind is cst.Assign:
            value = node.value  # type: ignore[attr-defined]
            if type(value) is cst.SimpleString and not after_exit(stack):
                for target in node.targets:  # type: ignore[attr-defined]
                    self._groups.note_string(dotted_name(target.target), value)
            elif _is_pytestmark(node) and skips_without_cuda(node.value, self._scope):  # type: ignore[arg-type, attr-defined]
                self._module_only = True
        elif kind is cst.Param and type(default := node.default) is cst.SimpleString:  # type: ignore[attr-defined]
            self._groups.note_string(node.name.value, default)  # type: ignore[attr-defined]
        elif kind is cst.Import or kind is cst.ImportFrom:
            functions = [id(n) for n in stack if type(n) is cst.FunctionDef]
            self._enclosing.note_import(node, functions)  # type: ignore[arg-type]
            if imports_cuda_only(node, self._path):  # type: ignore[arg-type]
                self._module_only = self._module_only or _at_module_level(node, self._parents)
                self._cuda_importing.update(functions)

    def index_leave(self, node: cst.CSTNode) -> None:
        self._stack.pop()

    # The queries -----------------------------------------------------------

    @property
    def module_only(self) -> bool:
        """The whole module runs only where CUDA is (a CUDA-only import or folder)."""
        return self._module_only

    def requires_cuda(self, node: cst.CSTNode) -> bool:
        """Does `node` run only where CUDA is? A gate before it (an exit, raise, assert or skip
        when CUDA is missing, an NCCL process group, `torch.cuda.set_device`, a call of a function
        of this file that does one; in a file whose process groups all use NCCL, an exit unless one
        is initialised, a block run only when one is, or a tensor for a collective), a claim of the
        GPU in its own statement (`torch.device("cuda", torch.cuda.current_device())`), a device named
        right before a gate, a CUDA-only decorator, `with torch.cuda.stream(...)`, a function called
        only from such code, or a CUDA-only module."""
        if self._module_only:
            return True
        if self._nccl_file() and feeds_collective(node, self._parents, self._scope_at(node)):
            return True
        child = node
        parent = self._parents.get(id(node))
        # Exact types (LibCST's node classes are final): isinstance on its ABCs is slow, and this
        # climbs every ancestor of every node asked about.
        while parent is not None:
            kind = type(parent)
            if type(child) is cst.SimpleStatementLine and self._claims(child):
                return True
            if (kind is cst.Module or kind is cst.IndentedBlock) and (
                self._gated_before(parent.body, child) or self._named_before_gate(parent.body, child)  # type: ignore[attr-defined]
            ):
                return True
            if child is getattr(parent, "body", None) and self._enters_gated(parent, kind):
                return True
            child, parent = parent, self._parents.get(id(parent))
        return False

    def _enters_gated(self, parent: cst.CSTNode, kind: type) -> bool:
        """Does `parent`'s body (the child just climbed from) run only where CUDA is: under `with
        torch.cuda.stream(...)`, `if dist.is_initialized():` in an NCCL program, an `if` after a
        gated branch, in a function that requires CUDA, or a CUDA-only decorated class?"""
        if kind is cst.With:
            return any(
                type(item.item) is cst.Call and self._resolve(item.item.func) in _CUDA_CONTEXTS
                for item in parent.items  # type: ignore[attr-defined]
            )
        if kind is cst.If:
            if self._initialization.says_initialized(parent.test) and self._nccl_file():  # type: ignore[attr-defined]
                return True  # `if dist.is_initialized():`, `if get_world_size() > 1:` in an NCCL program
            return self._gated_in_earlier_branch(parent)  # type: ignore[arg-type]
        if kind is cst.FunctionDef:
            return self.function_requires_cuda(parent)  # type: ignore[arg-type]
        if kind is cst.ClassDef:
            return cuda_only_decorated(parent, self._scope_at(parent))  # type: ignore[arg-type]
        return False

    def function_requires_cuda(self, function: cst.FunctionDef) -> bool:
        """The function runs only where CUDA is: a CUDA-only decorator (`@unittest.skipIf(not
        torch.cuda.is_available(), ...)`), an import of a CUDA-only library, or every use of its
        name in this file lies in code that requires CUDA."""
        key = id(function)
        if key in self._required:
            return self._required[key]
        self._required[key] = False  # a recursive function: its own calls prove nothing
        found = (
            cuda_only_decorated(function, self._scope_at(function))
            or key in self._cuda_importing
            or self._method_of_gated_instance(function)
        )
        if not found:
            uses = self._uses(function)
            elsewhere = self._called_elsewhere_with_cuda(function)
            if elsewhere is True and not uses and self._owner(function) is not None:
                uses = self._references.get(f".{function.name.value}", [])  # other calls are in `elsewhere`
            found = (
                elsewhere is not False
                and (bool(uses) or elsewhere is True)
                and all(self.requires_cuda(use) for use in uses)
            )
        self._required[key] = found
        return found

    def _called_elsewhere_with_cuda(self, function: cst.FunctionDef) -> bool | None:
        """For a module-level function or a method of a module-level class: do the calls of it in
        other files (for a method, every `x.name(...)` of the project) all run only where CUDA is
        (None when no other file calls it, or the project is not known)?"""
        if self._facts is None:
            return None
        if type(self._parents.get(id(function))) is cst.Module:
            return self._facts.called_with_cuda(function.name.value)
        owner = self._owner(function)
        return (
            None
            if owner is None
            else self._facts.called_with_cuda(f"{owner.name.value}.{function.name.value}")
        )

    def _method_of_gated_instance(self, function: cst.FunctionDef) -> bool:
        """A method of a class whose `__init__` gates (`torch.cuda.set_device(rank)`, an NCCL group,
        `Context()` of a class that does): an instance exists only where CUDA is. Not `__init__`
        itself, nor a static or class method (no instance needed), nor a method `__init__` names
        before its gate."""
        owner = self._owner(function)
        name = function.name.value
        if (
            owner is None
            or name == "__init__"
            or any(
                dotted_name(decorator.decorator) in ("staticmethod", "classmethod")
                for decorator in function.decorators
            )
        ):
            return False
        constructors = self._constructors.get(owner.name.value, [])
        if (
            len(constructors) != 1
            or self._parents.get(id(self._parents.get(id(constructors[0])))) is not owner
        ):
            return False
        init = constructors[0]
        if not self.gates(init):
            return False
        early = set()  # the statements of `__init__` up to its first gate
        for statement in block_statements(init.body):
            if self.stops_caller(statement):
                break
            early.add(id(statement))
        return not any(self._within(use, early) for use in self._references.get(f".{name}", []))

    def _within(self, node: cst.CSTNode, statements: set[int]) -> bool:
        current: cst.CSTNode | None = node
        while current is not None and id(current) not in statements:
            current = self._parents.get(id(current))
        return current is not None

    def _owner(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        """The module-level class `function` is a method of."""
        owner = self._parents.get(id(self._parents.get(id(function))))
        if type(owner) is cst.ClassDef and type(self._parents.get(id(owner))) is cst.Module:
            return owner
        return None

    def gates(self, function: cst.FunctionDef) -> bool:
        """Calling `function` stops the program where CUDA is missing: its body reaches a gate
        before it can return (`if not cuda: return` lets the caller go on; a generator or a
        coroutine runs nothing when called)."""
        key = id(function)
        if key not in self._gates:
            self._gates[key] = False  # a recursive function: its own calls prove nothing
            found = False
            if not runs_later(function):
                for statement in block_statements(function.body):
                    if self.stops_caller(statement):
                        found = True
                        break
                    if may_return(statement):
                        break
            self._gates[key] = found
        return self._gates[key]

    def stops_caller(self, statement: cst.BaseStatement) -> bool:
        """A statement of a function body after which the function's caller goes on only where
        CUDA is: a gate whose exit is not a `return`."""
        return self._is_gate(statement, for_caller=True)

    # Helpers ---------------------------------------------------------------

    def _resolve(self, node: cst.BaseExpression) -> str | None:
        head = node
        while type(head) is cst.Attribute:
            head = head.value
        return resolve(node, self._enclosing.at(node, head.value if type(head) is cst.Name else None))

    def _scope_at(self, node: cst.CSTNode) -> Scope:
        return self._enclosing.at(node)

    def _uses(self, function: cst.FunctionDef) -> list[cst.Name | cst.Attribute]:
        """Where this file names a function it defines once (calls, callbacks), a method by
        `self.name`; empty when unknown (a method also named on another object: `trainer.name`)."""
        name = function.name.value
        if self._functions.get(name) == [function]:
            return self._references.get(name, [])
        if self._functions.get(f".{name}") == [function] and name not in self._foreign_attributes:
            return self._references.get(f".{name}", [])
        return []

    def _gated_before(self, body: Sequence[cst.CSTNode], child: cst.CSTNode | None) -> bool:
        """A gate among the statements of `body` before `child` (None: anywhere in it). The statements are judged in order,
        each once: where each block's first gate lies is kept as far as it has been looked for."""
        state = self._block(body)
        index = state.positions.get(id(child), len(body))
        while state.gate is None and state.judged < index:
            if self._is_gate(body[state.judged]):
                state.gate = state.judged
            state.judged += 1
        return state.gate is not None and state.gate < index

    def _named_before_gate(self, body: Sequence[cst.CSTNode], child: cst.CSTNode) -> bool:
        """`device = torch.device("cuda:0")` before a gate of its block (`torch.cuda.set_device(device)`),
        no statement in between reading the name or leaving the block: naming a device allocates
        nothing, and the program passes the gate before any use."""
        names = device_names(child, self._resolve)
        if not names:
            return False
        for statement in body[self._block(body).positions[id(child)] + 1 :]:
            if self._is_gate(statement):
                return True
            if may_leave(statement) or first(statement, lambda n: type(n) is cst.Name and n.value in names):
                return False
        return False

    def _block(self, body: Sequence[cst.CSTNode]) -> _Block:
        """What is known of a block's statements, made on first asking."""
        state = self._blocks.get(id(body))
        if state is None:
            state = self._blocks[id(body)] = _Block({id(statement): i for i, statement in enumerate(body)})
        return state

    def _gated_in_earlier_branch(self, branch: cst.If) -> bool:
        """`if use_ddp:` after `if use_ddp or use_fsdp:` whose block passes a gate
        (`torch.cuda.set_device(rank)`), in the same block, the test's names not rebound in between:
        the earlier block ran whenever this one runs, and so did its gate."""
        block = self._parents.get(id(branch))
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            return False  # an `elif`: its own earlier tests were false
        leaves = flag_leaves(branch.test)
        if not leaves:
            return False
        body = list(block.body)
        for earlier in reversed(body[: next(i for i, s in enumerate(body) if s is branch)]):
            if leaves & self._bound_by(earlier):
                return False
            if (
                isinstance(earlier, cst.If)
                and implies(branch.test, earlier.test)
                and isinstance(earlier.body, cst.IndentedBlock)
                and self._gated_before(earlier.body.body, None)
            ):
                return True
        return False

    def _bound_by(self, statement: cst.CSTNode) -> frozenset[str]:
        """`bound_in([statement])`, once per statement (each `if` of a block asks of every earlier one)."""
        key = id(statement)
        found = self._statement_bindings.get(key)
        if found is None:
            found = self._statement_bindings[key] = bound_in([statement])
        return found

    def _claims(self, statement: cst.SimpleStatementLine) -> bool:
        """The statement always claims the GPU (`torch.cuda.set_device(rank)`)."""
        key = id(statement)
        if key not in self._statement_claims:
            calls = self._unconditional_calls(statement)
            self._statement_claims[key] = any(
                self._resolve(call.func) in apis(Fact.NEEDS_CUDA) for call in calls
            )
        return self._statement_claims[key]

    def _is_gate(self, statement: cst.CSTNode, *, for_caller: bool = False) -> bool:
        """A statement after which CUDA is there, or the program (with `for_caller`, the caller
        too: no `return` exit) has stopped."""
        key = (id(statement), for_caller)
        if key not in self._statement_gates:
            self._statement_gates[key] = self._gate(statement, for_caller)
        return self._statement_gates[key]

    def _gate(self, statement: cst.CSTNode, for_caller: bool) -> bool:
        returns = not for_caller
        if isinstance(statement, cst.If):
            scope = self._scope_at(statement)
            orelse = statement.orelse
            test = statement.test
            if exits(statement.body, returns=returns) and (
                self._true_without_cuda(test, scope)
                or (self._initialization.true_uninitialized(test) and self._nccl_file())
            ):
                return True
            return (
                isinstance(orelse, cst.Else)
                and says_present(statement.test, scope)
                and exits(orelse.body, returns=returns)
            )
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for small in statement.body:
            if isinstance(small, cst.Assert) and says_present(small.test, self._scope_at(statement)):
                return True
        return any(self._gating_call(call) for call in self._unconditional_calls(statement))

    def _unconditional_calls(self, statement: cst.SimpleStatementLine) -> list[cst.Call]:
        """`unconditional_calls`, once per statement (asked for claims and for gates)."""
        key = id(statement)
        found = self._statement_calls.get(key)
        if found is None:
            found = self._statement_calls[key] = unconditional_calls(statement)
        return found

    def _functions_around(self, node: cst.CSTNode) -> list[cst.FunctionDef]:
        """The functions `node` lies in, innermost first."""
        found = []
        parent = self._parents.get(id(node))
        while parent is not None:
            if isinstance(parent, cst.FunctionDef):
                found.append(parent)
            parent = self._parents.get(id(parent))
        return found

    def group_helpers(self) -> list[tuple[str, bool]]:
        """The file's functions that say a process group is initialised (pass 1's summary)."""
        return self._initialization.group_helpers()

    def _imported_group_helpers(self) -> Collection[tuple[str, bool]]:
        return self._facts.imported_group_helpers() if self._facts is not None else ()

    def group_starts(self) -> list[bool]:
        """For each process group the file starts: does it use NCCL?"""
        return self._groups.starts()

    def _nccl_file(self) -> bool:
        """The program's process groups use NCCL: the file starts some, all with NCCL; or it starts
        none, and every one the project starts uses NCCL (`nccl_program`: a model's collective
        helper in a project whose training scripts start NCCL groups)."""
        starts = self.group_starts()
        if starts:
            return all(starts)
        return self._facts is not None and self._facts.nccl_program()

    def _true_without_cuda(self, test: cst.BaseExpression, scope: Scope) -> bool:
        """`test` holds on every machine without CUDA, so `if test: exit` lets only CUDA runs
        past: `not torch.cuda.is_available()`, `args.cpu or not cuda`; not `distributed and not
        cuda` (a CPU run that is not distributed goes on)."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return says_present(test.expression, scope)
        if isinstance(test, cst.BooleanOperation):
            left, right = (
                self._true_without_cuda(test.left, scope),
                self._true_without_cuda(test.right, scope),
            )
            return left or right if isinstance(test.operator, cst.Or) else left and right
        return says_missing(test, scope)

    def _gating_call(self, call: cst.Call) -> bool:
        name = self._resolve(call.func)
        if name in apis(Fact.NEEDS_CUDA):
            return True
        if name == PROCESS_GROUP:
            return self._groups.nccl_group(call)
        callee = call.func
        if (
            isinstance(callee, cst.Attribute)
            and isinstance(callee.value, cst.Name)
            and callee.value.value == "self"
        ):
            callees = self._functions.get(f".{callee.attr.value}", [])
        elif isinstance(callee, cst.Name):  # a function, or a class whose `__init__` runs
            callees = self._functions.get(callee.value) or self._constructors.get(callee.value, [])
        else:
            callees = []
        if callees:
            return len(callees) == 1 and self.gates(callees[0])
        written = dotted_name(callee)
        return self._facts is not None and written is not None and self._facts.gates(written)


class _Block:
    """How far a block's statements have been judged for a gate, and the first gate found."""

    def __init__(self, positions: dict[int, int]) -> None:
        self.positions = positions  # id(statement) -> index
        self.judged = 0
        self.gate: int | None = None


def _is_definition(node: cst.Name, parent: cst.CSTNode | None) -> bool:
    """A name that is not a use: `def f`, `x.f`, `f=...` keywords, parameters, import aliases."""
    kind = type(parent)
    if kind in _DEFINING:
        return True
    if kind is cst.Attribute:
        return parent.attr is node  # type: ignore[union-attr]
    return kind is cst.Arg and parent.keyword is node  # type: ignore[union-attr]


_DEFINING = frozenset({cst.FunctionDef, cst.ClassDef, cst.Param, cst.ImportAlias, cst.AsName})


def _is_pytestmark(node: cst.Assign) -> bool:
    return any(isinstance(t.target, cst.Name) and t.target.value == "pytestmark" for t in node.targets)


def _at_module_level(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> bool:
    """Not inside a function or class (an import under `try:` at the top still counts)."""
    parent = parents.get(id(node))
    while parent is not None:
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.If)):
            return False
        parent = parents.get(id(parent))
    return True
