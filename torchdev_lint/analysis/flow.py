"""Device flow: what each expression of a function is (tensor, module...) and where it lives.

An intra-procedural abstract interpretation over one function body (or a
module's top-level code). It follows assignments, branches (joined: facts that
disagree become unknown), loops (iterated to a fixed point) and early exits
(code after `return`/`raise` is unreachable), and records for every evaluated
expression a `Value` (see `flow_values`). Unknown is the default and never
leads to a finding: every fact comes from positive evidence in the code.

Query API (for rules; call from a handler of a node inside the function, or
from `leave_scope` of the function or module itself; the result does not
depend on how far the traversal has got):

- `current_unit(ctx)`: the FunctionDef or Module whose analysis covers the
  node being visited (None in class bodies);
- `analyse(unit, ctx) -> Flow`: the analysis of that unit, computed once per
  file context and shared by every rule; `Flow.value(expr)` is the value an
  expression had when it was evaluated; `Flow.conflicts` lists operations that
  mix devices (TDL302), `Flow.async_reads` host reads of unsynchronised
  non-blocking device-to-host copies (TDL310);
- `value_of(expr, ctx)`, `kind_of(expr, ctx)`, `device_of(expr, ctx)`,
  `is_tensor(expr, ctx)`, `is_module(expr, ctx)`: shortcuts that analyse the
  current unit and look `expr` up in it.

To stay cheap the analysis walks statements and expressions directly, without
LibCST visitors, and rules only ask for it in functions that hold a candidate
site (a `.to()`, a `.numpy()`, a `non_blocking=` copy...).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

import libcst as cst

from torchdev_lint.analysis import kinds, loaders
from torchdev_lint.analysis.devices import is_dtype
from torchdev_lint.analysis.flow_values import (
    CPU,
    LOADER,
    MODULE,
    OTHER,
    TENSOR,
    Device,
    Kind,
    Value,
    conflicting,
    join,
)
from torchdev_lint.analysis.scopes import Scope, block_statements, dotted_name, resolve, small_statements
from torchdev_lint.syntax import keyword, keyword_is_true

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

Unit = cst.FunctionDef | cst.Module
Site = TypeVar("Site")

__all__ = [
    "AsyncRead",
    "ClassFacts",
    "Conflict",
    "Device",
    "Flow",
    "Kind",
    "SitesByUnit",
    "Value",
    "analyse",
    "current_unit",
    "device_of",
    "is_module",
    "is_tensor",
    "module_by_any_evidence",
    "kind_of",
    "value_of",
]


@dataclass(frozen=True)
class Conflict:
    """An operation whose operands are known to sit on devices that cannot mix.

    `moved` is the operand to move (the host-side one, or a module's input),
    `target` the device it must go to, `target_expr` an expression for that
    device that is valid at the operation (None when there is none), `holder`
    the other operand (the module called, or the other tensor).
    """

    node: cst.CSTNode
    moved: cst.BaseExpression
    moved_device: Device
    target: Device
    target_expr: cst.BaseExpression | None
    holder: cst.BaseExpression
    module_call: bool


@dataclass(frozen=True)
class AsyncRead:
    """A host read of a tensor whose non-blocking device-to-host copy may still be running."""

    copy: cst.Call
    read: cst.CSTNode


@dataclass
class Flow:
    """The result of analysing one function or module."""

    values: dict[cst.CSTNode, Value | None] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    async_reads: list[AsyncRead] = field(default_factory=list)

    def value(self, node: cst.CSTNode) -> Value | None:
        return self.values.get(node)


@dataclass
class ClassFacts:
    """What a module-level nn.Module subclass declares about its attributes.

    `attrs` maps `self.<name>` to (value, follows): `follows` is True for
    parameters, buffers and submodules, which the module's `.to()` moves along.
    """

    node: cst.ClassDef
    attrs: dict[str, tuple[Value, bool]]
    stateful: bool
    _moves_inputs: bool | None = None


# ---------------------------------------------------------------------------
# Public API


def current_unit(ctx: FileContext) -> Unit | None:
    """The function (or module) whose analysis covers the node being visited."""
    owner = ctx.scope.owner
    if owner.kind in ("function", "module"):
        return owner.node  # type: ignore[return-value]
    return None


def analyse(unit: Unit, ctx: FileContext) -> Flow:
    """The device flow of `unit`, computed once per file context."""
    cache = _cache(ctx)
    found = cache.get(unit)
    if found is None:
        found = cache[unit] = _analyse(unit, ctx)
    return found


def value_of(expr: cst.CSTNode, ctx: FileContext) -> Value | None:
    unit = current_unit(ctx)
    return None if unit is None else analyse(unit, ctx).value(expr)


def kind_of(expr: cst.CSTNode, ctx: FileContext) -> Kind | None:
    value = value_of(expr, ctx)
    return None if value is None else value.kind


def device_of(expr: cst.CSTNode, ctx: FileContext) -> Device | None:
    value = value_of(expr, ctx)
    return None if value is None else value.device


def is_tensor(expr: cst.CSTNode, ctx: FileContext) -> bool:
    return kind_of(expr, ctx) is Kind.TENSOR


def is_module(expr: cst.CSTNode, ctx: FileContext) -> bool:
    return kind_of(expr, ctx) is Kind.MODULE


def module_by_any_evidence(expr: cst.BaseExpression, ctx: FileContext) -> bool:
    """A module by syntactic evidence or a model-like name (cheap), else by the device flow.

    The flow settles what names cannot: `criterion = nn.BCELoss()` is a module,
    and so is a value built by a local `nn.Module` subclass and passed along.
    """
    return kinds.module_or_model_name(expr, ctx.scope) or is_module(expr, ctx)


class SitesByUnit(Generic[Site]):
    """Candidate sites a rule collects per unit, handed back with the unit's analysis.

    Flow rules note sites while the traversal passes them and judge them in
    `leave_scope`, so a unit without candidates is never analysed.
    """

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._sites: dict[cst.CSTNode, list[Site]] = defaultdict(list)

    def add(self, site: Site) -> None:
        unit = current_unit(self.ctx)
        if unit is not None:
            self._sites[unit].append(site)

    def take(self, scope: Scope) -> tuple[Flow, list[Site]] | None:
        """The analysis and the sites of the unit whose scope is being left, if it has any."""
        if scope.kind not in ("function", "module"):
            return None
        sites = self._sites.pop(scope.node, None)
        if not sites:
            return None
        return analyse(scope.node, self.ctx), sites  # type: ignore[arg-type]


def _cache(ctx: FileContext) -> dict[cst.CSTNode, object]:
    cache = getattr(ctx, "_flow_cache", None)
    if cache is None:
        cache = {}
        ctx._flow_cache = cache  # type: ignore[attr-defined]
    return cache


def _analyse(unit: Unit, ctx: FileContext) -> Flow:
    scope: Scope | None = ctx.scope
    while scope is not None and scope.node is not unit:
        scope = scope.parent
    if scope is None:
        return Flow()
    evidence: frozenset[str] = frozenset()
    # Module evidence (`model.eval()`) may come after the first use of a name:
    # run again with what the previous run learned until nothing new turns up.
    try:
        for _ in range(3):
            interpreter = _Interpreter(unit, scope, ctx, evidence)
            interpreter.run()
            if interpreter.evidence_found <= evidence:
                break
            evidence = evidence | interpreter.evidence_found
    except RecursionError:
        return Flow()  # absurdly nested expressions: know nothing rather than fail the file
    return interpreter.result()


# ---------------------------------------------------------------------------
# Vocabulary

_MODULE_ONLY = kinds.MODULE_ONLY_METHODS
_MODULE_SAME = frozenset({"eval", "train", "half", "float", "double", "bfloat16", "share_memory"})
_STATEFUL_NN = re.compile(
    r"^(Lazy)?(Linear|Bilinear|Conv\w*|BatchNorm\w*|SyncBatchNorm|LayerNorm|GroupNorm|RMSNorm|"
    r"Embedding\w*|RNN\w*|LSTM\w*|GRU\w*|Transformer\w*|MultiheadAttention|PReLU)$"
)
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
_FACTORIES = frozenset(
    """zeros ones empty full rand randn randint randperm arange linspace logspace eye tensor
    as_tensor from_numpy zeros_like ones_like empty_like full_like rand_like randn_like
    randint_like""".split()
)
_ALWAYS_NONSCALAR = frozenset({"arange", "linspace", "logspace", "randperm", "eye"})
_JOINS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack"})
# Operations whose operands must share a device; the elementwise ones accept a CPU 0-dim tensor.
_ELEMENTWISE = frozenset(
    """add sub subtract mul multiply div divide true_divide pow maximum minimum where eq ne lt le gt ge
    atan2 add_ sub_ mul_ div_ pow_""".split()
)
_STRICT = frozenset({"matmul", "mm", "bmm", "mv", "dot", "index_select", "cdist", "linear", "bilinear"})
_STRICT_F = frozenset({"linear", "bilinear", "conv1d", "conv2d", "conv3d", "embedding"})
# torch functions that do not return one tensor.
_NOT_ONE_TENSOR = frozenset(
    """split chunk unbind tensor_split sort topk max min median mode kthvalue var_mean std_mean meshgrid
    broadcast_tensors unique unique_consecutive frexp aminmax histogram save load equal allclose is_tensor
    numel is_nonzero is_floating_point is_complex result_type""".split()
)
# Tensor methods returning a tensor on the receiver's device with at least its dimensions.
_KEEP_SHAPE = frozenset(
    """detach clone contiguous float half double bfloat16 long int bool short byte char abs exp log sqrt
    rsqrt relu sigmoid tanh neg softmax log_softmax clamp clamp_ pin_memory requires_grad_ flatten
    unsqueeze permute transpose t reshape view type_as expand expand_as repeat add sub mul div pow
    sin cos floor ceil round sign masked_fill detach_ add_ sub_ mul_ div_ zero_ fill_ normal_ uniform_
    copy_ cumsum flip roll eq ne lt le gt ge maximum minimum where""".split()
)
# Tensor methods returning a tensor on the receiver's device, maybe 0-dim.
_SAME_DEVICE = frozenset(
    """sum mean prod std var norm argmax argmin squeeze matmul mm bmm mv dot index_select gather
    narrow select masked_select nonzero logsumexp all any""".split()
)
_NEW = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# Methods that do not read a tensor's data (queue more device work, or look at metadata only).
_NOT_READING = frozenset(
    {"to", "cuda", "record_stream", "size", "dim", "numel", "stride", "data_ptr", "is_pinned", "pin_memory"}
)
_BLOCKING = frozenset({"item", "tolist"})
_HOST_VALUES = frozenset({"numpy", "tolist", "item", "size", "dim", "numel", "data_ptr", "stride"})
_READERS = frozenset(
    f"builtins.{name}" for name in ("print", "int", "float", "bool", "str", "repr", "list", "tuple", "sum")
)
_SYNCS = frozenset(
    {
        "torch.cuda.synchronize",
        "torch.accelerator.synchronize",
        "torch.xpu.synchronize",
        "torch.mps.synchronize",
    }
)
_SYNC_METHODS = frozenset({"synchronize", "wait", "query"})
_EXPECTS_ERROR = re.compile(r"^assertRaises|^assertRaisesRegex|^expectedFailure")
_MAX_ROUNDS = 8
_DEFAULT_DEVICE_SETTERS = frozenset({"torch.set_default_device", "torch.set_default_tensor_type"})


# ---------------------------------------------------------------------------
# The interpreter


class _State:
    """Facts at one program point: values by key (`x`, `self.fc`), and whether factories land on the CPU."""

    __slots__ = ("vars", "default_cpu", "dead")

    def __init__(self, values: dict[str, Value] | None = None, default_cpu: bool = True) -> None:
        self.vars: dict[str, Value] = values if values is not None else {}
        self.default_cpu = default_cpu
        self.dead = False

    def copy(self) -> _State:
        state = _State(dict(self.vars), self.default_cpu)
        state.dead = self.dead
        return state

    def set(self, key: str, value: Value | None) -> None:
        self.forget(key)
        if value is not None:
            self.vars[key] = value

    def forget(self, key: str) -> None:
        self.vars.pop(key, None)
        prefix = key + "."
        for stale in [k for k in self.vars if k.startswith(prefix)]:
            del self.vars[stale]

    def same(self, other: _State) -> bool:
        return self.dead == other.dead and self.default_cpu == other.default_cpu and self.vars == other.vars


def _dead() -> _State:
    state = _State()
    state.dead = True
    return state


def _join_states(states: Sequence[_State]) -> _State:
    live = [s for s in states if not s.dead]
    if not live:
        return _dead()
    first = live[0]
    values = dict(first.vars)
    default_cpu = first.default_cpu
    for other in live[1:]:
        default_cpu = default_cpu and other.default_cpu
        merged = {}
        for key, value in values.items():
            joined = join(value, other.vars.get(key))
            if joined is not None:
                merged[key] = joined
        values = merged
    return _State(values, default_cpu)


class _Interpreter:
    def __init__(self, unit: Unit, scope: Scope, ctx: FileContext, evidence: frozenset[str]) -> None:
        self.unit = unit
        self.scope = scope
        self.ctx = ctx
        self.evidence = evidence
        self.evidence_found: set[str] = set()
        self.values: dict[cst.CSTNode, Value | None] = {}
        self.conflicts: dict[cst.CSTNode, Conflict | None] = {}
        self.reads: dict[cst.CSTNode, AsyncRead | None] = {}
        self.loops: list[tuple[list[_State], list[_State]]] = []
        self.expect_error = 0
        self.dispatch: dict[type, Callable[[cst.CSTNode, _State], Value | None]] = {
            cst.Name: self._name,
            cst.Attribute: self._attribute,
            cst.Call: self._call,
            cst.BinaryOperation: self._binary,
            cst.Comparison: self._comparison,
            cst.UnaryOperation: self._unary,
            cst.Subscript: self._subscript,
            cst.IfExp: self._ifexp,
            cst.SimpleString: self._string,
            cst.Integer: lambda n, s: OTHER,
            cst.Float: lambda n, s: OTHER,
            cst.Imaginary: lambda n, s: OTHER,
            cst.ConcatenatedString: lambda n, s: OTHER,
            cst.FormattedString: self._fstring,
            cst.NamedExpr: self._walrus,
            cst.Await: self._await,
        }
        self.state = _State()

    # -- entry and results ------------------------------------------------

    def run(self) -> None:
        state = _State(default_cpu=not _sets_default_device(self.ctx))
        unit = self.unit
        if isinstance(unit, cst.FunctionDef):
            self._parameters(unit, state)
            self._statements(block_statements(unit.body), state)
        else:
            self._statements(unit.body, state)

    def result(self) -> Flow:
        return Flow(
            self.values,
            [c for c in self.conflicts.values() if c is not None],
            [r for r in self.reads.values() if r is not None],
        )

    def _parameters(self, function: cst.FunctionDef, state: _State) -> None:
        params = function.params
        facts = self._method_class(function)
        for index, param in enumerate((*params.posonly_params, *params.params)):
            if index == 0 and facts is not None:
                state.set(param.name.value, Value(Kind.MODULE, cls=facts, stateful=facts.stateful))
                continue
            value = self._annotated(param.annotation)
            if value is not None:
                state.set(param.name.value, value)
        for param in params.kwonly_params:
            value = self._annotated(param.annotation)
            if value is not None:
                state.set(param.name.value, value)

    def _annotated(self, annotation: cst.Annotation | None) -> Value | None:
        if annotation is None:
            return None
        name = resolve(annotation.annotation, self.scope)
        if name in ("torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            return TENSOR
        if name is not None and (name == "torch.nn.Module" or kinds.is_module_class(name, self.scope)):
            return MODULE
        return None

    def _method_class(self, function: cst.FunctionDef) -> ClassFacts | None:
        """Facts of the module class `function` is a (non-static) method of."""
        ancestors = self.ctx.ancestors
        try:
            index = len(ancestors) - 1 - ancestors[::-1].index(function)
        except ValueError:
            return None
        if index < 2 or not isinstance(ancestors[index - 2], cst.ClassDef):
            return None
        if any(
            isinstance(d.decorator, cst.Name) and d.decorator.value in ("staticmethod", "classmethod")
            for d in function.decorators
        ):
            return None
        return class_facts(ancestors[index - 2], self.ctx)  # type: ignore[arg-type]

    # -- statements -------------------------------------------------------

    def _statements(self, statements: Sequence[cst.CSTNode], state: _State) -> _State:
        for statement in statements:
            if state.dead:
                break
            state = self._statement(statement, state)
        return state

    def _statement(self, node: cst.CSTNode, state: _State) -> _State:
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
            self.eval(node.subject, state)  # type: ignore[attr-defined]
            ends = [state] + [self._statements(block_statements(c.body), state.copy()) for c in node.cases]  # type: ignore[attr-defined]
            return _join_states(ends)
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            state.forget(node.name.value)  # type: ignore[attr-defined]
        return state

    def _small(self, node: cst.BaseSmallStatement, state: _State) -> None:
        kind = type(node)
        if kind is cst.Expr:
            self.eval(node.value, state)  # type: ignore[attr-defined]
        elif kind is cst.Assign:
            self._assign(node, state)  # type: ignore[arg-type]
        elif kind is cst.AnnAssign:
            if node.value is not None:  # type: ignore[attr-defined]
                self._bind(node.target, self.eval(node.value, state), node.value, state)  # type: ignore[attr-defined]
        elif kind is cst.AugAssign:
            node_: cst.AugAssign = node  # type: ignore[assignment]
            left = self.eval(node_.target, state)
            right = self.eval(node_.value, state)
            result = self._arith(node_, node_.target, left, node_.value, right, elementwise=True)
            self._bind(node_.target, result, None, state)
        elif kind is cst.Return:
            if node.value is not None:  # type: ignore[attr-defined]
                self.eval(node.value, state)  # type: ignore[attr-defined]
            state.dead = True
        elif kind is cst.Raise:
            state.dead = True
        elif kind is cst.Break or kind is cst.Continue:
            if self.loops:
                self.loops[-1][0 if kind is cst.Break else 1].append(state.copy())
            state.dead = True
        elif kind is cst.Del:
            for name in _target_keys(node.target):  # type: ignore[attr-defined]
                state.forget(name)
        elif kind is cst.Assert:
            self.eval(node.test, state)  # type: ignore[attr-defined]
        elif kind is cst.Import or kind is cst.ImportFrom:
            names = node.names  # type: ignore[attr-defined]
            if isinstance(names, Sequence):
                for alias in names:
                    bound = alias.asname.name if alias.asname else alias.name
                    key = dotted_name(bound)
                    if key:
                        state.forget(key.split(".")[0])
        elif kind is cst.Global or kind is cst.Nonlocal:
            for item in node.names:  # type: ignore[attr-defined]
                state.forget(item.name.value)

    def _assign(self, node: cst.Assign, state: _State) -> None:
        value = node.value
        targets = [t.target for t in node.targets]
        if (
            isinstance(value, (cst.Tuple, cst.List))
            and len(targets) == 1
            and isinstance(targets[0], (cst.Tuple, cst.List))
            and len(targets[0].elements) == len(value.elements)
            and not any(isinstance(e, cst.StarredElement) for e in (*value.elements, *targets[0].elements))
        ):
            results = [self.eval(e.value, state) for e in value.elements]
            self.values[value] = OTHER
            for element, result, source in zip(targets[0].elements, results, value.elements, strict=True):
                self._bind(element.value, result, source.value, state)
            return
        result = self.eval(value, state)
        for target in targets:
            self._bind(target, result, value, state)

    def _bind(
        self,
        target: cst.BaseExpression,
        value: Value | None,
        source: cst.BaseExpression | None,
        state: _State,
    ) -> None:
        if isinstance(target, (cst.Name, cst.Attribute)):
            key = dotted_name(target)
            if key is None:
                if isinstance(target, cst.Attribute):
                    self.eval(target.value, state)
                return
            if (
                value is not None
                and value.kind is Kind.DEVICE
                and value.device is not None
                and value.device.type is None
                and value.device.name is None
            ):
                value = value.on(replace(value.device, name=key))
            state.set(key, value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, None, None, state)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, None, None, state)
        elif isinstance(target, cst.Subscript):
            self.eval(target.value, state)

    def _if(self, node: cst.If, state: _State) -> _State:
        self.eval(node.test, state)
        then = self._statements(block_statements(node.body), state.copy())
        orelse = node.orelse
        if isinstance(orelse, cst.If):
            other = self._if(orelse, state.copy())
        elif isinstance(orelse, cst.Else):
            other = self._statements(block_statements(orelse.body), state.copy())
        else:
            other = state
        return _join_states([then, other])

    def _loop(
        self,
        state: _State,
        enter: Callable[[_State], None],
        body: cst.BaseSuite,
        orelse: cst.Else | None,
        endless: bool,
    ) -> _State:
        head = state
        breaks: list[_State] = []
        for round_ in range(_MAX_ROUNDS + 1):
            if round_ == _MAX_ROUNDS:
                head = _State({}, head.default_cpu)  # give up: nothing known inside the loop
            current = head.copy()
            enter(current)
            self.loops.append(([], []))
            end = self._statements(block_statements(body), current)
            breaks, continues = self.loops.pop()
            new_head = _join_states([head, end, *continues])
            if new_head.same(head) or round_ == _MAX_ROUNDS:
                break
            head = new_head
        if endless:
            exit_state = _dead()
        else:
            exit_state = head.copy()
            enter(exit_state)
            if orelse is not None:
                exit_state = self._statements(block_statements(orelse.body), exit_state)
        return _join_states([exit_state, *breaks])

    def _for(self, node: cst.For, state: _State) -> _State:
        iterable = self.eval(node.iter, state)
        batches = iterable is not None and iterable.kind is Kind.LOADER
        if not batches and iterable is None:
            batches = loaders.is_loader(node.iter, self.scope)
        enumerated = (
            isinstance(node.iter, cst.Call) and resolve(node.iter.func, self.scope) == "builtins.enumerate"
        )
        if iterable is not None and iterable.pending is not None:
            self._read(iterable, node.iter)

        def enter(current: _State) -> None:
            self._bind(node.target, None, None, current)
            if batches:
                self._bind_batch(node.target, current, enumerated)
            elif iterable is not None and iterable.kind is Kind.TENSOR and isinstance(node.target, cst.Name):
                current.set(node.target.value, TENSOR.on(iterable.device))

        return self._loop(state, enter, node.body, node.orelse, endless=False)

    def _bind_batch(self, target: cst.BaseExpression, state: _State, enumerated: bool) -> None:
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

    def _while(self, node: cst.While, state: _State) -> _State:
        endless = isinstance(node.test, cst.Name) and node.test.value == "True"
        return self._loop(state, lambda s: self.eval(node.test, s), node.body, node.orelse, endless)

    def _with(self, node: cst.With, state: _State) -> _State:
        expects_error = False
        for item in node.items:
            self.eval(item.item, state)
            call = item.item
            if isinstance(call, cst.Call):
                name = resolve(call.func, self.scope)
                if name == "torch.device":
                    state.default_cpu = False
                last = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
                if name in ("pytest.raises", "pytest.warns") or (last and _EXPECTS_ERROR.match(last)):
                    expects_error = True
            if item.asname is not None:
                self._bind(item.asname.name, None, None, state)
        self.expect_error += expects_error
        try:
            return self._statements(block_statements(node.body), state)
        finally:
            self.expect_error -= expects_error

    def _try(self, node: cst.Try | cst.TryStar, state: _State) -> _State:
        entry = state.copy()
        end = self._statements(block_statements(node.body), state)
        handler_entry = _join_states([entry, end])
        ends = [self._statements(block_statements(node.orelse.body), end) if node.orelse else end]
        for handler in node.handlers:
            current = handler_entry.copy()
            if handler.name is not None:
                self._bind(handler.name.name, None, None, current)
            ends.append(self._statements(block_statements(handler.body), current))
        result = _join_states(ends)
        if node.finalbody is not None:
            if result.dead:
                self._statements(block_statements(node.finalbody.body), handler_entry.copy())
                return result
            return self._statements(block_statements(node.finalbody.body), result)
        return result

    # -- expressions ------------------------------------------------------

    def eval(self, node: cst.BaseExpression, state: _State) -> Value | None:
        # One statement's expressions all see one state: remember it for `_still`.
        self.state = state
        handler = self.dispatch.get(type(node))
        if handler is not None:
            value = handler(node, state)
        elif isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            for element in node.elements:
                self.eval(element.value, state)
            value = OTHER
        elif isinstance(node, cst.Dict):
            for element in node.elements:
                if isinstance(element, cst.DictElement):
                    self.eval(element.key, state)
                self.eval(element.value, state)
            value = OTHER
        elif isinstance(node, cst.BooleanOperation):
            self.eval(node.left, state)
            self.eval(node.right, state)
            value = None
        else:
            value = None  # lambdas and comprehensions run elsewhere: not followed
        self.values[node] = value
        return value

    def _lookup(self, key: str, node: cst.BaseExpression, state: _State) -> Value | None:
        value = state.vars.get(key)
        if value is not None:
            return value
        if isinstance(node, cst.Name):
            outer = self._outer_device(node)
            if outer is not None:
                return outer
        if key in self.evidence:
            return Value(Kind.MODULE, stateful=True)
        if loaders.named_like_loader(node):
            return LOADER
        return None

    def _outer_device(self, node: cst.Name) -> Value | None:
        """A device chosen once in an enclosing scope (`DEVICE = torch.device(...)` at module level)."""
        found = self.scope.lookup(node.value)
        if found is None or found[0] is self.scope:
            return None
        owner, bindings = found
        if len(bindings) != 1 or bindings[0].value is None:
            return None
        value = self._device_expression(bindings[0].value, owner)
        if value is None:
            return None
        return value.on(replace(value.device, name=node.value)) if value.device else value  # type: ignore[arg-type]

    def _device_expression(self, node: cst.BaseExpression, scope: Scope) -> Value | None:
        """The device a literal, `torch.device(...)` or availability-chosen expression names."""
        if isinstance(node, cst.SimpleString):
            device = _literal(node)
            return None if device is None else Value(Kind.DEVICE, device)
        if isinstance(node, cst.IfExp):
            if _literal_type(node.body) == "cuda" and self._availability(node.test, scope):
                return Value(Kind.DEVICE, Device(None, origin=node))
            return None
        if isinstance(node, cst.Call) and resolve(node.func, scope) == "torch.device" and node.args:
            inner = self._device_expression(node.args[0].value, scope)
            if inner is not None and inner.device is not None and inner.device.type is None:
                return Value(Kind.DEVICE, Device(None, origin=node))
            if inner is not None and len(node.args) > 1 and isinstance(node.args[1].value, cst.Integer):
                return inner.on(replace(inner.device, index=node.args[1].value.evaluated_value))  # type: ignore[arg-type]
            return inner
        return None

    def _availability(self, test: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
        """`torch.cuda.is_available()`, alone, in an `and`, or through a flag bound to it."""
        if isinstance(test, cst.Call):
            return resolve(test.func, scope) == "torch.cuda.is_available"
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return self._availability(test.left, scope, depth) or self._availability(test.right, scope, depth)
        if isinstance(test, cst.Name) and depth < 3:
            found = scope.lookup(test.value)
            if found is not None and len(found[1]) == 1 and found[1][0].value is not None:
                return self._availability(found[1][0].value, found[0], depth + 1)  # type: ignore[arg-type]
        return False

    def _name(self, node: cst.Name, state: _State) -> Value | None:
        return self._lookup(node.value, node, state)

    def _attribute(self, node: cst.Attribute, state: _State) -> Value | None:
        key = dotted_name(node)
        if key is not None and key in state.vars:
            self.eval(node.value, state)
            return state.vars[key]
        owner = self.eval(node.value, state)
        attr = node.attr.value
        if owner is None:
            return None if key is None else self._lookup(key, node, state)
        if attr == "device" and owner.kind is Kind.TENSOR:
            return Value(Kind.DEVICE, owner.device) if owner.device is not None else None
        if owner.kind is Kind.TENSOR and attr in ("T", "mT", "H", "data", "real", "imag"):
            return owner
        if owner.kind is Kind.TENSOR and attr in ("shape", "dtype", "ndim", "requires_grad", "is_cuda"):
            return OTHER
        if owner.kind is Kind.MODULE and isinstance(owner.cls, ClassFacts):
            fact = owner.cls.attrs.get(attr)
            if fact is not None:
                value, follows = fact
                return value.on(owner.device) if follows else value
        return None if key is None else self._lookup(key, node, state)

    def _string(self, node: cst.SimpleString, state: _State) -> Value | None:
        device = _literal(node)
        return OTHER if device is None else Value(Kind.DEVICE, device)

    def _fstring(self, node: cst.FormattedString, state: _State) -> Value | None:
        for part in node.parts:
            if isinstance(part, cst.FormattedStringExpression):
                value = self.eval(part.expression, state)
                if value is not None and value.pending is not None:
                    self._read(value, part)
        return OTHER

    def _walrus(self, node: cst.NamedExpr, state: _State) -> Value | None:
        value = self.eval(node.value, state)
        self._bind(node.target, value, node.value, state)
        return value

    def _ifexp(self, node: cst.IfExp, state: _State) -> Value | None:
        self.eval(node.test, state)
        body = self.eval(node.body, state)
        orelse = self.eval(node.orelse, state)
        device = self._device_expression(node, self.scope)
        if device is not None:
            return device
        return join(body, orelse)

    def _unary(self, node: cst.UnaryOperation, state: _State) -> Value | None:
        value = self.eval(node.expression, state)
        return value if value is not None and value.kind is Kind.TENSOR else None

    def _binary(self, node: cst.BinaryOperation, state: _State) -> Value | None:
        left = self.eval(node.left, state)
        right = self.eval(node.right, state)
        matmul = isinstance(node.operator, cst.MatrixMultiply)
        return self._arith(node, node.left, left, node.right, right, elementwise=not matmul)

    def _comparison(self, node: cst.Comparison, state: _State) -> Value | None:
        left = self.eval(node.left, state)
        if len(node.comparisons) != 1:
            for target in node.comparisons:
                self.eval(target.comparator, state)
            return None
        comparator = node.comparisons[0].comparator
        right = self.eval(comparator, state)
        if not isinstance(
            node.comparisons[0].operator,
            (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual, cst.Equal, cst.NotEqual),
        ):
            return OTHER
        result = self._arith(node, node.left, left, comparator, right, elementwise=True)
        return None if result is None else replace(result, grad=False)

    def _arith(
        self,
        node: cst.CSTNode,
        left_node: cst.BaseExpression,
        left: Value | None,
        right_node: cst.BaseExpression,
        right: Value | None,
        *,
        elementwise: bool,
    ) -> Value | None:
        """`a + b` and kin: a tensor on the tensors' device; a conflict when they differ."""
        tensors = [
            (n, v)
            for n, v in ((left_node, left), (right_node, right))
            if v is not None and v.kind is Kind.TENSOR
        ]
        if not tensors:
            return None
        self._read_all(node, tensors)
        if len(tensors) == 2:
            self._check_pair(node, tensors[0], tensors[1], elementwise)
        devices = {v.device for _, v in tensors}
        device = devices.pop() if len(devices) == 1 else None
        nonscalar = any(v.nonscalar for _, v in tensors) and elementwise
        grad = any(v.grad for _, v in tensors)
        return Value(Kind.TENSOR, device, nonscalar, grad)

    def _check_pair(
        self,
        node: cst.CSTNode,
        a: tuple[cst.BaseExpression, Value],
        b: tuple[cst.BaseExpression, Value],
        elementwise: bool,
    ) -> bool:
        """Record a conflict when two tensor operands sit on devices that cannot mix."""
        a_value, b_value = a[1], b[1]
        if a_value.device is None or b_value.device is None:
            return False
        if not conflicting(a_value.device, b_value.device):
            return False
        # Move the host-side operand to the other one's device.
        if a_value.device.type == "cpu":
            moved, holder = a, b
        elif b_value.device.type == "cpu":
            moved, holder = b, a
        else:
            moved, holder = b, a
        if elementwise and moved[1].device.type == "cpu" and not moved[1].nonscalar:  # type: ignore[union-attr]
            return False  # a CPU 0-dim tensor mixes with CUDA tensors
        self._conflict(node, moved[0], moved[1].device, holder[1].device, holder[0], module_call=False)  # type: ignore[arg-type]
        return True

    def _conflict(
        self,
        node: cst.CSTNode,
        moved: cst.BaseExpression,
        moved_device: Device,
        target: Device,
        holder: cst.BaseExpression,
        *,
        module_call: bool,
    ) -> None:
        if self.expect_error:
            return
        self.conflicts[node] = Conflict(
            node,
            moved,
            moved_device,
            target,
            self._device_node(target, holder, module_call),
            holder,
            module_call,
        )

    def _device_node(
        self, device: Device, holder: cst.BaseExpression, module_call: bool
    ) -> cst.BaseExpression | None:
        """An expression naming `device` at the operation: a literal, its variable, or `<tensor>.device`."""
        literal = device.literal()
        if literal is not None:
            return cst.SimpleString(f'"{literal}"')
        if device.name is not None:
            try:
                expression = cst.parse_expression(device.name)
            except cst.ParserSyntaxError:
                expression = None
            # Only when the name still holds that device here.
            if expression is not None and self._still(device, expression):
                return expression
        if not module_call and isinstance(holder, (cst.Name, cst.Attribute)) and dotted_name(holder):
            return cst.Attribute(value=holder, attr=cst.Name("device"))
        return None

    def _still(self, device: Device, expression: cst.BaseExpression) -> bool:
        key = dotted_name(expression)
        if key is None:
            return False
        state = self.state
        value = (
            self._lookup(key, expression, state) if isinstance(expression, cst.Name) else state.vars.get(key)
        )
        return value is not None and value.kind is Kind.DEVICE and value.device == device

    def _await(self, node: cst.Await, state: _State) -> Value | None:
        self.eval(node.expression, state)
        return None

    def _subscript(self, node: cst.Subscript, state: _State) -> Value | None:
        value = self.eval(node.value, state)
        indices = []
        for element in node.slice:
            if isinstance(element.slice, cst.Index):
                indices.append((element.slice.value, self.eval(element.slice.value, state)))
            elif isinstance(element.slice, cst.Slice):
                for part in (element.slice.lower, element.slice.upper, element.slice.step):
                    if part is not None:
                        self.eval(part, state)
        if value is None:
            return None
        if value.pending is not None:
            self._read(value, node)
        if value.kind is not Kind.TENSOR:
            return None
        if value.device is not None and value.device.type == "cpu":
            for index_node, index in indices:
                if (
                    index is not None
                    and index.kind is Kind.TENSOR
                    and index.device is not None
                    and index.device.on_accelerator
                ):
                    self._conflict(node, index_node, index.device, CPU, node.value, module_call=False)
                    break
        return Value(Kind.TENSOR, value.device, grad=value.grad)

    # -- calls ------------------------------------------------------------

    def _call(self, node: cst.Call, state: _State) -> Value | None:
        func = node.func
        callee = self.eval(func, state)
        receiver = self.values.get(func.value) if isinstance(func, cst.Attribute) else None
        args = [self.eval(arg.value, state) for arg in node.args]
        name = resolve(func, self.scope) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if (name is not None and kinds.is_module_class(name, self.scope)) or (
            isinstance(func, cst.Name) and func.value in kinds.local_module_classes(self.scope.module)
        ):
            return self._construct(node, name or func.value, args, state)  # type: ignore[union-attr]
        if name is not None:
            result = self._function(node, name, args, state)
            if result is not _NOT_HANDLED:
                return result  # type: ignore[return-value]
        if callee is not None and callee.kind is Kind.MODULE:
            return self._module_call(node, func, callee, args)
        if isinstance(func, cst.Attribute):
            return self._method(node, func, receiver, args, state)
        if isinstance(func, cst.Name):
            self._sync(state)  # a helper of unknown behaviour may synchronise
        return None

    def _construct(self, node: cst.Call, name: str, args: list[Value | None], state: _State) -> Value:
        facts = None
        if "." not in name:
            class_node = _module_class_node(name, self.scope)
            facts = class_facts(class_node, self.ctx) if class_node is not None else None
        last = name.rsplit(".", 1)[-1]
        if facts is not None:
            stateful = facts.stateful
        elif name.startswith("torchvision."):
            stateful = True
        elif last in _CONTAINERS:
            stateful = any(v is not None and v.kind is Kind.MODULE and v.stateful for v in args)
        else:
            stateful = bool(_STATEFUL_NN.match(last))
        device = self._keyword_device(node, state)
        if device is None and facts is None and state.default_cpu:
            device = CPU
        return Value(Kind.MODULE, device, cls=facts, stateful=stateful)

    def _keyword_device(self, node: cst.Call, state: _State) -> Device | None:
        arg = keyword(node, "device")
        value = self.values.get(arg.value) if arg is not None else None
        return value.device if value is not None and value.kind is Kind.DEVICE else None

    def _function(self, node: cst.Call, name: str, args: list[Value | None], state: _State) -> object:
        if name == "torch.device":
            first = args[0] if args else None
            if first is not None and first.kind is Kind.DEVICE and len(node.args) == 1:
                return first
            return self._device_expression(node, self.scope)
        if name in _SYNCS:
            self._sync(state)
            return OTHER
        if name in _DEFAULT_DEVICE_SETTERS:
            state.default_cpu = False
            return OTHER
        if name in loaders.DATALOADER_CLASSES:
            return LOADER
        if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            first = args[0] if args else None
            return first if first is not None and first.kind is Kind.TENSOR else TENSOR
        if name in ("torch.jit.load", "torch.hub.load"):
            location = keyword(node, "map_location")
            value = self.values.get(location.value) if location is not None else None
            device = value.device if value is not None and value.kind is Kind.DEVICE else None
            return Value(Kind.MODULE, device, stateful=True)
        if name in _READERS or name.startswith("numpy."):
            for arg, value in zip(node.args, args, strict=True):
                if value is not None and value.pending is not None:
                    self._read(value, arg.value)
            return OTHER
        if name.startswith("builtins."):
            return None if name not in ("builtins.len", "builtins.isinstance") else OTHER
        if not name.startswith(("torch.", "numpy.", "math.")):
            self._sync(state)  # an imported helper of unknown behaviour may synchronise
        if name.startswith("torch.nn.functional."):
            last = name[len("torch.nn.functional.") :]
            return self._tensor_function(node, last, args, strict=last in _STRICT_F)
        if name.startswith("torch.") and name.count(".") == 1:
            last = name[6:]
            if last in _FACTORIES:
                return self._factory(node, last, args, state)
            if last in _JOINS:
                return self._join_call(node, last, args)
            if last in _NOT_ONE_TENSOR or (last == "where" and len(node.args) == 1):
                return None
            return self._tensor_function(
                node, last, args, strict=last in _STRICT, elementwise=last in _ELEMENTWISE
            )
        return _NOT_HANDLED

    def _factory(self, node: cst.Call, name: str, args: list[Value | None], state: _State) -> Value:
        device = self._keyword_device(node, state)
        explicit = keyword(node, "device") is not None
        first = args[0] if args else None
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        from_tensor = first is not None and first.kind is Kind.TENSOR
        if name == "from_numpy":
            device = CPU
        elif not explicit:
            if from_tensor and (name.endswith("_like") or name == "as_tensor"):
                device = first.device  # type: ignore[union-attr]
            elif not from_tensor:
                device = CPU if state.default_cpu else None
        return Value(Kind.TENSOR, device, _factory_nonscalar(name, positional, first))

    def _join_call(self, node: cst.Call, name: str, args: list[Value | None]) -> Value | None:
        """`torch.cat([a, b])`: every element must be on one device."""
        if not node.args or not isinstance(node.args[0].value, (cst.List, cst.Tuple)):
            return TENSOR
        elements = [
            (e.value, self.values.get(e.value))
            for e in node.args[0].value.elements
            if not isinstance(e, cst.StarredElement)
        ]
        tensors = [
            (n, v) for n, v in elements if v is not None and v.kind is Kind.TENSOR and v.device is not None
        ]
        accelerated = [(n, v) for n, v in tensors if v.device.on_accelerator]  # type: ignore[union-attr]
        hosted = [(n, v) for n, v in tensors if v.device.type == "cpu"]  # type: ignore[union-attr]
        if accelerated and hosted:
            self._conflict(
                node, hosted[0][0], CPU, accelerated[0][1].device, accelerated[0][0], module_call=False
            )  # type: ignore[arg-type]
        devices = {v.device for _, v in tensors}
        known = len(tensors) == len(elements) and len(devices) == 1
        return Value(Kind.TENSOR, devices.pop() if known else None, True, any(v.grad for _, v in tensors))

    def _tensor_function(
        self,
        node: cst.Call,
        name: str,
        args: list[Value | None],
        *,
        strict: bool = False,
        elementwise: bool = False,
    ) -> Value | None:
        """`torch.relu(x)`, `torch.matmul(a, b)`, `F.linear(x, w)`: a tensor on the inputs' device."""
        tensors = [
            (arg.value, value)
            for arg, value in zip(node.args, args, strict=True)
            if value is not None and value.kind is Kind.TENSOR and not arg.star
        ]
        if not tensors:
            return None
        self._read_all(node, tensors)
        if strict or elementwise:
            for index, first in enumerate(tensors):
                if any(self._check_pair(node, first, second, elementwise) for second in tensors[index + 1 :]):
                    break
        devices = {v.device for _, v in tensors if v.device is not None}
        device = devices.pop() if len(devices) == 1 else None
        return Value(Kind.TENSOR, device, grad=any(v.grad for _, v in tensors))

    def _method(
        self,
        node: cst.Call,
        func: cst.Attribute,
        receiver: Value | None,
        args: list[Value | None],
        state: _State,
    ) -> Value | None:
        method = func.attr.value
        key = dotted_name(func.value)
        if method in _MODULE_ONLY and key is not None:
            self.evidence_found.add(key)
        if method in _SYNC_METHODS:
            self._sync(state)
            return None
        if receiver is not None and receiver.pending is not None and method not in _NOT_READING:
            self._read(receiver, node)
        kind = receiver.kind if receiver is not None else None
        if method in ("to", "cuda", "cpu"):
            return self._move(node, func, method, receiver, args, state)
        if kind is Kind.MODULE:
            assert receiver is not None
            if method in _MODULE_SAME:
                return receiver
            if method == "forward":
                return self._module_call(node, func.value, receiver, args)
            return None
        if method in _BLOCKING and (
            receiver is None or (receiver.pending is None and receiver.device != CPU)
        ):
            self._sync(state)  # a blocking read of a (maybe CUDA) tensor waits for its stream
        if kind is not Kind.TENSOR:
            return OTHER if method in _HOST_VALUES else None
        assert receiver is not None
        if method in _HOST_VALUES:
            return OTHER
        if method in _NEW:
            device = (
                self._keyword_device(node, state) if keyword(node, "device") is not None else receiver.device
            )
            return Value(Kind.TENSOR, device)
        if method in _ELEMENTWISE or method in _STRICT:
            for arg, value in zip(node.args, args, strict=True):
                if value is not None and value.kind is Kind.TENSOR and not arg.keyword:
                    if self._check_pair(
                        node, (func.value, receiver), (arg.value, value), method in _ELEMENTWISE
                    ):
                        break
        if method in _KEEP_SHAPE:
            grad = receiver.grad and method not in ("detach", "detach_")
            return Value(Kind.TENSOR, receiver.device, receiver.nonscalar, grad)
        if method in _SAME_DEVICE:
            return Value(Kind.TENSOR, receiver.device, grad=receiver.grad)
        return None

    def _move(
        self,
        node: cst.Call,
        func: cst.Attribute,
        method: str,
        receiver: Value | None,
        args: list[Value | None],
        state: _State,
    ) -> Value | None:
        """`.to(...)`, `.cuda()`, `.cpu()`: a moved tensor, or a module moved in place."""
        moves, device = self._target(node, method, args)
        kind = receiver.kind if receiver is not None else None
        non_blocking = keyword_is_true(node, "non_blocking")
        if (
            non_blocking
            and method == "to"
            and device == CPU
            and kind in (None, Kind.TENSOR)
            and (receiver is None or receiver.device != CPU)
        ):
            return Value(Kind.TENSOR, CPU, receiver.nonscalar if receiver else False, pending=node)
        if device == CPU and not non_blocking and kind is not Kind.MODULE:
            if receiver is None or (receiver.pending is None and receiver.device != CPU):
                self._sync(state)  # a blocking copy to the host waits for the stream
        if receiver is None or kind not in (Kind.TENSOR, Kind.MODULE):
            return None
        moved = receiver.on(device) if moves else receiver
        if kind is Kind.MODULE:
            key = dotted_name(func.value)
            if key is not None:
                state.set(key, moved)  # a module moves in place
        elif moves and device != receiver.device:
            moved = replace(moved, pending=None)
        return moved

    def _target(self, node: cst.Call, method: str, args: list[Value | None]) -> tuple[bool, Device | None]:
        """Does the call change the device, and to which (None: unknown)?"""
        if method == "cpu":
            return True, CPU
        positional = [
            (a, v) for a, v in zip(node.args, args, strict=True) if a.keyword is None and not a.star
        ]
        if method == "cuda":
            if positional and isinstance(positional[0][0].value, cst.Integer):
                return True, Device("cuda", positional[0][0].value.evaluated_value)  # type: ignore[attr-defined]
            if positional or keyword(node, "device") is not None:
                return True, None
            return True, Device("cuda")
        for arg, value in zip(node.args, args, strict=True):
            if arg.keyword is not None and arg.keyword.value == "device":
                return True, value.device if value is not None and value.kind is Kind.DEVICE else None
        if any(a.star for a in node.args):
            return True, None
        if not positional:
            return False, None
        arg, value = positional[0]
        if isinstance(arg.value, cst.Integer):
            return True, Device("cuda", arg.value.evaluated_value)
        if value is not None and value.kind in (Kind.DEVICE, Kind.TENSOR):
            return True, value.device
        if is_dtype(arg.value, self.scope):
            return False, None
        return True, None

    def _module_call(
        self, node: cst.Call, func: cst.BaseExpression, module: Value, args: list[Value | None]
    ) -> Value:
        """Calling a module: its output lives where its weights do (or where the inputs are)."""
        inputs = [
            (arg.value, value)
            for arg, value in zip(node.args, args, strict=True)
            if value is not None and value.kind is Kind.TENSOR and not arg.star
        ]
        if not module.stateful:
            devices = {v.device for _, v in inputs}
            device = devices.pop() if len(devices) == 1 else None
            return Value(Kind.TENSOR, device, grad=True)
        device = module.device
        facts = module.cls if isinstance(module.cls, ClassFacts) else None
        if device is not None and not (facts is not None and moves_inputs(facts, self.ctx)):
            for arg_node, value in inputs:
                if value.device is not None and conflicting(device, value.device):
                    self._conflict(node, arg_node, value.device, device, func, module_call=True)
                    break
        return Value(Kind.TENSOR, device, grad=True)

    # -- asynchronous copies ------------------------------------------------

    def _sync(self, state: _State) -> None:
        """Everything copied so far has landed: forget pending copies."""
        for key, value in list(state.vars.items()):
            if value.pending is not None:
                state.vars[key] = replace(value, pending=None)

    def _read_all(self, node: cst.CSTNode, operands: list[tuple[cst.BaseExpression, Value]]) -> None:
        for _, value in operands:
            if value.pending is not None:
                self._read(value, node)

    def _read(self, value: Value, node: cst.CSTNode) -> None:
        assert value.pending is not None
        self.reads[node] = AsyncRead(value.pending, node)


_NOT_HANDLED = object()


def _factory_nonscalar(name: str, positional: list[cst.BaseExpression], first: Value | None) -> bool:
    """Does the factory call certainly build a tensor with at least one dimension?"""
    if name in _ALWAYS_NONSCALAR:
        return True
    if name.endswith("_like"):
        return first is not None and first.nonscalar
    if name in ("tensor", "as_tensor"):
        return bool(positional) and _sized(positional[0])
    if name in ("full", "randint"):
        return any(isinstance(p, (cst.Tuple, cst.List)) and p.elements for p in positional)
    if name == "from_numpy":
        return False
    return len(positional) >= 2 or (
        bool(positional) and (isinstance(positional[0], cst.Integer) or _sized(positional[0]))
    )


def _sized(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Tuple, cst.List)) and bool(node.elements)


def _literal(node: cst.SimpleString) -> Device | None:
    text = node.evaluated_value
    if not isinstance(text, str):
        return None
    backend, _, index = text.strip().partition(":")
    if backend not in ("cpu", "cuda", "mps", "xpu", "meta", "hpu"):
        return None
    if index:
        return Device(backend, int(index)) if index.isdigit() else None
    return Device(backend)


def _literal_type(node: cst.BaseExpression) -> str | None:
    device = _literal(node) if isinstance(node, cst.SimpleString) else None
    return None if device is None else device.type


def _target_keys(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [key for element in target.elements for key in _target_keys(element.value)]
    key = dotted_name(target)
    return [key] if key else []


# ---------------------------------------------------------------------------
# Class facts


def _sets_default_device(ctx: FileContext) -> bool:
    """Does the module's top-level code call `torch.set_default_device` (factories may then not be on the CPU)?"""
    cache = _cache(ctx)
    found = cache.get("default_device")
    if found is None:
        module_scope = ctx.scope.module
        found = cache["default_device"] = any(
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and resolve(small.value.func, module_scope) in _DEFAULT_DEVICE_SETTERS
            for small in small_statements(ctx.module.body)
        )
    return found  # type: ignore[return-value]


def _module_class_node(name: str, scope: Scope) -> cst.ClassDef | None:
    module = scope.module
    if name not in kinds.local_module_classes(module):
        return None
    for binding in module.bindings.get(name, ()):
        if isinstance(binding.node, cst.ClassDef):
            return binding.node
    return None


def class_facts(node: cst.ClassDef, ctx: FileContext) -> ClassFacts | None:
    """Attributes a module class gives itself in its methods (memoised per class)."""
    cache = _cache(ctx)
    key = ("class", node)
    if key in cache:
        return cache[key]  # type: ignore[return-value]
    cache[key] = None  # guards against a class that (indirectly) derives from itself
    module_scope = ctx.scope.module
    if node.name.value not in kinds.local_module_classes(module_scope):
        return None
    attrs: dict[str, tuple[Value, bool]] = {}
    stateful = False
    for base in node.bases:
        name = resolve(base.value, module_scope)
        if name is not None and name.startswith("torch.nn."):
            last = name.rsplit(".", 1)[-1]
            stateful = stateful or bool(_STATEFUL_NN.match(last)) or last in _CONTAINERS
        elif isinstance(base.value, cst.Name):
            parent = _module_class_node(base.value.value, module_scope)
            facts = class_facts(parent, ctx) if parent is not None else None
            if facts is not None:
                attrs.update(facts.attrs)
                stateful = stateful or facts.stateful
    found: dict[str, list[tuple[Value | None, bool]]] = {}
    for statement in block_statements(node.body):
        if isinstance(statement, cst.FunctionDef) and statement.params.params:
            self_name = statement.params.params[0].name.value
            for small in small_statements(block_statements(statement.body)):
                _class_assignment(small, self_name, module_scope, found, node)
    for attr, entries in found.items():
        values = {value for value, _ in entries}
        if len(values) == 1 and None not in values:
            value = values.pop()
            follows = all(f for _, f in entries)
            attrs[attr] = (value, follows)  # type: ignore[assignment]
            stateful = stateful or (follows and (value.kind is Kind.TENSOR or value.stateful))  # type: ignore[union-attr]
        else:
            attrs.pop(attr, None)
    facts = ClassFacts(node, attrs, stateful)
    cache[key] = facts
    return facts


def _class_assignment(
    small: cst.BaseSmallStatement,
    self_name: str,
    scope: Scope,
    found: dict[str, list[tuple[Value | None, bool]]],
    class_node: cst.ClassDef,
) -> None:
    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
        for target in targets:
            if (
                isinstance(target, cst.Attribute)
                and isinstance(target.value, cst.Name)
                and target.value.value == self_name
            ):
                found.setdefault(target.attr.value, []).append(
                    _attribute_value(small.value, scope, class_node)
                )
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == self_name
            and func.attr.value in ("register_buffer", "register_parameter", "add_module", "register_module")
            and len(call.args) >= 2
            and isinstance(call.args[0].value, cst.SimpleString)
        ):
            attr = call.args[0].value.evaluated_value
            if not isinstance(attr, str):
                return
            value = call.args[1].value
            if isinstance(value, cst.Name) and value.value == "None":
                entry: tuple[Value | None, bool] = (None, True)
            elif func.attr.value in ("add_module", "register_module"):
                entry = (Value(Kind.MODULE, stateful=True), True)
            else:
                entry = (TENSOR, True)
            found.setdefault(attr, []).append(entry)


def _attribute_value(
    value: cst.BaseExpression, scope: Scope, class_node: cst.ClassDef
) -> tuple[Value | None, bool]:
    if isinstance(value, cst.Call):
        name = resolve(value.func, scope)
        if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            return TENSOR, True
        if kinds.constructs_module(value, scope):
            last = (name or "").rsplit(".", 1)[-1]
            local = isinstance(value.func, cst.Name) and value.func.value in kinds.local_module_classes(scope)
            stateful = (
                local
                or bool(_STATEFUL_NN.match(last))
                or last in _CONTAINERS
                or (name or "").startswith("torchvision.")
            )
            return Value(Kind.MODULE, stateful=stateful), True
        if kinds.is_tensor_factory_call(value, scope):
            return TENSOR, False
    return None, False


def moves_inputs(facts: ClassFacts, ctx: FileContext) -> bool:
    """Does the class move data itself (a `.to(`/`.cuda(` outside `__init__`)? Then its inputs may be anywhere."""
    if facts._moves_inputs is None:
        code = "".join(
            ctx.module.code_for_node(statement)
            for statement in block_statements(facts.node.body)
            if not (isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__")
        )
        facts._moves_inputs = ".to(" in code or ".cuda(" in code
    return facts._moves_inputs
