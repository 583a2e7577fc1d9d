"""Loop-invariant moves: a transfer every iteration repeats unchanged, and what may change a tensor.

`invariant_move` decides whether `x.to(d)` in a loop moves the same data to
the same device each time (TDL202 for modules, TDL207 for tensors): nothing
the loop (re)binds reaches the move, and nothing in the loop changes the
receiver in place, also through a view of it (`aliases`) or a call it is
handed to (`may_change`, `reads_only`), nor is it shared with other processes
(`shared_across_processes`); a module is changed by a method call
other than running or reading it, on it or on a submodule got from it
(`module_changed`). It also says whether the move can be
hoisted before the loop and whether that runs it exactly as often as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import Move, as_move
from torchdev_lint.analysis.knowledge.torch_api import (
    ALIASING_METHODS,
    MEMORY_SHARING_METHODS,
    MODULE_KEEPING_METHODS,
    PARAMETER_CLASSES,
    RELOCATING_METHODS,
    SUBMODULE_METHODS,
)
from torchdev_lint.analysis.syntax.bindings import walk_bindings
from torchdev_lint.analysis.syntax.loops import (
    Loop,
    body_statement,
    bound_in,
    bound_in_body,
    calls_in,
    comprehension_targets,
    depends_on,
    hoist,
    innermost_loop,
    insert_before,
    is_conditional_in,
    loop_target_names,
    names_in,
    path_inside,
    statements_before,
    target_names,
)
from torchdev_lint.analysis.syntax.python_numbers import integer_literal
from torchdev_lint.analysis.syntax.reachability import ENDING_CALLS
from torchdev_lint.analysis.syntax.reaching_bindings import (
    assigned_between,
    parents_along,
    reaching_assignment,
)
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, resolve
from torchdev_lint.analysis.syntax.walk import first, walk
from torchdev_lint.syntax import keyword

# Builtins whose result yields the items of their arguments (`enumerate(model.modules())`).
_PASSING_BUILTINS = frozenset({"enumerate", "list", "tuple", "reversed", "iter", "zip"})
# Builtins that only read their arguments.
_READING_BUILTINS = frozenset(
    """len print isinstance float int bool str repr round abs min max sum range enumerate zip
    tuple id type format hasattr getattr""".split()
)

# Module methods that yield the tensors it holds (assigning `p.data` relocates the module's part).
_STATE_METHODS = frozenset({"parameters", "buffers", "named_parameters", "named_buffers"})


def method_calls_in(loop: Loop, key: str) -> list[tuple[str, cst.Call]]:
    """`key.method(...)` calls anywhere in the loop body (nested scopes excluded)."""
    return [
        (call.func.attr.value, call)
        for call in calls_in(loop)
        if isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) == key
    ]


def changed_in_place(loop: Loop, key: str, besides: cst.Call | None = None) -> bool:
    """Is `key` relocated or mutated in place in the loop (`.to()`, `.cpu()`, `.add_()`, or
    `key += 1`, which adds into a tensor's own memory)?"""
    return any(
        call is not besides and (method in RELOCATING_METHODS or method.endswith("_"))
        for method, call in method_calls_in(loop, key)
    ) or any(isinstance(node, cst.AugAssign) and dotted_name(node.target) == key for node in _walk(loop.body))


def _rooted_at(node: cst.BaseExpression, names: frozenset[str]) -> bool:
    """Is `node` one of `names`, or an attribute or item of one (`buf`, `buf.data`, `buf[0]`)?"""
    while True:
        if dotted_name(node) in names:
            return True
        if isinstance(node, (cst.Subscript, cst.Attribute)):
            node = node.value
        else:
            return False


def _holders(scope: Scope, names: frozenset[str]) -> frozenset[str]:
    """Names the function binds to objects built with any of `names` among their arguments
    (`opt = torch.optim.SGD([p], lr=0.1)`): the object may change them whenever it acts."""
    found: set[str] = set()
    for node in _owner_nodes(scope):
        if not (isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)):
            continue
        if any(depends_on(arg.value, names) for arg in node.value.args):
            found |= {name for t in node.targets if (name := dotted_name(t.target)) is not None}
    return frozenset(found - names)


def _closures_reading(scope: Scope, names: frozenset[str]) -> set[str]:
    """The functions defined inside the function of `scope` whose bodies read any of `names`: a
    call of one may change them without being handed them (`def update(): scale.mul_(0.5)`)."""
    function = scope.owner.node
    return {
        node.name.value
        for node in _owner_nodes(scope)
        if isinstance(node, cst.FunctionDef) and node is not function and depends_on(node.body, names)
    }


def reads_only(call: cst.Call, scope: Scope) -> bool:
    """Does the call only read its arguments? Torch functions (not in-place, no `out=`) and
    a few builtins; any other call may change a tensor handed to it."""
    if keyword(call, "out") is not None:
        return False
    name = resolve(call.func, scope) or ""
    if name.startswith("builtins."):
        return name[9:] in _READING_BUILTINS
    return name.startswith("torch.") and not name.endswith("_")


def aliases(function: cst.CSTNode, key: str, scope: Scope) -> frozenset[str]:
    """`key` and the names the function binds to what may share its memory (`view = buf[:1]`,
    `w = buf.to(d)`: `.to()` returns the tensor itself when it is already there; `arr =
    buf.numpy()`, `a, b = buf.unbind(0)`, `p = nn.Parameter(buf)`)."""
    assignments: list[tuple[str, cst.BaseExpression]] = []
    for node in _walk(function):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            parts = (
                [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
            )
            for part in parts:
                dotted = dotted_name(part)
                if dotted is not None:
                    assignments.append((dotted, node.value))
    names = {key}
    grown = True
    while grown:
        grown = False
        for alias, value in assignments:
            if alias not in names and _may_alias(value, frozenset(names), scope):
                names.add(alias)
                grown = True
    return frozenset(names)


def shared_across_processes(root: cst.CSTNode, key: str) -> bool:
    """`key.share_memory_()` somewhere in `root` (also `buf = torch.zeros(n).share_memory_()`, or
    `for t in (obs, buf): t.share_memory_()`): other processes write the tensor whenever they run,
    so a loop that moves it copies fresh data each time, however still the loop leaves it."""
    nodes = _walk(root)
    for node in nodes:
        if isinstance(node, cst.Assign) and _shares(node.value):
            if any(dotted_name(target.target) == key for target in node.targets):
                return True
        if isinstance(node, cst.Call) and _shares(node) and isinstance(node.func, cst.Attribute):
            if dotted_name(node.func.value) == key:
                return True
        if isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            members = node.iter.elements if isinstance(node.iter, (cst.List, cst.Tuple)) else ()
            if any(dotted_name(member.value) == key for member in members) and any(
                _shares(call)
                and isinstance(call.func, cst.Attribute)
                and dotted_name(call.func.value) == node.target.value
                for call in _walk(node.body)
                if isinstance(call, cst.Call)
            ):
                return True
    return False


def _shares(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "share_memory_"
    )


def _may_alias(value: cst.BaseExpression, names: frozenset[str], scope: Scope) -> bool:
    while isinstance(value, cst.Call):
        if (
            isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ALIASING_METHODS | MEMORY_SHARING_METHODS
        ):
            value = value.func.value
        elif resolve(value.func, scope) in PARAMETER_CLASSES and value.args:
            value = value.args[0].value  # `nn.Parameter(buf)` shares `buf`'s storage
        else:
            return False
    return _rooted_at(value, names)


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []
    walk(node, found.append, _nothing)
    return found


def _owner_nodes(scope: Scope) -> list[cst.CSTNode]:
    """Every node of the function (or module) of `scope`, walked once per function: `may_change`
    asks for its holders and closures for every name of every move it judges."""
    owner = scope.owner
    nodes: list[cst.CSTNode] | None = getattr(owner, "_walked_nodes", None)
    if nodes is None:
        nodes = owner._walked_nodes = _walk(owner.node)  # type: ignore[attr-defined]
    return nodes


def _nothing(node: cst.CSTNode) -> None:
    pass


def may_change(loop: Loop, names: frozenset[str], scope: Scope, besides: cst.Call | None = None) -> bool:
    """May the loop change any of `names` in place: an in-place or relocating method
    (`add_`, `copy_`, `.cuda()`...), item or attribute assignment (`buf[i] = v`, `buf.data = v`),
    `out=buf`, or a call that may change its argument (anything but `reads_only` calls)?"""
    if any(changed_in_place(loop, name, besides) for name in names):
        return True
    if any(name == bound or bound.startswith(f"{name}.") for bound in bound_in_body(loop) for name in names):
        return True
    closures = _closures_reading(scope, names)
    holders = _holders(scope, names)
    for call in calls_in(loop):
        if call is besides:
            continue
        if isinstance(call.func, cst.Name) and call.func.value in closures:
            return True  # `update(y)`, a function of the function that reaches `names` itself
        if isinstance(call.func, cst.Attribute) and _rooted_at(call.func.value, holders):
            return True  # `opt.step()` with `opt = SGD([p])`: an object holding `names` acts on them
        out = keyword(call, "out")
        if out is not None and depends_on(out.value, names):
            return True
        if isinstance(call.func, cst.Attribute) and _rooted_at(call.func.value, names):
            if call.func.attr.value.endswith("_"):
                return True
        if not reads_only(call, scope) and any(
            arg.keyword is None or arg.keyword.value != "out"
            for arg in call.args
            if _rooted_at(arg.value, names)
        ):
            return True
    return False


def module_changed(loop: Loop, key: str, besides: cst.Call, function: cst.CSTNode | None = None) -> bool:
    """Does the loop call a method on the module `key`, or on a submodule got from it
    (`key.encoder`, `for m in key.modules()`, `head = key.get_submodule("head")`, also bound
    before the loop in `function`: `encoder = model.encoder if ... else model`), other than
    running, reading or setting its mode (`adaptation(...)` may add parameters), or assign an
    attribute of one (`p.data = p.data.cpu()` for `p` in `key.parameters()`)?"""
    body = function.body if isinstance(function, cst.FunctionDef) else function
    bindings = _bindings_in(loop) + (_bindings_in(body) if body is not None else [])
    derived = {key}
    grown = True
    while grown:
        grown = False
        for name, value in bindings:
            if name not in derived and (
                _submodule_of(value, frozenset(derived)) or _state_of(value, derived)
            ):
                derived.add(name)
                grown = True
    names = frozenset(derived)
    if any(bound.split(".", 1)[0] in names and "." in bound for bound in bound_in_body(loop)):
        return True
    return any(
        call is not besides
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value not in MODULE_KEEPING_METHODS
        and _submodule_of(call.func.value, names)
        for call in calls_in(loop)
    )


def _state_of(node: cst.BaseExpression, modules: set[str]) -> bool:
    """`m.parameters()`, `m.buffers()`, `m.named_parameters()`: the tensors a module holds."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in _STATE_METHODS
        and dotted_name(node.func.value) in modules
    )


def _submodule_of(node: cst.BaseExpression, names: frozenset[str]) -> bool:
    """Is `node` one of `names`, an attribute or item of one, or what a submodule method gives
    (`m.blocks[0]`, `m.modules()`, `enumerate(m.named_children())`), or either branch of a choice
    of such (`m.encoder if hasattr(m, "encoder") else m`)?"""
    while True:
        if dotted_name(node) in names:
            return True
        if isinstance(node, cst.IfExp):
            return _submodule_of(node.body, names) or _submodule_of(node.orelse, names)
        if isinstance(node, (cst.Subscript, cst.Attribute)):
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value not in SUBMODULE_METHODS:
                return False
            node = node.func.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            return node.func.value in _PASSING_BUILTINS and any(
                _submodule_of(arg.value, names) for arg in node.args
            )
        else:
            return False


def _bindings_in(code: cst.CSTNode) -> list[tuple[str, cst.BaseExpression]]:
    """(name, value) for the targets of loops in `code` (a loop: its own target too; each bound
    to the iterable, items unknown) and plain assignments in it; nested scopes excluded."""
    found: list[tuple[str, cst.BaseExpression]] = []
    for bound in walk_bindings([code]):
        if bound.kind == "for" and isinstance(bound.node, cst.For):
            value: cst.BaseExpression = bound.node.iter
        elif bound.kind == "assign" and bound.value is not None:
            value = bound.value
        else:
            continue
        found.extend((name, value) for name in target_names(bound.target))
    return found


def _prefixes(key: str) -> set[str]:
    parts = key.split(".")
    return {".".join(parts[: i + 1]) for i in range(len(parts))}


def _assigns_only(statement: cst.CSTNode | None, value: cst.BaseExpression) -> str | None | bool:
    """For a one-statement line `target = value` → target's dotted name; `value` alone → None;
    anything else → False."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if isinstance(small, cst.Expr) and small.value is value:
        return None
    if isinstance(small, cst.Assign) and small.value is value and len(small.targets) == 1:
        return dotted_name(small.targets[0].target) or False
    return False


def runs_at_least_once(loop: Loop) -> bool:
    """Provably one iteration or more: `while True`, `range(<literals>)` that is not empty,
    a non-empty list or tuple display."""
    if isinstance(loop, cst.While):
        return isinstance(loop.test, cst.Name) and loop.test.value == "True"
    iterable = loop.iter
    if isinstance(iterable, (cst.List, cst.Tuple)):
        return any(not isinstance(e, cst.StarredElement) for e in iterable.elements)
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name)):
        return False
    if iterable.func.value != "range" or not 1 <= len(iterable.args) <= 3:
        return False
    bounds = []
    for arg in iterable.args:
        bound = integer_literal(arg.value)
        if arg.keyword is not None or arg.star or bound is None:
            return False
        bounds.append(bound)
    if len(bounds) == 3 and bounds[2] == 0:
        return False
    return len(range(*bounds)) > 0


# Statements that leave an iteration early (a failing `assert` raises); calls that end the program
# leave it too (`reachability.ENDING_CALLS`).
_EXITS = (cst.Break, cst.Continue, cst.Return, cst.Raise, cst.Yield, cst.Assert)
# Calls that change the current GPU.
_GPU_SWITCHES = frozenset({"torch.cuda.set_device", "torch.cuda.device"})


def _may_leave(statements: Sequence[cst.CSTNode]) -> bool:
    """Can one of the statements leave the iteration early (nested scopes excluded)?"""
    return any(
        first(statement, _leaves, prune=(cst.FunctionDef, cst.Lambda)) is not None for statement in statements
    )


def _leaves(node: cst.CSTNode) -> bool:
    return isinstance(node, _EXITS) or (isinstance(node, cst.Call) and dotted_name(node.func) in ENDING_CALLS)


@dataclass(frozen=True)
class InvariantMove:
    """A move that repeats the same transfer on every iteration of `loop`.

    `statement` is set when the move can be hoisted: it is the whole statement
    (`m.to(d)` or `y = x.to(d)`) directly in the loop body, and nothing earlier in
    the iteration reads what it moves or assigns. `reassigns_receiver`: the
    statement is `x = x.to(d)` (a no-op from the second iteration on). `always_runs`:
    the loop provably runs once or more and nothing earlier in the iteration may
    leave it, so moving the work before the loop runs it exactly when it ran
    before. `handed_on`: the receiver is passed to a call in the loop that may
    relocate or change it.
    """

    loop: Loop
    move: Move
    statement: cst.BaseStatement | None
    reassigns_receiver: bool
    always_runs: bool
    handed_on: bool

    def hoisted(self) -> dict[cst.CSTNode, cst.FlattenSentinel[cst.BaseStatement]] | None:
        """The replacement that moves the statement before the loop, when it can be hoisted."""
        if self.statement is None:
            return None
        return {self.loop: hoist(self.loop, self.statement)}

    def bound_before(self, name: str) -> dict[cst.CSTNode, cst.FlattenSentinel[cst.BaseStatement]] | None:
        """The replacement that binds `name = <move>` before the loop and reads `name` in it."""
        body = self.loop.body
        if not isinstance(body, cst.IndentedBlock):
            return None
        loop = self.loop.deep_replace(self.move.call, cst.Name(name))
        assignment = cst.SimpleStatementLine(
            body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=self.move.call)]
        )
        return {self.loop: insert_before(loop, assignment)}  # type: ignore[arg-type]


def invariant_move(
    move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope, *, tensor: bool
) -> InvariantMove | None:
    """Is `move` (the last ancestor) a host-to-device move the innermost loop repeats unchanged?

    Neither the receiver nor the move's arguments (device, dtype) may depend on
    anything the loop (re)binds, the receiver must not be relocated or mutated in
    place elsewhere in the loop, and the move must run on every iteration (not
    under an `if`). A tensor (`tensor=True`) that the loop may change in any way,
    also through a view of it or a call it is handed to, is not invariant.
    """
    loop = innermost_loop(ancestors)
    key = dotted_name(move.receiver)
    if loop is None or key is None or not move.to_accelerator or is_conditional_in(ancestors, loop):
        return None
    if move.device_node is not None and _rooted_at(move.device_node, frozenset({key})):
        return None  # `x.to(x.device)`: stays where it is (a cast at most)
    statement = body_statement(ancestors, loop)
    assigned = _assigns_only(statement, move.call)
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else []
    varying = set(loop_target_names(loop) | bound_in([s for s in body if s is not statement]))
    varying |= comprehension_targets(path_inside(ancestors, loop))
    if statement is None:
        varying |= bound_in_body(loop)
    elif assigned is False:
        varying |= bound_in([statement])
    if _prefixes(key) & varying or changed_in_place(loop, key, besides=move.call):
        return None
    if any(name.startswith(f"{key}.") for name in varying):
        return None  # `model.head = nn.Linear(...)`, `x.data = ...`: what is moved changes
    if any(depends_on(arg.value, varying) for arg in move.call.args):
        return None
    reassigns = assigned == key
    function = next(
        (a for a in reversed(ancestors) if isinstance(a, (cst.FunctionDef, cst.Module))), ancestors[0]
    )
    handed_on = False
    if tensor:
        others = aliases(function, key, scope) - {key, assigned}
        if may_change(loop, frozenset({key}), scope, besides=move.call) or (
            others and may_change(loop, frozenset(others), scope)
        ):
            return None
    elif module_changed(loop, key, move.call, function):
        return None
    else:
        # `export = nn.Sequential(model)`: `export.cpu()` moves `model` too.
        holders = _holders(scope, frozenset({key}))
        handed_on = any(_hands_on(call, key, holders) for call in calls_in(loop))
    if isinstance(assigned, str) and assigned != key and changed_in_place(loop, assigned):
        return None  # `c = buf.to(d); c.mul_(2)`: each iteration needs its fresh copy
    if tensor and shared_across_processes(ancestors[0], key):
        return None
    hoistable = statement is not None and assigned is not False and isinstance(loop.body, cst.IndentedBlock)
    if hoistable and isinstance(assigned, str) and assigned != key:
        hoistable = assigned not in varying
    earlier = statements_before(loop, statement) if statement is not None else []
    if hoistable and statement is not None:
        watched = {key} | ({assigned} if isinstance(assigned, str) else set())
        hoistable = not any(depends_on(s, watched) for s in earlier)
    nested = any(isinstance(n, (cst.BaseComp, cst.Lambda)) for n in path_inside(ancestors, loop))
    always = runs_at_least_once(loop) and statement is not None and not nested and not _may_leave(earlier)
    # `.cuda()` is the current GPU, which the loop may switch (`torch.cuda.set_device(rank)`): hoisted,
    # the move would target the first one only. Treated as a call the receiver is handed to.
    handed_on = handed_on or (_current_gpu(move) and _switches_gpu(loop, scope))
    return InvariantMove(loop, move, statement if hoistable else None, reassigns, always, handed_on)


def _hands_on(call: cst.Call, key: str, holders: frozenset[str]) -> bool:
    """Is the module `key` handed to the call (`offload(model)`), or a holder of it moved by it?"""
    if any(_rooted_at(arg.value, frozenset({key})) for arg in call.args):
        return True
    return (
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value in RELOCATING_METHODS
        and _rooted_at(call.func.value, holders)
    )


def _current_gpu(move: Move) -> bool:
    """`.cuda()`, `.to("cuda")`: the current GPU, whichever it is when the move runs."""
    node = move.device_node
    return (
        move.device.type == "cuda"
        and move.device.index is None
        and (node is None or isinstance(node, cst.SimpleString))
    )


def _switches_gpu(loop: Loop, scope: Scope) -> bool:
    """Does the loop change the current GPU (`torch.cuda.set_device(i)`, `with torch.cuda.device(i):`)?"""
    return any(resolve(call.func, scope) in _GPU_SWITCHES for call in calls_in(loop))


def already_there(move: Move, ancestors: Sequence[cst.CSTNode], scope: Scope) -> bool:
    """`x.to(d)` in a loop where what `x` holds was assigned `x = x.to(d)` (the same device
    expression, unchanged since) before it in straight-line code: each move finds the tensor on
    `d` already and returns it as it is, nothing is copied."""
    receiver, device = move.receiver, move.device_node
    if not isinstance(receiver, cst.Name) or device is None:
        return False
    parent = parents_along([*ancestors, move.call.func, receiver])
    assignment = reaching_assignment(receiver, parent)
    if assignment is None or not isinstance(assignment.value, cst.Call):
        return False
    earlier = as_move(assignment.value, scope)
    if earlier is None or earlier.device_node is None or not earlier.device_node.deep_equals(device):
        return False
    return not assigned_between(assignment, move.call, names_in(device), parents_along(ancestors))
