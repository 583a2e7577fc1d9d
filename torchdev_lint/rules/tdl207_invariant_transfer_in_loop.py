"""TDL207 invariant-transfer-in-loop."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from torchdev_lint.analysis.data.invariant_moves import (
    InvariantMove,
    aliases,
    already_there,
    invariant_move,
    reads_only,
    runs_at_least_once,
)
from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.syntax.loops import names_in
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name, resolve
from torchdev_lint.analysis.syntax.walk import visit
from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.kinds import is_tensor_factory_call
from torchdev_lint.rule import Fix, Invalid, Rule, Valid

# What may change where the fix is unsafe (the docs' "Fix safety"), by the reason it is unsafe there.
_ZERO_TIMES_RISK = (
    "the loop may run zero times: the move now runs anyway (and raises on a machine without the device)"
)
_LEAVES_EARLY_RISK = (
    "the move may not run on every iteration (the body may leave before it, or it sits in a "
    "comprehension or lambda): it now runs anyway, and raises on a machine without the device"
)
_SWITCHED_RISK = (
    "the loop changes the current GPU (`torch.cuda.set_device`, `torch.cuda.device`): `.cuda()` hoisted "
    "copies to the first one only"
)
_SHARED_RISK = (
    "{tensor} may be changed by code the loop calls (it is not a local tensor only read here): each "
    "iteration copied its current values, the hoisted copy keeps the first ones"
)


class InvariantTransferInLoop(Rule):
    code = "TDL207"
    name = "invariant-transfer-in-loop"
    message = (
        "A tensor that the loop never changes is copied to the device on every iteration; "
        "move it once, before the loop"
    )
    fix_availability = "sometimes"
    triggers = (".to(", ".cuda(")
    docs = """
        ## What it does
        Flags `buf.to(device)` / `buf.cuda()` inside a loop body when neither `buf` nor the move's
        arguments (device, dtype) change in the loop. Not flagged: `buf` (re)assigned in the loop,
        changed in place there (`buf.add_()` or any `*_` method, `buf[i] = ...`, `buf.data = ...`,
        `out=buf`), directly or through a view of it (`view = buf[:1]` ... `view.add_(1)`; also
        `buf.numpy()`, `a, b = buf.unbind(0)`, `nn.Parameter(buf)`), by an object built with it
        (`opt = SGD([p])` ... `opt.step()`), or
        handed to a call that may change it (any call but torch functions that only read their
        arguments and builtins such as `len`), or reached by a function of the function that the
        loop calls (`def update(): buf.mul_(0.5)`); a device taken from the loop (`buf.to(x.device)`)
        or from `buf` itself (`buf.to(buf.device, dtype)` is a cast); `x = x.to(d)`, which copies
        on the first iteration only (later ones find `x` on the device already); a tensor shared with
        other processes (`buf.share_memory_()`, also through `for t in (obs, buf): t.share_memory_()`),
        which they refill while the loop runs. Modules are TDL202's.

        ## Why it matters
        Each iteration copies the same bytes from host to device again: a fixed cost of several
        microseconds per copy plus the transfer itself, and a synchronisation with the host for
        pageable memory. A constant mask, a class-weight vector or a positional table moved
        inside the training loop can dominate the step time of a small model.

        ## Example
        ```python
        weights = torch.tensor([1.0, 5.0])
        for x, y in loader:
            w = weights.to(device)
            loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=w)
        ```

        ## Use instead
        ```python
        weights = torch.tensor([1.0, 5.0])
        w = weights.to(device)
        for x, y in loader:
            loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=w)
        ```

        ## Fix safety
        A move that is a statement of its own directly in the loop body (`w = buf.to(d)`) is
        hoisted before the loop when nothing earlier in the loop body reads `buf` or `w` and `w` is
        neither reassigned nor changed in place in the loop. A move inside a larger expression
        (`out.append(f + pos.to(d))`) is bound once before the loop to a new name
        (`pos_on_device = pos.to(d)`) that the expression then reads. Comments above and beside a
        hoisted statement move with it; the loop keeps its own.

        Safe only when (1) the loop provably runs at least once (`while True`, `range` of integer
        literals that is not empty, a non-empty list or tuple display), nothing earlier in the
        loop body can leave the iteration (`break`, `continue`, `return`, `raise`, `yield`, a failing `assert`, `sys.exit`) and the
        move is not inside a comprehension or lambda; and (2) `buf` is a local name bound only to
        new tensors of torch factories (not `torch.from_numpy`/`torch.as_tensor`) that the
        function, with every view of it, only reads (method calls, arithmetic, torch functions
        that only read their arguments): no code the loop calls can reach it. Otherwise the fix
        is unsafe: over a loop that runs zero times the move would now run (and raise on a machine
        without the device), and a parameter, attribute or global tensor may be changed by code
        the loop calls (`optimizer.step()`, a helper), after which each iteration used to copy the
        new values and the hoisted copy keeps the old ones. An unsafe fix's message says which of
        these applies at its site (and names the tensor).
        """
    invalid = (
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            def train(model, loader, device):
                weights = torch.tensor([1.0, 5.0])
                for x, y in loader:
                    # class weights on the device
                    w = weights.to(device)  # rare class counts 5x
                    loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=w)
            """,
            lines=(8,),
            fixed="""
            import torch
            import torch.nn.functional as F

            def train(model, loader, device):
                weights = torch.tensor([1.0, 5.0])
                # class weights on the device
                w = weights.to(device)  # rare class counts 5x
                for x, y in loader:
                    loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=w)
            """,
        ),
        # Moved before the loop, but to a device that has changed since.
        Invalid(
            """
            def refine(model, prompts, voice, device, fallback):
                voice = voice.to(device)
                device = fallback
                for prompt in prompts:
                    model(prompt, voice.to(device))
            """,
            lines=(5,),
            fixed="""
            def refine(model, prompts, voice, device, fallback):
                voice = voice.to(device)
                device = fallback
                voice_on_device = voice.to(device)
                for prompt in prompts:
                    model(prompt, voice_on_device)
            """,
        ),
        Invalid(
            """
            import torch

            def embed(features, device):
                pos = torch.randn(16, 8)
                out = []
                # one feature map at a time
                for i in range(4):
                    out.append(features[i] + pos.to(device))
                return out
            """,
            lines=(8,),
            fixed="""
            import torch

            def embed(features, device):
                pos = torch.randn(16, 8)
                out = []
                pos_on_device = pos.to(device)
                # one feature map at a time
                for i in range(4):
                    out.append(features[i] + pos_on_device)
                return out
            """,
        ),
        Invalid(
            """
            def run(xs, table, device, table_on_device):
                for x in xs:
                    y = x.to(device) + table.to(device)
            """,
            lines=(3,),
            fixed="""
            def run(xs, table, device, table_on_device):
                table_on_device_2 = table.to(device)
                for x in xs:
                    y = x.to(device) + table_on_device_2
            """,
        ),
        Invalid(
            """
            import torch

            class Detector:
                def __init__(self):
                    self.sampler = torch.linspace(0, 1, 64)

                def refine(self, segments, device):
                    for segment in segments:
                        sampler = self.sampler.to(device)[None]
                        yield segment[:, :1] * sampler
            """,
            lines=(9,),
            fixed="""
            import torch

            class Detector:
                def __init__(self):
                    self.sampler = torch.linspace(0, 1, 64)

                def refine(self, segments, device):
                    sampler_on_device = self.sampler.to(device)
                    for segment in segments:
                        sampler = sampler_on_device[None]
                        yield segment[:, :1] * sampler
            """,
        ),
    )
    valid = (
        # Rollout storage that worker processes fill: each move copies fresh data.
        Valid(
            """
            import torch

            frames = torch.zeros(64, 4).share_memory_()
            returns = torch.zeros(64)
            for buffer in [returns]:
                buffer.share_memory_()

            def learn(device, updates):
                for update in range(updates):
                    batch = frames.to(device, non_blocking=True), returns.to(device)
            """
        ),
        Valid(
            """
            def run(xs, table, bias, device, devices):
                for x in xs:
                    a = x.to(device)
                    b = table.to(x.device)
                    c = bias.to(a.device)
                for d in devices:
                    table.to(d)
                for x in xs:
                    table = table * 2
                    y = table.to(device)
                for x in xs:
                    table.add_(1)
                    y = table.to(device)
                for x in xs:
                    table[0] = x
                    y = table.to(device)
            """
        ),
        Valid(
            """
            def run(xs, table, device):
                for x in xs:
                    if x is None:
                        t = table.to(device)
                    h = table.cpu()
                    k = table.to(torch.float16)
                    model.to(device)
                    self.net.cuda()
                table.to(device)
            """
        ),
        Valid(
            """
            def to_device(loader, device):
                for batch in loader:
                    batch = {k: v.to(device) for k, v in batch.items()}
                    parts = [p.to(device) for p in batch["parts"]]

            def offload(xs, cache, device):
                for x in xs:
                    c = cache.to(device)
                    c.mul_(2)
                for step in range(3):
                    shifted = cache.to(device)
                    shifted += step  # adds into the fresh copy: each iteration needs its own

            def shared(x, device):
                w = torch.zeros(4)
                opt = torch.optim.SGD([torch.nn.Parameter(w)], lr=0.1)  # the parameter shares `w`
                rows = torch.zeros(2, 4)
                first, second = rows.unbind(0)
                table = torch.zeros(4)
                host = table.numpy()
                for _ in range(3):
                    (x * w.to(device)).sum()
                    opt.step()
                    rows.to(device)
                    first.add_(1)
                    table.to(device)
                    host += 1

            def normalize(chunks, device):
                scale = torch.ones(4)
                def update(y):
                    scale.mul_(0.5)  # a function of the function changes the buffer it reaches
                for chunk in chunks:
                    y = chunk.to(device) / scale.to(device)
                    update(y)
                for x in xs:
                    cache.to(device)
                    cache.cpu()
                for epoch in range(3):
                    G.cuda()
            """
        ),
        Valid(
            """
            import torch

            def bump(t):
                t[0] += 1

            def changed(buf, device, steps):
                view = buf[:1]
                for step in range(steps):
                    w = buf.to(device)
                    torch.add(buf, 1, out=buf)
                for step in range(steps):
                    w = buf.to(device)
                    buf.data = buf.data + 1
                for step in range(steps):
                    w = buf.to(device)
                    bump(buf)
                for step in range(steps):
                    w = buf.to(device)
                    view.add_(1)
                for step in range(steps):
                    w = buf.to(device)
                    buf.data.zero_()
                for step in range(steps):
                    w = buf.to(device)
                    buf[:, 0].copy_(w[:, 1])
            """
        ),
        Valid(
            """
            def decode(self, steps, h):
                while steps:
                    self.mask = self.mask.cuda()
                    h = h * self.mask
                    steps -= 1
                return h
            """
        ),
        Valid(
            """
            def mix(inputs, pairs, dtype, latents, control, device, scheduler):
                for pair in pairs:
                    mixed = inputs.to(device=inputs.device, dtype=dtype)
                for t in scheduler.timesteps:
                    cond = control.to(dtype=latents.dtype, device=device)
                    latents = scheduler.step(cond, t, latents)
            """
        ),
        # Moved to the same device before the loop: each move in it returns the tensor as it is.
        Valid(
            """
            def synthesize(self, sentences, speaker):
                speaker = speaker.to(self.device)
                for sentence in sentences:
                    yield self.vocoder(sentence, speaker.to(self.device))
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        move = as_move(node, scope)
        # A bare `g.cuda()` statement only makes sense on a module (a tensor's copy would be
        # discarded, which is TDL306's): leave it to TDL202, which needs module evidence.
        if move is None or isinstance(self.ctx.parent(), cst.Expr):
            return
        found = invariant_move(move, self.ctx.ancestors, scope, tensor=True)
        if found is None or found.reassigns_receiver:
            return  # `x = x.to(d)` moves once; later iterations find it there already
        if already_there(move, self.ctx.ancestors, scope):
            return  # `x = x.to(d)` before the loop: every move in it is a no-op
        # Asked last: it may take the function's flow analysis, and most moves are not in a loop.
        if flow.module_by_any_evidence(move.receiver, self.ctx):
            return
        self.report(node, fix=self._fix(found, scope) if self.ctx.fixes else None)

    def _fix(self, found: InvariantMove, scope: Scope) -> Fix | None:
        """Hoist the move statement, or bind the moved tensor to a new name before the loop."""
        edit = found.hoisted()
        title = "Move it once, before the loop"
        if edit is None:
            name = _fresh_name(found.move.receiver, self.ctx.ancestors)
            edit = found.bound_before(name) if name is not None else None
            title = f"Move it once, before the loop, into `{name}`"
        if edit is None:
            return None
        risk = None
        if not found.always_runs:
            risk = _LEAVES_EARLY_RISK if runs_at_least_once(found.loop) else _ZERO_TIMES_RISK
        elif found.handed_on:
            risk = _SWITCHED_RISK
        elif not _private_tensor(found.move.receiver, self.ctx.ancestors, scope):
            code = self.ctx.code_for(found.move.receiver)
            risk = _SHARED_RISK.format(
                tensor=f"`{code}`" if len(code) <= 40 and "\n" not in code else "the tensor"
            )
        return Fix.judged(title, edit, risk)


# Torch factories whose result shares memory with their argument.
_SHARING_FACTORIES = frozenset({"torch.as_tensor", "torch.from_numpy"})


def _function(ancestors: Sequence[cst.CSTNode]) -> cst.CSTNode:
    return next((a for a in reversed(ancestors) if isinstance(a, cst.FunctionDef)), ancestors[0])


def _private_tensor(receiver: cst.BaseExpression, ancestors: Sequence[cst.CSTNode], scope: Scope) -> bool:
    """Is the receiver a tensor that only this function can reach, so no call can change it?

    A local name bound only to fresh tensors of torch factories, that the function (and
    every name that may share its memory) only reads: method calls, arithmetic, torch
    functions that read their arguments. A parameter, an attribute, a global or a tensor
    handed to any other call may be changed by code the loop calls.
    """
    if not isinstance(receiver, cst.Name):
        return False
    found = scope.lookup(receiver.value)
    if found is None or found[0].kind != "function" or not found[1]:
        return False
    for binding in found[1]:
        value = binding.value
        if value is None or not is_tensor_factory_call(value, scope):
            return False
        if resolve(value.func, scope) in _SHARING_FACTORIES:
            return False
    function = _function(ancestors)
    uses = _Uses(aliases(function, receiver.value, scope), scope)
    visit(function, uses)
    return not uses.escapes


class _Uses(cst.CSTVisitor):
    """Finds an occurrence of `names` that is not a read keeping the tensor private (`_reads`)."""

    def __init__(self, names: frozenset[str], scope: Scope) -> None:
        self.names = names
        self.scope = scope
        self.stack: list[cst.CSTNode] = []
        self.escapes = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.escapes:
            return False  # found: nothing further to look at
        if isinstance(node, cst.Name) and node.value in self.names and self.stack:
            self.escapes = not _reads(node, self.stack, self.scope)
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if not self.escapes:
            self.stack.pop()


def _reads(name: cst.Name, stack: list[cst.CSTNode], scope: Scope) -> bool:
    """Is this occurrence of a name a read that keeps the tensor private?"""
    parent = stack[-1]
    if isinstance(parent, (cst.AssignTarget, cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
        return True
    if isinstance(parent, (cst.ComparisonTarget, cst.Return, cst.Subscript)):
        return True
    if isinstance(parent, cst.Assign):
        return parent.value is name
    if isinstance(parent, cst.Attribute) and parent.value is name:
        return len(stack) >= 2 and isinstance(stack[-2], cst.Call) and stack[-2].func is parent
    if isinstance(parent, cst.Arg) and len(stack) >= 2 and isinstance(stack[-2], cst.Call):
        return reads_only(stack[-2], scope)
    return False


def _fresh_name(receiver: cst.BaseExpression, ancestors: Sequence[cst.CSTNode]) -> str | None:
    """`pos_on_device` for `pos.to(d)` or `self.pos.to(d)`: a name the function does not use."""
    key = dotted_name(receiver)
    if key is None:
        return None
    base = key.rsplit(".", 1)[-1].lstrip("_") or "tensor"
    taken = names_in(_function(ancestors)) | names_in(ancestors[0])
    name, number = f"{base}_on_device", 2
    while name in taken:
        name, number = f"{base}_on_device_{number}", number + 1
    return name
