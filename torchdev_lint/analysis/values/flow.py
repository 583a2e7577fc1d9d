"""Device flow: what each expression of a function is (tensor, module...) and where it lives.

An intra-procedural abstract interpretation over one function body (or a
module's top-level code). It follows assignments, branches (joined: facts that
disagree become unknown), loops (iterated to a fixed point) and early exits
(code after `return`/`raise` is unreachable), and records for every evaluated
expression a `Value`. Unknown is the default and never leads to a finding:
every fact comes from positive evidence in the code.

This module is the query API rules use; the analysis itself reads by concern:

- `flow_values`: the abstract values (`Value`, `Kind`) and the `State` at
  one program point, with their joins; devices are `devices.Device`;
- `flow_statements`: the statement walk (branches, loops, `with`, `try`);
- `flow_expressions`: names, attributes, operators, subscripts, assignments;
- `flow_calls`: calls (constructors, torch functions, methods, moves);
- `flow_classes`: what a file's nn.Module subclasses declare about `self.<attr>`;
- `flow_devices`: which device an expression names;
- `flow_record`: what one run records (values, conflicts, async reads) and `Flow`;
- `units`: where a unit sits (its scopes, its class), from any point;
- `torch_api`: what each torch API does to devices.

Query API (for rules; a unit's analysis depends only on its code and its
enclosing scopes, so it may be asked for at any time, from anywhere):

- `current_unit(ctx)`: the FunctionDef or Module whose analysis covers the
  node being visited (None in class bodies);
- `analyse(unit, ctx) -> Flow`: the analysis of any unit of the file, computed
  once per file context and shared by every rule; `Flow.value(expr)` is the
  value an expression had when it was evaluated; `Flow.conflicts` lists
  operations that mix devices (TDL302), `Flow.async_reads` host reads of
  unsynchronised non-blocking device-to-host copies (TDL310);
- `value_of(expr, ctx)`, `kind_of(expr, ctx)`, `device_of(expr, ctx)`,
  `is_tensor(expr, ctx)`, `is_module(expr, ctx)`: shortcuts that analyse the
  current unit and look `expr` up in it (`kinds` holds the syntactic answers);
- `module_by_any_evidence(expr, ctx)`: syntactic evidence or a model-like
  name first, else the flow's kind;
- `may_mix_devices(scope, names_accelerator, ctx)`: whether a function's
  analysis can find a conflict at all, asked before running it;
- `in_placed_method(ctx)`: whether the visited node is in a method of a
  module class that runs with the module's parameters on its own device.

To stay cheap the analysis walks statements and expressions directly, without
LibCST visitors, and rules only ask for it in functions that hold a candidate
site (a `.to()`, a `.numpy()`, a `non_blocking=` copy...).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Generic, TypeVar

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import Device
from torchdev_lint.analysis.syntax.scopes import Scope
from torchdev_lint.analysis.syntax.units import Unit, current_unit, memo, method_class, remember, scope_of
from torchdev_lint.analysis.values import kinds
from torchdev_lint.analysis.values.flow_classes import ClassFacts, class_facts, initialiser, runs_placed
from torchdev_lint.analysis.values.flow_devices import device_expression
from torchdev_lint.analysis.values.flow_record import AsyncRead, Conflict, Flow, Record
from torchdev_lint.analysis.values.flow_statements import Statements
from torchdev_lint.analysis.values.flow_values import Kind, Value

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

Site = TypeVar("Site")

__all__ = [
    "AsyncRead",
    "ClassFacts",
    "Conflict",
    "Flow",
    "Kind",
    "SitesByUnit",
    "Unit",
    "Value",
    "analyse",
    "class_facts",
    "current_unit",
    "device_of",
    "in_placed_method",
    "is_module",
    "is_tensor",
    "module_by_any_evidence",
    "kind_of",
    "may_mix_devices",
    "value_of",
]


def analyse(unit: Unit, ctx: FileContext) -> Flow:
    """The device flow of `unit`, computed once per file context."""
    cache = memo(ctx)
    found = cache.get(unit)
    if not isinstance(found, Flow):
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
    return kinds.module_by_syntax_or_name(expr, ctx.scope) or is_module(expr, ctx)


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
        sites = self.drop(scope)
        if not sites:
            return None
        return analyse(scope.node, self.ctx), sites  # type: ignore[arg-type]

    def drop(self, scope: Scope) -> list[Site]:
        """The sites of the unit whose scope is being left, without its analysis."""
        if scope.kind not in ("function", "module"):
            return []
        return self._sites.pop(scope.node, None) or []


def in_placed_method(ctx: FileContext) -> bool:
    """Is the node being visited in a method of a file's nn.Module subclass that runs once the module
    may have been moved (its parameters and submodules then on `devices.own_device`)?"""
    unit = current_unit(ctx)
    if not isinstance(unit, cst.FunctionDef):
        return False
    return remember(ctx, "placed method", unit, lambda: _placed_method(unit, ctx))


def _placed_method(function: cst.FunctionDef, ctx: FileContext) -> bool:
    scope = scope_of(function, ctx)
    class_node = method_class(function, scope) if scope is not None else None
    facts = class_facts(class_node, ctx) if class_node is not None else None
    return facts is not None and runs_placed(function, facts, ctx)


def may_mix_devices(scope: Scope, names_accelerator: bool, ctx: FileContext) -> bool:
    """Can the flow of the function whose scope is `scope` find operands on devices that cannot mix?

    Only with a device known besides the CPU and `meta` (`devices.conflicting`), which comes
    from the function's own code (`names_accelerator`: a literal that may name one, `.cuda()`,
    `.to(0)`), from a name an enclosing scope binds once to a device (`flow_devices.outer_device`),
    or from `self.<attr>` its class's initialiser places (`flow_statements.initialised`). Asked
    before the analysis: most functions that pass `device=` along name no device themselves.
    """
    if names_accelerator:
        return True
    unit = scope.node
    if isinstance(unit, cst.FunctionDef) and initialiser(unit, ctx) is not None:
        return True
    enclosing = scope.parent
    while enclosing is not None:
        if _binds_device(enclosing, ctx):
            return True
        enclosing = enclosing.parent
    return False


def _binds_device(scope: Scope, ctx: FileContext) -> bool:
    """Does the scope bind a name once to a device expression? (Memoised: the module scope is every
    function's.)"""

    def search() -> bool:
        return any(
            len(bindings) == 1
            and bindings[0].value is not None
            and device_expression(bindings[0].value, scope) is not None
            for bindings in scope.bindings.values()
        )

    return remember(ctx, "binds a device", scope.node, search)


def _analyse(unit: Unit, ctx: FileContext) -> Flow:
    scope = scope_of(unit, ctx)
    if scope is None:
        return Flow()
    evidence: frozenset[str] = frozenset()
    # Module evidence (`model.eval()`) may come after the first use of a name:
    # run again with what the previous run learned until nothing new turns up.
    try:
        for _ in range(3):
            record = Record(scope, ctx, evidence)
            Statements(unit, record).run()
            if record.evidence_found <= evidence:
                break
            evidence = evidence | record.evidence_found
    except RecursionError:
        return Flow()  # absurdly nested expressions: know nothing rather than fail the file
    return record.result()
