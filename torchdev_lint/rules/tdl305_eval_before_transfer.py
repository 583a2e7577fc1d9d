"""TDL305 eval-before-transfer."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.knowledge.torch_api import (
    CONTAINERS,
    DATA_PARALLEL_CLASSES,
    DISTRIBUTED_WRAPPERS,
    MODULE_SAME,
)
from torchdev_lint.analysis.syntax.bindings import rebound_globally
from torchdev_lint.analysis.syntax.scopes import Scope, assigned_values, dotted_name
from torchdev_lint.analysis.syntax.walk import first
from torchdev_lint.analysis.values.kinds import constructs_module
from torchdev_lint.rule import Fix, Invalid, Rule, Valid

MODE_METHODS = frozenset({"eval", "train"})
# Container methods that add children.
_GROWING = frozenset({"append", "extend", "insert", "add_module", "register_module", "update"})
# Module methods that return the module itself, which may sit between the mode switch and the move.
_MODULE_RETURNING = MODULE_SAME | {"requires_grad_", "apply", "zero_grad"}
# What may change where the fix is unsafe (the docs' "Fix safety").
_ORDER_RISK = (
    "{module} is not known to be built by a `torch.nn` class: its own `train()`, `to()` or `_apply()` "
    "may make the order matter (a `train()` that builds tensors on the current device)"
)


def _argument_parts(call: cst.Call) -> list[tuple[cst.BaseExpression, bool]]:
    """The call's argument values, with the items of list, tuple and dict displays among them,
    each with whether it is given by position (a wrapper's keywords are mostly settings,
    `device_ids=[0, 1]`)."""
    parts: list[tuple[cst.BaseExpression, bool]] = []
    for arg in call.args:
        positional = arg.keyword is None or arg.keyword.value == "module"  # `DataParallel(module=net)`
        value = arg.value
        if isinstance(value, (cst.List, cst.Tuple, cst.Dict)):
            parts += [(element.value, positional) for element in value.elements]
        else:
            parts.append((value, positional))
    return parts


def _grown(module: cst.BaseExpression, scope: Scope) -> bool:
    """Does the function give the module more children after it is built (`model.append(Head())`,
    `model.add_module("head", h)`, `model.head = Head()`)?"""
    name = module.value if isinstance(module, cst.Name) else None
    if name is None:
        return False

    def grows(node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            receiver = node.func.value
            return (
                isinstance(receiver, cst.Name) and receiver.value == name and node.func.attr.value in _GROWING
            )
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute):
            owner = node.target.value
            return isinstance(owner, cst.Name) and owner.value == name
        return False

    return first(scope.node, grows) is not None


class EvalBeforeTransfer(Rule):
    code = "TDL305"
    name = "eval-before-transfer"
    message = "Mode set before the module is placed; place it first, then set the mode: `.to(device).eval()`"
    default_enabled = False
    fix_availability = "sometimes"
    triggers = ("eval", "train")
    docs = """
        ## What it does
        Flags `.eval()`/`.train()` called on a module before it is moved to its device, either in one
        chain (`Net().eval().to(device)`, also across module methods that return the module:
        `clip.eval().requires_grad_(False).to(device)`, then without a fix) or as a statement
        followed, later in the same block, by the
        move of the same module (`model.eval()` then `model.to(device)`) with nothing in between
        touching it. Moves to the CPU and dtype casts (`.to(torch.float16)`) are not moves to a device.

        ## Why it matters
        This is a convention, not a bug: for standard modules the mode flag and the placement are
        independent, so both orders behave the same. Placing first and setting the mode last keeps
        setup code uniform (`model = Net().to(device).eval()`), puts the mode next to the code that
        relies on it, and avoids surprises with custom modules whose `train()`/`eval()` overrides
        create or look at tensors on the module's current device. Opt-in for that reason.

        ## Example
        ```python
        model = Net().eval().to(device)

        model.train()
        model.to(device)
        ```

        ## Use instead
        ```python
        model = Net().to(device).eval()

        model.to(device)
        model.train()
        ```

        ## Fix safety
        The fix reorders the chain to `.to(device).eval()`, or swaps the two statements when they
        are adjacent (with their trailing comments); `Module.to`, `.eval()` and `.train()` return
        the module itself, so the result is the same object. It is **safe** when the module is
        built by a `torch.nn` class (directly, or through a name bound only to such a call) and so
        is every module it holds (a container or wrapper, `nn.Sequential(Head())`,
        `nn.DataParallel(module=net)`, runs its children's `train()` and `to()`; a module argument of
        another class, `nn.TransformerEncoder(layer, 2)` or `make_head()`, too), is given no other
        child afterwards (`model.append(head)`), is not a module-level name that a function rebinds
        through `global`, and the two are not inside a `try` (a move that
        raises there would skip the mode switch): their mode switch and
        their move touch different state. For any other class it is **unsafe**: a
        subclass may override `train()`, `to()` or `_apply()` so that the order matters (for
        example a `train()` that builds tensors on the current device); the unsafe fix's message
        names the module. Statements with other code between them are reported without a fix.
        """
    invalid = (
        Invalid(
            # Other module methods between the switch and the move: reported, no reorder written.
            """
            from torch import nn

            def frozen_encoder(encoder, device):
                return encoder.eval().requires_grad_(False).to(device)

            def half_head(device):
                return nn.Linear(4, 4).train(False).half().to(device)
            """,
            lines=(4, 7),
        ),
        Invalid(
            """
            import torch

            model = Net().eval().to(device)
            teacher = (
                Net()
                .train(False)
                .cuda()
            )
            """,
            lines=(3, 5),
            fixed="""
            import torch

            model = Net().to(device).eval()
            teacher = (
                Net()
                .cuda()
                .train(False)
            )
            """,
        ),
        Invalid(
            """
            def setup(model, device):
                # inference only
                model.eval()  # no dropout
                model.to(device)
                return model
            """,
            lines=(3,),
            fixed="""
            def setup(model, device):
                # inference only
                model.to(device)
                model.eval()  # no dropout
                return model
            """,
        ),
        Invalid(
            """
            def train(model, loader, device):
                model.train()
                print("training")
                model = model.to(device)
            """,
            lines=(2,),
        ),
    )
    valid = (
        Valid(
            """
            import torch

            model = Net().to(device).eval()
            half = Net().eval().to(torch.float16)
            cpu = Net().eval().cpu()
            """
        ),
        Valid(
            """
            def run(model, device, x):
                model.eval()
                y = model(x)
                model.to(device)

            def swap(model, other, device):
                model.eval()
                model = other
                model.to(device)

            def different(model, net, device):
                model.eval()
                net.to(device)
            """
        ),
        Valid(
            """
            def setup(model, device):
                model.to(device)
                model.eval()
                model.eval()
                model.to("cpu")
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        move = as_move(node, self.ctx.scope)
        mode = move.receiver if move is not None and move.to_accelerator else None
        between = mode
        while isinstance(between, cst.Call) and _mode_receiver(between) is None and _keeps_module(between):
            between = between.func.value  # type: ignore[attr-defined]
        if between is not mode and isinstance(between, cst.Call) and _mode_receiver(between) is not None:
            self.report(between)  # `.eval().requires_grad_(False).to(d)`: no reorder written across calls
            return
        if not (isinstance(mode, cst.Call) and _mode_receiver(mode) is not None):
            return
        assert isinstance(mode.func, cst.Attribute) and isinstance(node.func, cst.Attribute)
        placed = node.with_changes(
            func=node.func.with_changes(value=mode.func.value, dot=mode.func.dot),
            lpar=mode.lpar,
            rpar=mode.rpar,
        )
        fixed = mode.with_changes(
            func=mode.func.with_changes(value=placed, dot=node.func.dot), lpar=node.lpar, rpar=node.rpar
        )
        risk = self._order_risk(mode.func.value)
        self.report(mode, fix=Fix.judged("Move first, then set the mode", {node: fixed}, risk))

    def visit_Module(self, node: cst.Module) -> None:
        self._check_block(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._check_block(node.body)

    def _check_block(self, statements: Sequence[cst.BaseStatement]) -> None:
        """`model.eval()` followed in the same block by `model.to(device)`, nothing touching `model` between."""
        for index, statement in enumerate(statements):
            mode = _mode_statement(statement)
            key = _mode_receiver(mode) if mode is not None else None
            if mode is None or key is None:
                continue
            for later in range(index + 1, len(statements)):
                candidate = statements[later]
                if self._moves(candidate, key):
                    fix = None
                    if later == index + 1:
                        first, second = statement, candidate
                        assert isinstance(first, cst.SimpleStatementLine)
                        assert isinstance(second, cst.SimpleStatementLine)
                        swap: dict[cst.CSTNode, cst.CSTNode] = {
                            first: first.with_changes(
                                body=second.body, trailing_whitespace=second.trailing_whitespace
                            ),
                            second: second.with_changes(
                                body=first.body, trailing_whitespace=first.trailing_whitespace
                            ),
                        }
                        risk = self._order_risk(cst.parse_expression(key))
                        fix = Fix.judged("Move first, then set the mode", swap, risk)
                    self.report(mode, fix=fix)
                    break
                if _mentions(candidate, key):
                    break

    def _order_risk(self, module: cst.BaseExpression) -> str | None:
        """None for a module built by a `torch.nn` class (directly or through a name bound only
        to such): its `train()`/`eval()` and `to()` touch different state, so their order cannot
        matter. Otherwise what may change when they are swapped."""
        found = None
        if isinstance(module, cst.Name):
            found = assigned_values(module, self.ctx.scope)
            if (
                found is not None
                and found[1].kind == "module"
                and rebound_globally(self.ctx.module, module.value)
            ):
                found = None  # `global model` in a function: the name may hold anything
        values = found[0] if found is not None else [module]
        if (
            all(self._built_by_torch_nn(value) for value in values)
            and not (found is not None and _grown(module, found[1]))
            and not any(isinstance(node, cst.Try) for node in self.ctx.ancestors)
        ):
            return None  # not in a `try`: a move that raises there would skip the mode switch
        code = self.ctx.code_for(module).strip()
        return _ORDER_RISK.format(
            module=f"`{code}`" if len(code) <= 40 and "\n" not in code else "the module"
        )

    def _built_by_torch_nn(self, value: cst.BaseExpression) -> bool:
        """A `torch.nn` class's call whose modules are all built so too: a container or wrapper
        (`nn.Sequential(Head())`, `nn.DataParallel(module=net)`) runs its children's `train()` and
        `to()`, so each child must be known; no argument may be a module of another class
        (`nn.TransformerEncoder(layer, 2)` with `layer = CachedLayer(...)`)."""
        if not isinstance(value, cst.Call):
            return False
        name = self.ctx.qualname(value.func) or ""
        if not name.startswith("torch.nn.") or not name.rsplit(".", 1)[-1][:1].isupper():
            return False  # a class of torch.nn (`weight_norm(m)` returns `m`, whatever it is)
        holds_modules = (
            name.rsplit(".", 1)[-1] in CONTAINERS or name in DATA_PARALLEL_CLASSES | DISTRIBUTED_WRAPPERS
        )
        for part, positional in _argument_parts(value):
            if isinstance(part, cst.Call):
                callee = self.ctx.qualname(part.func) or ""
                if not self._built_by_torch_nn(part) and not callee.startswith("builtins."):
                    return False  # `Head()`, or `make_head()`, which may build any module
            elif holds_modules and positional:
                return False  # `nn.Sequential(backbone)`: a module of any class
            elif self._bound_to_other_module(part):
                return False
        return True

    def _bound_to_other_module(self, part: cst.BaseExpression) -> bool:
        """A name bound to a module not built by a `torch.nn` class (`layer = CachedLayer(...)`)."""
        found = assigned_values(part, self.ctx.scope) if isinstance(part, cst.Name) else None
        return found is not None and any(
            constructs_module(v, found[1]) and not self._built_by_torch_nn(v) for v in found[0]
        )

    def _moves(self, statement: cst.BaseStatement, key: str) -> bool:
        """`key.to(device)` or `key = key.to(device)` as the whole statement."""
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            return False
        small = statement.body[0]
        if isinstance(small, cst.Expr):
            value = small.value
        elif (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and dotted_name(small.targets[0].target) == key
        ):
            value = small.value
        else:
            return False
        if not isinstance(value, cst.Call):
            return False
        move = as_move(value, self.ctx.scope)
        return move is not None and move.to_accelerator and dotted_name(move.receiver) == key


def _keeps_module(call: cst.Call) -> bool:
    """`m.requires_grad_(False)`, `m.half()`: a module method that returns the module itself."""
    func = call.func
    return isinstance(func, cst.Attribute) and func.attr.value in _MODULE_RETURNING


def _mode_receiver(call: cst.Call) -> str | None:
    """`model` for `model.eval()`/`model.train(...)`; `""` for a receiver that is not a dotted name."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in MODE_METHODS):
        return None
    return dotted_name(func.value) or ""


def _mode_statement(statement: cst.BaseStatement) -> cst.Call | None:
    """The call of a statement that is exactly `x.eval()` or `x.train(...)`."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.value if _mode_receiver(small.value) else None
    return None


def _mentions(node: cst.CSTNode, key: str) -> bool:
    """Does the statement refer to `key` (a name or `a.b`) anywhere?"""
    finder = _Mentions(key)
    node.visit(finder)
    return finder.found


class _Mentions(cst.CSTVisitor):
    def __init__(self, key: str) -> None:
        self.key = key
        self.found = False

    def visit_Name(self, node: cst.Name) -> bool:
        self.found = self.found or node.value == self.key
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted_name(node) == self.key:
            self.found = True
            return False
        return not self.found
