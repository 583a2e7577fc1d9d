"""The statement walk of the device flow: assignments, branches, loops, `with`, `try`, exits.

`Statements.run` interprets one unit (a function body, or a module's
top-level code) statement by statement, carrying a `State` from one program
point to the next: branches are joined (facts that disagree become unknown),
loops iterated to a fixed point, and code after `return`/`raise` is
unreachable. Expressions are handed to `flow_expressions.Expressions`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data import loaders
from torchdev_lint.analysis.knowledge.devices import own_device
from torchdev_lint.analysis.knowledge.torch_api import DEFAULT_DEVICE_SETTERS
from torchdev_lint.analysis.syntax.bindings import own_bindings, paired_elements, unpacked
from torchdev_lint.analysis.syntax.scopes import (
    Scope,
    block_statements,
    dotted_name,
    resolve,
    small_statements,
)
from torchdev_lint.analysis.syntax.units import Unit, memo, method_class, scope_of
from torchdev_lint.analysis.values import kinds
from torchdev_lint.analysis.values.flow_classes import class_facts, initialiser, runs_placed
from torchdev_lint.analysis.values.flow_expressions import Expressions
from torchdev_lint.analysis.values.flow_record import Record
from torchdev_lint.analysis.values.flow_values import (
    MODULE,
    OTHER,
    TENSOR,
    Kind,
    State,
    Value,
    dead_state,
    join_states,
)

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# Statements after which a name's value is gone or unknown.
_FORGETTING = frozenset({cst.Del, cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal})
_OPTIONALS = frozenset({"typing.Optional", "typing.Union"})
# Tensor methods that return a tuple of pieces of the receiver, each on its device.
_SPLITTING_METHODS = frozenset({"chunk", "split", "unbind", "tensor_split", "hsplit", "vsplit"})

# `with self.assertRaises(...)` and kin: the block is expected to fail.
EXPECTS_ERROR = re.compile(r"^assertRaises|^assertRaisesRegex|^expectedFailure")
MAX_ROUNDS = 8


def _optional_part(annotation: cst.BaseExpression, scope: Scope) -> cst.BaseExpression:
    """`Tensor` for `Optional[Tensor]`, `Union[Tensor, None]`, `Tensor | None` and `"Tensor"`: the
    value is that type wherever it is used as one (a `None` raises at its first use)."""
    if isinstance(annotation, cst.SimpleString):
        text = annotation.evaluated_value
        try:
            annotation = cst.parse_expression(text) if isinstance(text, str) else annotation
        except cst.ParserSyntaxError:
            return annotation
    if isinstance(annotation, cst.BinaryOperation) and isinstance(annotation.operator, cst.BitOr):
        parts = [annotation.left, annotation.right]
    elif isinstance(annotation, cst.Subscript) and resolve(annotation.value, scope) in _OPTIONALS:
        parts = [e.slice.value for e in annotation.slice if isinstance(e.slice, cst.Index)]
    else:
        return annotation
    kept = [p for p in parts if not (isinstance(p, cst.Name) and p.value == "None")]
    return _optional_part(kept[0], scope) if len(kept) == 1 else annotation


class Statements:
    """Walks the statements of one unit for one run; records into the run's `Record`."""

    def __init__(self, unit: Unit, record: Record) -> None:
        self.unit = unit
        self.record = record
        self.scope = record.scope
        self.expressions = Expressions(record)
        self.loops: list[tuple[list[State], list[State]]] = []

    def run(self) -> State:
        """Interpret the unit; the state at its end (when it falls off it)."""
        state = State(default_cpu=not sets_default_device(self.record.ctx))
        unit = self.unit
        if isinstance(unit, cst.FunctionDef):
            self._parameters(unit, state)
            return self._statements(block_statements(unit.body), state)
        return self._statements(unit.body, state)

    def _parameters(self, function: cst.FunctionDef, state: State) -> None:
        params = function.params
        class_node = method_class(function, self.scope)
        facts = class_facts(class_node, self.record.ctx) if class_node is not None else None
        for index, param in enumerate((*params.posonly_params, *params.params)):
            if index == 0 and facts is not None:
                placed = class_node is not None and runs_placed(function, facts, self.record.ctx)
                device = own_device(class_node) if placed else None  # type: ignore[arg-type]
                state.set(param.name.value, Value(Kind.MODULE, device, cls=facts, stateful=facts.stateful))
                continue
            if index == 0 and class_node is not None:
                for attr, value in initialised(function, self.record.ctx).items():
                    state.set(f"{param.name.value}.{attr}", value)
                continue
            annotated = self._annotated(param.annotation)
            if annotated is not None:
                state.set(param.name.value, annotated)
        for param in params.kwonly_params:
            annotated = self._annotated(param.annotation)
            if annotated is not None:
                state.set(param.name.value, annotated)

    def _annotated(self, annotation: cst.Annotation | None) -> Value | None:
        if annotation is None:
            return None
        name = resolve(_optional_part(annotation.annotation, self.scope), self.scope)
        if name in ("torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            return TENSOR
        if name is not None and (name == "torch.nn.Module" or kinds.is_module_class(name, self.scope)):
            return MODULE
        return None

    def _statements(self, statements: Sequence[cst.CSTNode], state: State) -> State:
        for statement in statements:
            if state.dead:
                break
            state = self._statement(statement, state)
        return state

    def _statement(self, node: cst.CSTNode, state: State) -> State:
        kind = type(node)
        if kind is cst.SimpleStatementLine:
            for small in node.body:  # type: ignore[attr-defined]
                if state.dead:
                    break
                self._small(small, state)
            return state
        if kind is cst.If:
            return self._if(node, state)  # type: ignore[arg-type]
        if kind is cst.For:
            return self._for(node, state)  # type: ignore[arg-type]
        if kind is cst.While:
            return self._while(node, state)  # type: ignore[arg-type]
        if kind is cst.With:
            return self._with(node, state)  # type: ignore[arg-type]
        if kind is cst.Try or kind is cst.TryStar:
            return self._try(node, state)  # type: ignore[arg-type]
        if kind is cst.Match:
            self.expressions.eval(node.subject, state)  # type: ignore[attr-defined]
            ends = [state] + [self._statements(block_statements(c.body), state.copy()) for c in node.cases]  # type: ignore[attr-defined]
            return join_states(ends)
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            state.forget(node.name.value)  # type: ignore[attr-defined]
        return state

    def _small(self, node: cst.BaseSmallStatement, state: State) -> None:
        kind = type(node)
        if kind is cst.Expr:
            self.expressions.eval(node.value, state)  # type: ignore[attr-defined]
        elif kind is cst.Assign:
            self._assign(node, state)  # type: ignore[arg-type]
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self.expressions.bind(
                    node.target, self.expressions.eval(node.value, state), node.value, state
                )
        elif kind is cst.AugAssign:
            node_: cst.AugAssign = node  # type: ignore[assignment]
            left = self.expressions.eval(node_.target, state)
            right = self.expressions.eval(node_.value, state)
            result = self.expressions.arith(node_, node_.target, left, node_.value, right, elementwise=True)
            self.expressions.bind(node_.target, result, None, state)
        elif kind is cst.Return:
            if node.value is not None:  # type: ignore[attr-defined]
                self.expressions.eval(node.value, state)  # type: ignore[attr-defined]
            state.dead = True
        elif kind is cst.Raise:
            state.dead = True
        elif kind is cst.Break or kind is cst.Continue:
            if self.loops:
                self.loops[-1][0 if kind is cst.Break else 1].append(state.copy())
            state.dead = True
        elif kind is cst.Assert:
            self.expressions.eval(node.test, state)  # type: ignore[attr-defined]
        elif kind in _FORGETTING:  # `del x`, `import x`, `global x`: what `x` held is gone or unknown
            for bound in own_bindings(node):
                for target in unpacked(bound.target):
                    key = dotted_name(target)
                    if key:
                        state.forget(key)

    def _assign(self, node: cst.Assign, state: State) -> None:
        value = node.value
        targets = [t.target for t in node.targets]
        pairs = paired_elements(targets[0], value) if len(targets) == 1 else None
        if pairs is not None:
            results = [self.expressions.eval(source, state) for _, source in pairs]
            self.record.values[value] = OTHER
            for (part, source), result in zip(pairs, results, strict=True):
                self.expressions.bind(part, result, source, state)
            return
        result = self.expressions.eval(value, state)
        pieces = self._pieces(value)
        for target in targets:
            if pieces is not None and isinstance(target, (cst.Tuple, cst.List)):
                for element in target.elements:  # `a, b = x.chunk(2)`: tensors where `x` is
                    self.expressions.bind(element.value, pieces, None, state)
                continue
            self.expressions.bind(target, result, value, state)

    def _pieces(self, value: cst.BaseExpression) -> Value | None:
        """What each piece of `x.chunk(n)`, `x.split(k)`, `x.unbind()` is: a tensor on `x`'s device."""
        if not (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in _SPLITTING_METHODS
        ):
            return None
        receiver = self.record.values.get(value.func.value)
        if receiver is None or receiver.kind is not Kind.TENSOR:
            return None
        return Value(Kind.TENSOR, receiver.device, grad=receiver.grad)

    def _if(self, node: cst.If, state: State) -> State:
        self.expressions.eval(node.test, state)
        then = self._statements(block_statements(node.body), state.copy())
        orelse = node.orelse
        if isinstance(orelse, cst.If):
            other = self._if(orelse, state.copy())
        elif isinstance(orelse, cst.Else):
            other = self._statements(block_statements(orelse.body), state.copy())
        else:
            other = state
        return join_states([then, other])

    def _loop(
        self,
        state: State,
        enter: Callable[[State], object],
        body: cst.BaseSuite,
        orelse: cst.Else | None,
        endless: bool,
    ) -> State:
        head = state
        breaks: list[State] = []
        for round_ in range(MAX_ROUNDS + 1):
            if round_ == MAX_ROUNDS:
                head = State({}, head.default_cpu)  # give up: nothing known inside the loop
            current = head.copy()
            enter(current)
            self.loops.append(([], []))
            end = self._statements(block_statements(body), current)
            breaks, continues = self.loops.pop()
            new_head = join_states([head, end, *continues])
            if new_head.same(head) or round_ == MAX_ROUNDS:
                break
            head = new_head
        if endless:
            exit_state = dead_state()
        else:
            exit_state = head.copy()
            enter(exit_state)
            if orelse is not None:
                exit_state = self._statements(block_statements(orelse.body), exit_state)
        return join_states([exit_state, *breaks])

    def _for(self, node: cst.For, state: State) -> State:
        iterable = self.expressions.eval(node.iter, state)
        batches = iterable is not None and iterable.kind is Kind.LOADER
        if not batches and iterable is None:
            batches = loaders.is_loader(node.iter, self.scope)
        enumerated = (
            isinstance(node.iter, cst.Call) and resolve(node.iter.func, self.scope) == "builtins.enumerate"
        )
        if iterable is not None and iterable.pending is not None:
            self.record.read(iterable, node.iter)

        def enter(current: State) -> None:
            self.expressions.bind(node.target, None, None, current)
            if batches:
                self._bind_batch(node.target, current, enumerated)
            elif iterable is not None and iterable.kind is Kind.TENSOR and isinstance(node.target, cst.Name):
                current.set(node.target.value, TENSOR.on(iterable.device))

        return self._loop(state, enter, node.body, node.orelse, endless=False)

    def _bind_batch(self, target: cst.BaseExpression, state: State, enumerated: bool) -> None:
        """`for x, y in loader`: the unpacked parts of a batch are tensors (a lone name may be a dict)."""
        if not isinstance(target, (cst.Tuple, cst.List)):
            return
        elements = [e.value for e in target.elements]
        if enumerated:
            if len(elements) == 2:
                self._bind_batch(elements[1], state, False)
            return
        for element in elements:
            if isinstance(element, cst.Name):
                state.set(element.value, TENSOR)

    def _while(self, node: cst.While, state: State) -> State:
        endless = isinstance(node.test, cst.Name) and node.test.value == "True"
        return self._loop(
            state, lambda s: self.expressions.eval(node.test, s), node.body, node.orelse, endless
        )

    def _with(self, node: cst.With, state: State) -> State:
        expects_error = False
        for item in node.items:
            self.expressions.eval(item.item, state)
            call = item.item
            if isinstance(call, cst.Call):
                name = resolve(call.func, self.scope)
                if name == "torch.device":
                    state.default_cpu = False
                last = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
                if name in ("pytest.raises", "pytest.warns") or (last and EXPECTS_ERROR.match(last)):
                    expects_error = True
            if item.asname is not None:
                self.expressions.bind(item.asname.name, None, None, state)
        self.record.expect_error += expects_error
        try:
            return self._statements(block_statements(node.body), state)
        finally:
            self.record.expect_error -= expects_error

    def _try(self, node: cst.Try | cst.TryStar, state: State) -> State:
        entry = state.copy()
        end = self._statements(block_statements(node.body), state)
        handler_entry = join_states([entry, end])
        ends = [self._statements(block_statements(node.orelse.body), end) if node.orelse else end]
        for handler in node.handlers:
            current = handler_entry.copy()
            if handler.name is not None:
                self.expressions.bind(handler.name.name, None, None, current)
            ends.append(self._statements(block_statements(handler.body), current))
        result = join_states(ends)
        if node.finalbody is not None:
            if result.dead:
                self._statements(block_statements(node.finalbody.body), handler_entry.copy())
                return result
            return self._statements(block_statements(node.finalbody.body), result)
        return result


def initialised(function: cst.FunctionDef, ctx: FileContext) -> dict[str, Value]:
    """The `self.<attr>` devices a plain class's initialiser (`flow_classes.initialiser`) leaves for `function`.

    Only devices, tensors and modules known on an accelerator, and only
    attributes no other method assigns or moves in place.
    """
    setup = initialiser(function, ctx)
    if setup is None:
        return {}
    cache = memo(ctx)
    key = ("initialised", setup.method)
    if key not in cache:
        found: dict[str, Value] = {}
        scope = scope_of(setup.method, ctx)
        if scope is not None:
            end = Statements(setup.method, Record(scope, ctx, frozenset())).run()
            prefix = setup.method.params.params[0].name.value + "."
            for name, value in ({} if end.dead else end.vars).items():
                attr = name[len(prefix) :]
                if (
                    name.startswith(prefix)
                    and "." not in attr
                    and attr not in setup.unknown
                    and value.device is not None
                    # A device is never moved; a tensor or module only counts on an accelerator
                    # (code outside the class may move a CPU one: to the GPU, the usual way).
                    and (
                        value.kind is Kind.DEVICE
                        or (value.kind in (Kind.TENSOR, Kind.MODULE) and value.device.on_accelerator)
                    )
                    and value.pending is None
                ):
                    found[attr] = value
        cache[key] = found
    return cache[key]  # type: ignore[return-value]


def sets_default_device(ctx: FileContext) -> bool:
    """Does the module's top-level code call `torch.set_default_device` (factories may then not be on the CPU)?"""
    cache = memo(ctx)
    found = cache.get("default_device")
    if found is None:
        module_scope = ctx.scope.module
        found = cache["default_device"] = any(
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and resolve(small.value.func, module_scope) in DEFAULT_DEVICE_SETTERS
            for small in small_statements(ctx.module.body)
        )
    return found  # type: ignore[return-value]
