"""TDL207 invariant-transfer-in-loop."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis import flow
from torchdev_lint.analysis.devices import as_move
from torchdev_lint.analysis.loops import invariant_move
from torchdev_lint.rule import Fix, Invalid, Rule, Valid


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
        Flags `buf.to(device)` / `buf.cuda()` inside a loop body when neither `buf` nor the target
        device changes in the loop: `buf` is not (re)assigned, mutated in place (`buf.add_()`,
        `buf[i] = ...`) or moved elsewhere in the loop, and the device does not depend on the loop
        variable (`buf.to(x.device)` with `x` the loop variable is not flagged). Modules are
        TDL202's.

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
        Safe, and offered only when the move is a statement of its own directly in the loop body
        (`w = buf.to(d)` or `buf = buf.to(d)`) that runs on every iteration, when nothing earlier
        in the loop body reads `buf` or `w`, and when `w` is neither reassigned nor mutated in
        place in the loop: every iteration then sees an equal tensor on the same device. A move
        inside a larger expression is reported without a fix.
        """
    invalid = (
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            def train(model, loader, device):
                weights = torch.tensor([1.0, 5.0])
                for x, y in loader:
                    w = weights.to(device)
                    loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=w)
            """,
            lines=(7,),
            fixed="""
            import torch
            import torch.nn.functional as F

            def train(model, loader, device):
                weights = torch.tensor([1.0, 5.0])
                w = weights.to(device)
                for x, y in loader:
                    loss = F.cross_entropy(model(x.to(device)), y.to(device), weight=w)
            """,
        ),
        Invalid(
            """
            def decode(self, steps, h):
                while steps:
                    self.mask = self.mask.cuda()
                    h = h * self.mask
                    steps -= 1
                return h
            """,
            lines=(3,),
            fixed="""
            def decode(self, steps, h):
                self.mask = self.mask.cuda()
                while steps:
                    h = h * self.mask
                    steps -= 1
                return h
            """,
        ),
        Invalid(
            """
            def run(xs, table, device):
                for x in xs:
                    y = x.to(device) + table.to(device)
            """,
            lines=(3,),
        ),
    )
    valid = (
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
                for x in xs:
                    cache.to(device)
                    cache.cpu()
                for epoch in range(3):
                    G.cuda()
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        move = as_move(node, scope)
        if move is None or flow.module_by_any_evidence(move.receiver, self.ctx):
            return
        # A bare `g.cuda()` statement only makes sense on a module (a tensor's copy would be
        # discarded, which is TDL306's): leave it to TDL202, which needs module evidence.
        if isinstance(self.ctx.parent(), cst.Expr):
            return
        found = invariant_move(move, self.ctx.ancestors)
        if found is None:
            return
        hoisted = found.hoisted()
        self.report(node, fix=Fix("safe", "Move it once, before the loop", hoisted) if hoisted else None)
