"""TDL202 module-transfer-in-loop."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.data.invariant_moves import invariant_move, runs_at_least_once
from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.values import flow
from torchdev_lint.rule import Fix, Invalid, Rule, Valid

# What may change where the fix is unsafe (the docs' "Fix safety"), by the reason it is unsafe there.
_ZERO_TIMES_RISK = (
    "the loop may run zero times: the module is then moved to the device (or the move raises on a "
    "machine without one) where before it stayed put"
)
_LEAVES_EARLY_RISK = (
    "an iteration may leave before the move (`break`, `continue`, `return`, `raise`, `yield`, a failing `assert`, `sys.exit`): the "
    "module is then moved to the device where before it may have stayed put"
)
_HANDED_ON_RISK = (
    "the module is handed to a call in the loop that may move it elsewhere (`offload(model)`, or a "
    "holder of it is moved: `export.cpu()`), or the loop switches the current GPU: the move no longer "
    "brings it back on every iteration"
)


class ModuleTransferInLoop(Rule):
    code = "TDL202"
    name = "module-transfer-in-loop"
    message = "A module that the loop never changes is moved to the device on every iteration; move it once, before the loop"
    fix_availability = "sometimes"
    triggers = (".to(", ".cuda(")
    docs = """
        ## What it does
        Flags `model.to(device)` / `model.cuda()` inside a loop body when the module is the same
        on every iteration (not rebuilt or reassigned in the loop) and the target device does not
        depend on the loop (a per-device loop `for d in devices: model.to(d)` is not flagged).
        Not flagged either when the loop may change the module: it rebinds or relocates it (also
        through a name bound before the loop to a part of it, `encoder = model.encoder`), assigns
        one of its attributes or its tensors' (`model.head = nn.Linear(...)`, `p.data = ...` for
        `p` in `model.parameters()`), or
        calls a method on it or on a submodule got from it (`model.encoder`,
        `for m in model.modules()`, `model.get_submodule(...)`) other than running, reading it
        or setting its mode (`forward`, `eval`, `train`, `zero_grad`, `parameters`,
        `modules`, `children`, `state_dict`...): `m.adaptation(task)` may add parameters that
        the next move must place. A submodule called by attribute (`model.encoder(x)`) counts
        as such a method call: the rule cannot tell it from one.

        ## Why it matters
        `Module.to` walks every parameter and buffer on each call. Even when they are already on
        the device and nothing is copied, this costs Python time per tensor on every step; when
        the module was moved elsewhere in between, it re-copies every weight each iteration.

        ## Example
        ```python
        for x, y in loader:
            model.to(device)
            loss = criterion(model(x.to(device)), y.to(device))
        ```

        ## Use instead
        ```python
        model.to(device)
        for x, y in loader:
            loss = criterion(model(x.to(device)), y.to(device))
        ```

        ## Fix safety
        The move statement is hoisted before the loop (with the comments above and beside it),
        only when it is a statement of its own directly in the loop body, runs on every
        iteration, nothing in the loop rebinds or relocates the module, and nothing earlier in the
        loop body uses it. Moving a module twice to the same device is a no-op, so the loop sees
        the module where it saw it before.

        Safe only when the loop provably runs at least once (`while True`, `range` of integer
        literals that is not empty, a non-empty list or tuple display), nothing earlier in the
        loop body can leave the iteration (`break`, `continue`, `return`, `raise`, `yield`, a failing `assert`, `sys.exit`), and
        the module is not handed to any call in the loop (a helper such as `offload(model)` may
        move it back), no holder of it is moved there (`export = nn.Sequential(model)` ...
        `export.cpu()`), and the loop keeps the current GPU that `.cuda()` means (no
        `torch.cuda.set_device`). Otherwise the fix is unsafe: over a loop that runs zero times, the module
        would end up on the device (or the move would raise on a machine without one) where before
        it stayed put (so too where an iteration leaves before the move), and a helper that moves
        the module elsewhere each iteration would no longer be undone. An unsafe fix's message
        says which of these applies at its site.
        """
    invalid = (
        Invalid(
            """
            import torch
            from torch import nn

            def train(loader, device, epochs):
                model = nn.Linear(4, 2)
                # training
                for epoch in range(epochs):
                    # the weights on the device
                    model.to(device)  # every epoch
                    for x, y in loader:
                        model(x.to(device))
            """,
            lines=(9,),
            fixed="""
            import torch
            from torch import nn

            def train(loader, device, epochs):
                model = nn.Linear(4, 2)
                # the weights on the device
                model.to(device)  # every epoch
                # training
                for epoch in range(epochs):
                    for x, y in loader:
                        model(x.to(device))
            """,
        ),
        Invalid(
            """
            from torch import nn

            def warm_up(device):
                model = nn.Linear(4, 2)

                for step in range(3):
                    model.to(device)
                    model.zero_grad()
                return model
            """,
            lines=(7,),
            fixed="""
            from torch import nn

            def warm_up(device):
                model = nn.Linear(4, 2)

                model.to(device)
                for step in range(3):
                    model.zero_grad()
                return model
            """,
        ),
        Invalid(
            """
            def evaluate(self, batches):
                for batch in batches:
                    for x in batch:
                        self.model = self.model.cuda()
                        yield self.model(x)
            """,
            lines=(4,),
            fixed="""
            def evaluate(self, batches):
                self.model = self.model.cuda()
                for batch in batches:
                    for x in batch:
                        yield self.model(x)
            """,
        ),
        Invalid(
            """
            def run(net, xs, device):
                for x in xs:
                    y = net(x)
                    net.to(device)
                for x in xs:
                    out = net.cuda()(x)
            """,
            lines=(4, 6),
        ),
        Invalid(
            """
            from torch import nn

            def fit(xs, device):
                criterion = nn.BCELoss()
                loss_fn = criterion  # a module only the device flow can see through
                for x in xs:
                    loss_fn.to(device)
                    x.sum()
            """,
            lines=(7,),
            fixed="""
            from torch import nn

            def fit(xs, device):
                criterion = nn.BCELoss()
                loss_fn = criterion  # a module only the device flow can see through
                loss_fn.to(device)
                for x in xs:
                    x.sum()
            """,
        ),
        Invalid(
            # Submodules only read or put in a mode: the module is the same on every iteration.
            """
            from torch import nn

            def evaluate(model, experiences, device):
                for experience in experiences:
                    for module in model.modules():
                        if isinstance(module, nn.BatchNorm2d):
                            module.eval()
                    model = model.to(device)
                    model.zero_grad()
                    print(sum(p.numel() for p in model.parameters()), model.state_dict().keys())
            """,
            lines=(8,),
        ),
    )
    valid = (
        Valid(
            # The loop gives the module a new part (a head per task, a fresh bias), before or
            # after the move: the next move must place it, so hoisting would leave it behind.
            """
            import torch
            from torch import nn

            def few_shot(backbone, episodes, device):
                for episode in episodes:
                    backbone.classifier = nn.Linear(64, episode.ways)
                    backbone.to(device)
                for episode in episodes:
                    backbone.cuda()
                    backbone.norm.bias = nn.Parameter(torch.zeros(64))

            def sample(model, prompts, device):
                encoder = model.encoder if hasattr(model, "encoder") else model
                for prompt in prompts:
                    model.to(device)
                    model(prompt.to(device))
                    encoder.cpu()  # a part of the module sent back between calls
                for prompt in prompts:
                    model.to(device)
                    model(prompt.to(device))
                    for weight in model.parameters():
                        weight.data = weight.data.cpu()
            """
        ),
        Valid(
            # The loop grows the module (new heads, new units) before each move.
            """
            def adapt(model, experiences, device):
                for experience in experiences:
                    for module in model.modules():
                        if isinstance(module, DynamicHead):
                            module.adaptation(experience)
                    model = model.to(device)
                for task in experiences:
                    model.classifier.grow(task.n_classes)
                    model.to(device)
                for path in experiences:
                    model.load_state_dict(torch.load(path))
                    model.cuda()
                return model
            """
        ),
        Valid(
            """
            from torch import nn

            def replicas(devices, xs):
                model = nn.Linear(4, 2)
                for d in devices:
                    model.to(d)
                for i, x in enumerate(xs):
                    model.to(f"cuda:{i}")
                    model.to(x.device)
            """
        ),
        Valid(
            """
            from torch import nn

            def search(configs, device):
                for cfg in configs:
                    model = nn.Linear(cfg.n, 2)
                    model.to(device)
                for cfg in configs:
                    model = build(cfg)
                    model.cuda()
            """
        ),
        Valid(
            """
            def offload(model, xs, device):
                for x in xs:
                    model.to(device)
                    model(x)
                    model.cpu()
                for x in xs:
                    if x is None:
                        model.to(device)
                model.to(device)
                for x in xs:
                    x.to(device)
                for x in xs:
                    model.to(torch.float16)
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        move = as_move(node, scope)
        if move is None:
            return
        # Whether the receiver is a module is asked last: it may take the function's flow analysis,
        # and most moves are not repeated by a loop.
        found = invariant_move(move, self.ctx.ancestors, scope, tensor=False)
        if found is None or not flow.module_by_any_evidence(move.receiver, self.ctx):
            return
        hoisted = found.hoisted()
        risk = None
        if not found.always_runs:
            risk = _LEAVES_EARLY_RISK if runs_at_least_once(found.loop) else _ZERO_TIMES_RISK
        elif found.handed_on:
            risk = _HANDED_ON_RISK
        fix = Fix.judged("Move the module once, before the loop", hoisted, risk) if hoisted else None
        self.report(node, fix=fix)
