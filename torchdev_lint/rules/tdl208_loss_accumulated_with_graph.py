"""TDL208 loss-accumulated-with-graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.knowledge.library_models import host_module
from torchdev_lint.analysis.syntax.loops import Loop, calls_in, innermost_loop, names_in
from torchdev_lint.analysis.syntax.scopes import assigned_values, dotted_name
from torchdev_lint.analysis.syntax.units import remember
from torchdev_lint.analysis.syntax.walk import visit, walk
from torchdev_lint.analysis.values import autograd
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import method_call

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# What may change where the fix is unsafe (the docs' "Fix safety"): code outside sees the accumulator.
_ESCAPES_RISK = (
    "`{name}` is {where}: code outside this function that differentiates through it "
    "(`.backward()`, `torch.autograd.grad`) now raises or gets no gradient from the accumulated losses"
)


@dataclass(frozen=True)
class _LoopFacts:
    """What a training loop's body shows: its losses, and whether it calls `.backward()`."""

    losses: frozenset[str]
    trains: bool


class LossAccumulatedWithGraph(Rule):
    code = "TDL208"
    name = "loss-accumulated-with-graph"
    message = (
        "A loss is accumulated with its autograd graph: every iteration's graph stays alive through "
        "the accumulator and memory grows until it runs out; accumulate `loss.detach()` (or `loss.item()`)"
    )
    fix_availability = "always"
    triggers = ("backward",)
    docs = """
        ## What it does
        Flags, inside a training loop (a loop whose body calls `.backward()`), a loss added to an
        accumulator that outlives the iteration: `total += loss`, `total = total + loss`,
        `losses.append(loss)`, `meters["loss"] += loss`. A loss is a tensor on which the loop calls `.backward()`, the
        result of a loss function (`F.cross_entropy(...)`, `F.mse_loss(...)`) or of a criterion
        built from an `nn.*Loss` class. Accumulations of `loss.item()`, `loss.detach()`,
        `float(loss)` or `loss.data` are fine and not flagged; so are loops that run with
        gradients off (`torch.no_grad()`/`torch.inference_mode()` around them or as the
        function's decorator), accumulators reset in the loop, and accumulators on which
        `.backward()` is called later, directly or on a value computed from them
        (`meta_loss = outer / n; meta_loss.backward()`: gradient accumulation wants the graph).

        ## Why it matters
        `total += loss` makes `total` a tensor whose autograd history reaches every loss added so
        far, so no iteration's graph is ever freed. `backward()` releases the tensors a graph
        saved, but not the graph itself: its nodes stay in host memory as long as `total` lives,
        a few per operation of the model, every step (the `tdl208` fixture counts them: 1,605
        nodes after 200 steps of a two-layer MLP, 0 after the fix). A loss that is accumulated
        but not backpropagated also keeps its saved activations on the device. Memory grows
        step by step until an out-of-memory error many iterations later, far from the line that
        causes it. This is the first answer of PyTorch's FAQ on running out of memory.

        ## Example
        ```python
        total_loss = 0.0
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            total_loss += loss
        ```

        ## Use instead
        ```python
        total_loss += loss.detach()   # stays on the device, no sync, no graph
        # or, when you only log it: total_loss += loss.item()  (waits for the device each step)
        ```

        ## Fix safety
        The fix accumulates `loss.detach()` instead of `loss`: the same values bit for bit, on the
        same device, without waiting for the device. It is **safe** when the accumulator is a
        local name of the function (not a parameter, not `global`/`nonlocal`) that the function
        neither returns nor yields nor hands to an object it was given, nor does any value it
        computes from it with its graph (`mean = total / n; return mean`; `return total.item()`
        is fine): nothing outside can then depend on its graph. It is
        **unsafe** when the accumulator is an attribute (`self.total`), a parameter, a name from
        outside the function (`global`/`nonlocal`), is returned or yielded, is handed to or stored
        into an object from outside (`history.append(total)`, `log["losses"] = losses`, `history` and
        `log` parameters), or is another name for one (`hist = self.history`): a caller might
        differentiate through it (`.backward()`, `torch.autograd.grad`), which then raises or gets
        no gradient from the losses. The unsafe fix's message names which of these it is.
        """
    invalid = (
        Invalid(
            # Into an entry of a dict of meters, which outlives the iteration as much as a name.
            """
            import torch.nn.functional as F

            def epoch(model, batches, opt):
                meters = {"loss": 0.0}
                for x, y in batches:
                    loss = F.l1_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    meters["loss"] += loss
                print(meters)
            """,
            lines=(9,),
            fixed="""
            import torch.nn.functional as F

            def epoch(model, batches, opt):
                meters = {"loss": 0.0}
                for x, y in batches:
                    loss = F.l1_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    meters["loss"] += loss.detach()
                print(meters)
            """,
        ),
        Invalid(
            """
            import torch.nn as nn

            def train(model, loader, optimizer):
                criterion = nn.CrossEntropyLoss()
                total_loss = 0.0
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    total_loss += loss  # keeps every graph
                print(total_loss / len(loader))
            """,
            lines=(11,),
            fixed="""
            import torch.nn as nn

            def train(model, loader, optimizer):
                criterion = nn.CrossEntropyLoss()
                total_loss = 0.0
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    total_loss += loss.detach()  # keeps every graph
                print(total_loss / len(loader))
            """,
        ),
        Invalid(
            """
            import torch.nn.functional as F

            def fit(model, batches, opt):
                losses = []
                running = 0
                for x, y in batches:
                    loss = F.mse_loss(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(loss)
                    running = running + loss * x.shape[0]
                log(losses, running)
            """,
            lines=(11, 12),
            fixed="""
            import torch.nn.functional as F

            def fit(model, batches, opt):
                losses = []
                running = 0
                for x, y in batches:
                    loss = F.mse_loss(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(loss.detach())
                    running = running + loss.detach() * x.shape[0]
                log(losses, running)
            """,
        ),
        Invalid(
            # Stored on self and returned: the fix is unsafe (a caller might use the graph).
            """
            class Trainer:
                def epoch(self, loader):
                    total = 0
                    for batch in loader:
                        out = self.step(batch)
                        out.loss.backward()
                        l = out.loss
                        l.backward()
                        self.history.append(l)
                        total += l
                    return total
            """,
            lines=(9, 10),
            fixed="""
            class Trainer:
                def epoch(self, loader):
                    total = 0
                    for batch in loader:
                        out = self.step(batch)
                        out.loss.backward()
                        l = out.loss
                        l.backward()
                        self.history.append(l.detach())
                        total += l.detach()
                    return total
            """,
        ),
        Invalid(
            # The epoch loop keeps one graph per epoch alive.
            """
            import torch

            def run(model, loader, opt, epochs):
                per_epoch = []
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                        loss.backward()
                        opt.step()
                    per_epoch.append(loss)
                plot(per_epoch)
            """,
            lines=(10,),
            fixed="""
            import torch

            def run(model, loader, opt, epochs):
                per_epoch = []
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                        loss.backward()
                        opt.step()
                    per_epoch.append(loss.detach())
                plot(per_epoch)
            """,
        ),
    )
    valid = (
        Valid(
            # The name of a loss rebound to a NumPy number before it is kept.
            """
            import numpy as np
            import torch.nn.functional as F

            def fit(model, batches, opt, history):
                for x, y in batches:
                    loss = F.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    loss = np.mean([loss.item()])
                    history["loss"].append(loss)
            """
        ),
        Valid(
            # The accumulated losses are backpropagated after the loop through a value computed
            # from them (a meta-learning outer loss): the graphs are needed.
            """
            import torch.nn.functional as F

            def adapt(model, opt, tasks):
                outer = 0.0
                for (xs, ys), (xq, yq) in tasks:
                    F.mse_loss(model(xs), ys).backward()
                    opt.step()
                    outer = outer + F.mse_loss(model(xq), yq)
                meta_loss = outer / len(tasks)
                meta_loss.backward()
            """
        ),
        Valid(
            # .item(), .detach(), float() and .data carry no graph.
            """
            def train(model, loader, opt, criterion):
                total, seen, history = 0.0, 0, []
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
                    total += loss.item() * x.size(0)
                    seen += float(loss)
                    history.append(loss.detach().cpu())
                    history.append(loss.data)
                return total, seen, history
            """
        ),
        Valid(
            # Gradient accumulation: the accumulated loss is differentiated after the loop.
            """
            def accumulate(model, chunks, opt, criterion):
                total = 0
                for x, y in chunks:
                    loss = criterion(model(x), y)
                    loss.backward(retain_graph=True)
                    total = total + loss
                total.backward()
                opt.step()
            """
        ),
        Valid(
            # Evaluation under no_grad (decorator or with): there is no graph to keep.
            """
            import torch

            @torch.no_grad()
            def evaluate(model, loader, criterion):
                total = 0
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    total += loss
                return total

            def validate(model, loader, criterion):
                with torch.inference_mode():
                    total = 0
                    for x, y in loader:
                        loss = criterion(model(x), y)
                        loss.backward()
                        total += loss
                return total
            """
        ),
        Valid(
            # The accumulator is reset every iteration, or the loop never trains.
            """
            import torch.nn.functional as F

            def train(model, loader, opt):
                for x, y in loader:
                    step_losses = []
                    loss = F.l1_loss(model(x), y)
                    step_losses.append(loss)
                    sum(step_losses).backward()

            def collect(model, loader):
                outputs = []
                for x, y in loader:
                    outputs.append(F.l1_loss(model(x), y))
                return outputs
            """
        ),
        Valid(
            # Detached (and moved) before it is accumulated.
            """
            def run(model, loader, loss_fn, optimizer):
                loss = 0
                for x, y in loader:
                    loss_batch = loss_fn(model(x), y)
                    loss_batch.backward()
                    optimizer.step()
                    loss_batch = loss_batch.detach().cpu()
                    loss += loss_batch
                return loss
            """
        ),
        Valid(
            # A loss name rebound to a number in the loop is a number when accumulated.
            """
            def train(model, loader, opt, criterion):
                total = 0
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    loss = loss.item()
                    total += loss
                return total
            """
        ),
        Valid(
            # Accumulating something other than the loss: predictions are not losses.
            """
            def train(model, loader, opt, criterion):
                outputs = []
                for x, y in loader:
                    out = model(x)
                    loss = criterion(out, y)
                    loss.backward()
                    outputs.append(out.argmax(1))
                return outputs
            """
        ),
    )

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.AddAssign):
            self._check(node, node.target, node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or not isinstance(value, cst.BinaryOperation):
            return
        if not isinstance(value.operator, cst.Add):
            return
        target = dotted_name(node.targets[0].target)
        if target is None:
            return
        if dotted_name(value.left) == target:
            self._check(node, node.targets[0].target, value.right)
        elif dotted_name(value.right) == target:
            self._check(node, node.targets[0].target, value.left)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "append" and len(node.args) == 1:
            self._check(node, func.value, node.args[0].value)

    def _check(self, node: cst.CSTNode, accumulator: cst.BaseExpression, added: cst.BaseExpression) -> None:
        name = dotted_name(accumulator)
        if name is None and isinstance(accumulator, cst.Subscript):
            name = dotted_name(accumulator.value)  # `stats["loss"] += loss`: the container outlives it
        ancestors = self.ctx.ancestors
        loop = innermost_loop(ancestors)
        if name is None or loop is None or autograd.grad_is_off(ancestors, self.ctx.qualname):
            return
        facts = self._facts(loop)
        if not facts.trains:
            return
        live = self._live_losses(added, facts.losses)
        if not live or self._reset_in(loop, name, node) or self._differentiated(name):
            return
        replacements: dict[cst.CSTNode, cst.CSTNode] = {old: method_call(old, "detach") for old in live}
        risk = self._escapes(name)
        self.report(node, fix=Fix.judged("Accumulate `.detach()`ed losses", replacements, risk))

    def _facts(self, loop: Loop) -> _LoopFacts:
        return remember(self.ctx, "losses of a training loop", loop, lambda: self._loop_facts(loop))

    def _loop_facts(self, loop: Loop) -> _LoopFacts:
        backward = [c for c in calls_in(loop) if _method(c) == "backward"]
        if not backward:
            return _LoopFacts(frozenset(), False)  # no training loop: its losses are never asked
        losses = {dotted_name(c.func.value) for c in backward if isinstance(c.func, cst.Attribute)}
        numbers: set[str] = set()
        for target, value in _collect(loop.body, self.ctx).assignments:
            if self._is_loss(value):
                losses.add(target)
            if _detached(value) or (
                isinstance(value, cst.Call) and host_module(self.ctx.qualname(value.func) or "")
            ):
                numbers.add(target)  # `loss.item()`, `np.mean(...)`: a number, not a graph
        return _LoopFacts(frozenset(n for n in losses if n is not None) - numbers, bool(backward))

    def _is_loss(self, value: cst.BaseExpression) -> bool:
        """A loss function's result, or a call of a name bound to a criterion."""
        if not isinstance(value, cst.Call):
            return False
        if autograd.is_loss_call(value, self.ctx.qualname):
            return True
        found = assigned_values(value.func, self.ctx.scope)
        return found is not None and all(autograd.is_criterion(v, self.ctx.qualname) for v in found[0])

    def _live_losses(self, added: cst.BaseExpression, losses: frozenset[str]) -> list[cst.BaseExpression]:
        """The losses in `added` that still carry their graph (not under `.item()`, `float()`, ...)."""
        live: list[cst.BaseExpression] = []
        visit(added, _LiveLosses(self, losses, live))
        return live

    def _reset_in(self, loop: Loop, name: str, accumulation: cst.CSTNode) -> bool:
        """Is the accumulator assigned afresh in the loop (so it lives one iteration only)?"""
        for target, value in _collect(loop.body, self.ctx).assignments:
            if target == name and value is not getattr(accumulation, "value", None):
                if name not in names_in(value):
                    return True
        return False

    def _differentiated(self, name: str) -> bool:
        """Is `.backward()` (or `autograd.grad`) applied to the accumulator, or to a value computed
        from it (`meta_loss = outer / n; meta_loss.backward()`), anywhere in the function?"""
        derived = self._derived(name)
        for call in _collect(self._function_body(), self.ctx).calls:
            if _method(call) in ("backward", "grad") and names_in(call) & derived:
                return True
        return False

    def _derived(self, name: str) -> set[str]:
        """The accumulator and the names the function computes from it, with its autograd history
        (not through `.item()`, `.detach()`...)."""
        derived = {name}
        assignments = _collect(self._function_body(), self.ctx).assignments
        grown = True
        while grown:
            grown = False
            for target, value in assignments:
                if target not in derived and not _detached(value) and names_in(value) & derived:
                    derived.add(target)
                    grown = True
        return derived

    def _escapes(self, name: str) -> str | None:
        """What may change where the accumulator is detached, when code outside the function
        may see it; None if it cannot."""
        seen = self._seen_outside(name)
        return None if seen is None else _ESCAPES_RISK.format(name=name, where=seen)

    def _seen_outside(self, name: str) -> str | None:
        """How code outside the function may see the accumulator: an attribute, a parameter, a
        global, a returned or yielded value."""
        if "." in name:
            return "an attribute"
        found = self.ctx.scope.lookup(name)
        if found is None or found[0] is not self.ctx.scope.owner:
            return "a name from outside this function"
        if any(isinstance(binding.node, cst.Param) for binding in found[1]):
            return "a parameter"
        if any(binding.value is not None and self._outside_object(binding.value) for binding in found[1]):
            return "another name for an object from outside (`hist = self.history`)"
        derived = self._derived(name)
        collected = _collect(self._function_body(), self.ctx)
        live = frozenset(derived)
        for target, assigned in collected.assignments:
            if "." in target and isinstance(assigned, cst.Name) and assigned.value in derived:
                return "stored on an object"  # `self.losses = losses`
        for store in _stores_into(self._function_body(), derived):
            if self._outside_object(store):
                return 'stored into an object from outside (`log["losses"] = losses`)'
        for node in collected.returns:
            value = node.value.item if isinstance(node.value, cst.From) else node.value  # `yield from`
            if value is not None and self._live_losses(value, live):
                return "returned or yielded"  # not `return total.item()`
        for call in collected.calls:
            if self._outside_receiver(call) and any(self._live_losses(arg.value, live) for arg in call.args):
                return "handed to an object from outside the function"
        return None

    def _outside_object(self, node: cst.BaseExpression) -> bool:
        """`self.history`, `log["losses"]`, `args.meters`: rooted at a parameter (`self` too) or at a
        variable of an enclosing scope."""
        while isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        if not isinstance(node, cst.Name):
            return False
        found = self.ctx.scope.lookup(node.value)
        if found is None:
            return False
        owner, bindings = found
        if any(isinstance(binding.node, cst.Param) for binding in bindings):
            return True
        return owner is not self.ctx.scope.owner and all(
            binding.import_target is None and not isinstance(binding.node, (cst.FunctionDef, cst.ClassDef))
            for binding in bindings
        )

    def _outside_receiver(self, call: cst.Call) -> bool:
        """`history.append(acc)` with `history` an object the function was given (not a module, a
        function or a class it names: `torch.stack(history)` hands nothing out)."""
        return isinstance(call.func, cst.Attribute) and self._outside_object(call.func.value)

    def _function_body(self) -> cst.CSTNode:
        for node in reversed(self.ctx.ancestors):
            if isinstance(node, (cst.FunctionDef, cst.Module)):
                return node
        return self.ctx.module


def _stores_into(root: cst.CSTNode, names: set[str]) -> list[cst.BaseExpression]:
    """The subscripted or attribute targets the names are assigned into (`log["losses"] = losses`)."""
    found: list[cst.BaseExpression] = []

    def enter(node: cst.CSTNode) -> None:
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value in names:
            found.extend(
                t.target for t in node.targets if isinstance(t.target, (cst.Subscript, cst.Attribute))
            )

    walk(root, enter, lambda node: None)
    return found


def _method(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _detached(value: cst.BaseExpression) -> bool:
    """`x.item()`, `float(x)`, `x.detach().cpu()`, `x.data`...: a value without autograd history."""
    while True:
        if isinstance(value, cst.Call):
            if isinstance(value.func, cst.Name):
                return value.func.value in autograd.DETACHING_FUNCTIONS
            if _method(value) in autograd.DETACHING_METHODS:
                return True
            value = value.func
        elif isinstance(value, cst.Attribute):
            if value.attr.value in autograd.DETACHING_ATTRIBUTES:
                return True
            value = value.value
        else:
            return False


class _LiveLosses(cst.CSTVisitor):
    """Collects the losses an expression reads outside detaching calls and attributes, lambdas excluded."""

    def __init__(
        self, rule: LossAccumulatedWithGraph, losses: frozenset[str], live: list[cst.BaseExpression]
    ) -> None:
        self.rule = rule
        self.losses = losses
        self.live = live

    def visit_Call(self, node: cst.Call) -> bool:
        if _method(node) in autograd.DETACHING_METHODS:
            return False
        if isinstance(node.func, cst.Name) and node.func.value in autograd.DETACHING_FUNCTIONS:
            return False
        if self.rule._is_loss(node):
            self.live.append(node)
            return False
        return True

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if node.attr.value in autograd.DETACHING_ATTRIBUTES:
            return False
        if dotted_name(node) in self.losses:
            self.live.append(node)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.losses:
            self.live.append(node)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


class _Collector(cst.CSTVisitor):
    """Assignments, calls and returns of one function body, nested functions and classes excluded."""

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root
        self.assignments: list[tuple[str, cst.BaseExpression]] = []
        self.calls: list[cst.Call] = []
        self.returns: list[cst.Return | cst.Yield] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = dotted_name(target.target)
            if name is not None:
                self.assignments.append((name, node.value))

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Return(self, node: cst.Return) -> None:
        self.returns.append(node)

    def visit_Yield(self, node: cst.Yield) -> None:
        self.returns.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return node is self.root

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _collect(root: cst.CSTNode, ctx: FileContext) -> _Collector:
    """The assignments, calls and returns of `root`, walked once per file."""

    def walked() -> _Collector:
        collector = _Collector(root)
        visit(root, collector)
        return collector

    return remember(ctx, "assignments, calls and returns", root, walked)
