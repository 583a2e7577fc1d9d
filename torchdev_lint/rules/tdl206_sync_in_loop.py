"""TDL206 sync-in-loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.context.guards import BENCHMARK_WORDS, name_words
from torchdev_lint.analysis.data.every_iteration import runs_every_time, steered, value_read
from torchdev_lint.analysis.data.host_reads import HostRead, call_read
from torchdev_lint.analysis.data.loaders import is_loader, moves_to_accelerator
from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.syntax.loops import Loop, calls_in, innermost_loop, iteration_calls, path_inside
from torchdev_lint.analysis.syntax.scopes import Scope, dotted_name
from torchdev_lint.analysis.syntax.units import remember
from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.kinds import module_by_syntax_or_name
from torchdev_lint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# Tensor methods that copy to the host and so wait for the device to finish.
_SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})
_OPTIMIZER_NAME = ("optim", "opt", "scaler")
_SYNCHRONIZE = "torch.cuda.synchronize"
_SYNC_ADVICE = "synchronize only when you measure, every N steps or after the loop"
_SYNC_MESSAGE = f"This waits for the device on every iteration of the training loop; {_SYNC_ADVICE}"
# Names of functions whose loops time the device: their synchronize is the measurement.
_MEASURE_WORDS = BENCHMARK_WORDS | {
    "profile",
    "profiler",
    "profiling",
    "timing",
    "timeit",
    "latency",
    "throughput",
}


class SyncInLoop(Rule):
    code = "TDL206"
    name = "sync-in-loop"
    message = (
        "This waits for the device on every iteration of the training loop; "
        "accumulate on the device and read the value every N steps or after the loop"
    )
    default_enabled = False
    triggers = (".item(", ".cpu(", ".numpy(", ".tolist(", "print(", "synchronize(")
    docs = """
        ## What it does
        Flags host reads of device tensors on every iteration of a training or inference loop:
        `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `print(t)` of a tensor the loop computes, and
        `torch.cuda.synchronize()` (`.cpu()`/`.numpy()` only in loops that call `backward()` or
        `optimizer.step()`: an inference loop has to bring its outputs to the host). A training or
        inference loop iterates a data loader, or calls `backward()`, `optimizer.step()` or a
        model in its own body (not only in an inner loop: a read once per epoch is fine). Only files that move data to an
        accelerator are checked. Reads under an `if` (`if step % 100 == 0:`) and after the loop
        are not flagged, nor reads of tensors the device flow knows are on the CPU, results
        collected in host memory or handed to host-side code (`outs.append(t.cpu())`,
        `decode(p.cpu().numpy())`), and loops where a read decides the control flow (a stop test
        `if token.item() in stop: break`, a value used in an `if`, `while`, `assert` or index):
        such a loop waits every iteration anyway. One finding per loop, at its first read: after
        it the device has nothing left to wait for. Opt-in: logging a loss each step is
        sometimes what you want.

        An `if` whose test says that CUDA is there (`if torch.cuda.is_available():`,
        `if use_cuda:`, `if x.is_cuda:`) is taken on every iteration on a GPU, so a read under it
        is flagged like one outside it; `if torch.cuda.is_available() and step % 50 == 0:` is not
        taken every iteration and stays silent. `torch.cuda.synchronize()` is flagged even in a
        loop whose control flow depends on a read: `if loss.item() > limit: break` waits only for
        the forward pass that computed `loss`, the synchronize for the backward pass and the
        optimizer step as well.

        A call in the loop of a function of the same file that reads on every call counts as a
        read, and the finding is at that call, with the message naming the function and the
        read: `step_loss(...)` returning `loss.item()`, `self.record(loss)` appending
        `loss.item()`, `model(x)` whose class's `forward` reads `count.item()` for each sample
        (the model built from a class of the file in the same function, or in `self.model = ...`),
        `stopwatch()` calling `torch.cuda.synchronize()` under `if torch.cuda.is_available():`.
        The finding is at the call because the loop is what makes the read cost every step:
        the same function called after the loop or once per epoch is fine, and a
        `# noqa: TDL206` on the call silences that loop only, not the function's other callers.
        Reads in the function under an `if` (`if step % 50 == 0:`), of host data (NumPy), or
        that decide the function's own control flow do not count, and a loop whose `if` tests
        what such a function returns (`if batch_loss(...) > limit: break`) waits anyway. A
        synchronize in a function named for measuring (`benchmark_forward`, `profile`,
        `measure_latency`) is what it is for, and is not flagged. A
        function of another file, or called through a parameter whose class is not known, is not
        followed: unknown stays silent.

        ## Why it matters
        CUDA runs asynchronously: the host queues kernels and moves on. Reading a value on the host
        forces it to wait until every queued kernel has finished, so the next step cannot be
        queued while the current one runs and the GPU idles between steps. A read hidden in a
        helper costs the same as one written in the loop.

        ## Example
        ```python
        def step_loss(model, x, y):
            loss = criterion(model(x), y)
            loss.backward()
            return loss.item()

        for x, y in loader:
            losses.append(step_loss(model, x.to(device), y.to(device)))
            optimizer.step()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        ```

        ## Use instead
        ```python
        def step_loss(model, x, y):
            loss = criterion(model(x), y)
            loss.backward()
            return loss.detach()

        total = torch.zeros((), device=device)
        for step, (x, y) in enumerate(loader):
            total += step_loss(model, x.to(device), y.to(device))
            optimizer.step()
            if step % 100 == 0:
                print(total.item() / (step + 1))
        ```

        ## Fix safety
        No fix: where and how often to read values is a choice about logging, not a rewrite;
        a read inside a helper may be what its other callers need.
        """
    invalid = (
        Invalid(
            """
            import torch

            def train(model, loader, optimizer, device):
                total = 0.0
                for x, y in loader:
                    loss = model(x.to(device)).sum()
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                    print(loss)
                    torch.cuda.synchronize()
                for x, y in loader:
                    torch.cuda.synchronize()
                    loss = model(x.to(device)).sum()
                return total
            """,
            lines=(9, 13),
        ),
        Invalid(
            """
            def predict(net, images):
                out = []
                for img in images:
                    out.append(net(img.cuda()).tolist())
                return out
            """,
            lines=(4,),
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            def fit(net, batches, opt, device, limit):
                for xb, yb in batches:
                    loss = F.mse_loss(net(xb.to(device)), yb.to(device))
                    if loss.item() > limit:
                        break
                    loss.backward()
                    opt.step()
                    torch.cuda.synchronize()

            def fit_epoch(encoder, feed, sgd, dev):
                for src, tgt in feed:
                    err = encoder(src.to(dev)).sub(tgt.to(dev)).pow(2).mean()
                    err.backward()
                    sgd.step()
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
            """,
            lines=(11, 19),
        ),
        Invalid(
            """
            import time
            import torch
            import torch.nn.functional as F

            def step_loss(net, xb, yb):
                loss = F.cross_entropy(net(xb), yb)
                loss.backward()
                return loss.item()

            def stopwatch():
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                return time.perf_counter()

            def run(net, loader, opt, device):
                curve = []
                for xb, yb in loader:
                    opt.zero_grad()
                    curve.append(step_loss(net, xb.to(device), yb.to(device)))
                    opt.step()
                for xb, yb in loader:
                    began = stopwatch()
                    net(xb.to(device)).sum().backward()
                    opt.step()
                    print(stopwatch() - began)
                return curve
            """,
            lines=(19, 22),
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Pooler(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.head = nn.Linear(width, 2)

                def forward(self, feats, counts):
                    pooled = []
                    for row, count in zip(feats, counts):
                        pooled.append(row[: int(count.item())].mean(0))
                    return self.head(torch.stack(pooled))

            class Runner:
                def __init__(self, width, optimizer, device):
                    self.pooler = Pooler(width).to(device)
                    self.optimizer, self.device, self.seen = optimizer, device, []

                def record(self, loss):
                    self.seen.append(loss.item())

                def epoch(self, loader):
                    for feats, counts, target in loader:
                        out = self.pooler(feats.to(self.device), counts.to(self.device))
                        loss = (out - target.to(self.device)).abs().mean()
                        loss.backward()
                        self.optimizer.step()
                    for feats, counts, target in loader:
                        loss = self.pooler.head(feats.to(self.device)).sum()
                        loss.backward()
                        self.optimizer.step()
                        self.record(loss)
            """,
            lines=(25, 33),
        ),
    )
    valid = (
        Valid(
            # Once per epoch: the epoch loop's own iteration trains nothing (its inner loop does).
            """
            import torch

            def fit(model, loader, optimizer, epochs, device):
                model.to(device)
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = model(x.to(device), y.to(device))
                        loss.backward()
                        optimizer.step()
                    print(f"epoch {epoch}: {loss.item():.3f}")
                    keep({name: t.cpu() for name, t in model.state_dict().items()})
            """
        ),
        Valid(
            """
            import torch

            def generate(model, token, device, stop_tokens, steps):
                tokens = []
                for _ in range(steps):
                    token = model(token.to(device)).argmax(-1)
                    if token.item() in stop_tokens:
                        break
                    tokens.append(token.item())
                for batch in batches:
                    logits = model(batch.to(device))
                    position = logits.argmax().item()
                    if position == 0:
                        continue

            def evaluate(model, loader, device):
                feats, sigmas = [], torch.linspace(1, 0, 10)
                for x in loader:
                    out = model(x.to(device))
                    # kept in host memory: device memory would run out
                    feats.append(out.cpu())
                    sigma = float(sigmas[0].item())
                return feats
            """
        ),
        Valid(
            """
            import torch

            def train(model, loader, optimizer, device):
                for step, (x, y) in enumerate(loader):
                    loss = model(x.to(device)).sum()
                    loss.backward()
                    optimizer.step()
                    if step % 100 == 0:
                        print(loss.item())
                print(loss.item())
                torch.cuda.synchronize()
            """
        ),
        Valid(
            """
            def train(model, loader, optimizer):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    print(loss.item())
            """
        ),
        Valid(
            """
            def report(results, device):
                x = results.to(device)
                for r in results:
                    print(r.item())
                    print(r)
                for epoch in range(10):
                    train_one_epoch()
                    print(evaluate().item())
            """
        ),
        Valid(
            """
            def train(model, loader, device):
                for x, y in loader:
                    model.cpu()
                    print("step")
                    print(x.shape)
                    model(x.to(device))
            """
        ),
        Valid(
            """
            import numpy as np
            import torch

            def mean_loss(losses):
                return torch.stack(losses).mean().item()

            def maybe_log(step, loss, every):
                if step % every == 0:
                    print(step, loss.item())

            def as_list(values):
                return np.asarray(values).tolist()

            def batch_loss(model, x, y):
                loss = (model(x) - y).square().mean()
                loss.backward()
                return loss.item()

            def train(model, loader, optimizer, device, limit):
                kept = []
                for step, (x, y) in enumerate(loader):
                    loss = model(x.to(device)).sub(y.to(device)).abs().mean()
                    loss.backward()
                    optimizer.step()
                    kept.append(loss.detach())
                    maybe_log(step, loss, 100)
                    as_list([step])
                    if step % 50 == 0:
                        torch.cuda.synchronize()
                    if torch.cuda.is_available() and step % 50 == 0:
                        torch.cuda.synchronize()
                for x, y in loader:
                    if batch_loss(model, x.to(device), y.to(device)) > limit:
                        break
                    optimizer.step()
                return mean_loss(kept)

            def benchmark_forward(model, batch, device, repeats):
                for _ in range(repeats):
                    model(batch.to(device))
                    torch.cuda.synchronize()
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._reported: set[Loop] = set()

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        direct = self._is_sync(node, scope)
        if not direct and not isinstance(node.func, (cst.Name, cst.Attribute)):
            return
        loop = innermost_loop(self.ctx.ancestors)
        if loop is None or loop in self._reported:
            return
        if not runs_every_time(path_inside(self.ctx.ancestors, loop), scope, per_item=False):
            return
        if direct and (_host_tensor(node, self.ctx) or _kept_on_host(node, self.ctx.ancestors)):
            return
        trains = remember(
            self.ctx, "TDL206 trains", loop, lambda: any(_trains(call) for call in calls_in(loop))
        )
        if direct and _copies_out(node) and not trains:
            return  # inference: the outputs have to reach the host for post-processing
        if not (self._is_training_loop(loop, scope) and self._uses_accelerator(scope)):
            return
        message = None
        if direct:
            waits_only = self.ctx.qualname(node.func) == _SYNCHRONIZE
            message = _SYNC_MESSAGE if waits_only else None
        else:
            read = call_read(node, scope, self.ctx, copies=trains)
            if read is None:
                return
            waits_only = read.waits_only
            message = _helper_message(read)
        if not waits_only and self._steers(loop, scope):
            return  # the loop must read a value every iteration anyway (a stop test, an index)
        if waits_only and _measures(scope):
            return  # timing the device is what a benchmark's synchronize is for
        self._reported.add(loop)  # after the first read, the device has nothing left to wait for
        self.report(node, message)

    def _is_sync(self, node: cst.Call, scope: Scope) -> bool:
        func = node.func
        if self.ctx.qualname(func) == _SYNCHRONIZE:
            return True
        if self.ctx.qualname(func) == "builtins.print":
            loop = innermost_loop(self.ctx.ancestors)
            return loop is not None and any(
                isinstance(arg.value, cst.Name) and arg.value.value in _loop_tensors(loop, scope)
                for arg in node.args
            )
        if not isinstance(func, cst.Attribute) or func.attr.value not in _SYNC_METHODS or node.args:
            return False
        receiver = func.value
        if module_by_syntax_or_name(receiver, scope):
            return False
        # Report a chain once, at its first host read: `x.cpu().numpy()` is one sync.
        while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
            if receiver.func.attr.value in _SYNC_METHODS:
                return False
            receiver = receiver.func.value
        return True

    def _is_training_loop(self, loop: Loop, scope: Scope) -> bool:
        """Does the loop iterate a loader, or train or infer? (Asked once per loop, in the scope of
        the first read found in it.)"""
        return remember(
            self.ctx,
            "TDL206 training loop",
            loop,
            lambda: (
                (isinstance(loop, cst.For) and is_loader(loop.iter, scope))
                or any(_trains_or_infers(call, scope) for call in iteration_calls(loop))
            ),
        )

    def _uses_accelerator(self, scope: Scope) -> bool:
        """Does the enclosing function (or module) move anything to a device not known to be the CPU?"""
        owner = scope.owner
        return remember(
            self.ctx,
            "moves to an accelerator",
            owner.node,
            lambda: moves_to_accelerator(owner.node, owner),
        )

    def _steers(self, loop: Loop, scope: Scope) -> bool:
        """Does a host read in the loop decide its control flow (`if t.item() in stop: break`,
        `x = t.item()` then `if x == 0:`, an index or a slice bound, also through a helper that
        returns a read: `if batch_loss(...) > limit:`)? Then every iteration waits for the
        device anyway, and no other read of a value costs a further wait."""

        def is_read(node: cst.CSTNode) -> bool:
            if value_read(node):
                return True
            if not isinstance(node, cst.Call):
                return False
            read = call_read(node, scope, self.ctx, copies=False)
            return read is not None and not read.waits_only

        return remember(self.ctx, "TDL206 steered", loop, lambda: steered(loop.body, is_read))


def _measures(scope: Scope) -> bool:
    """Is the code in a function or class that says it measures (`benchmark_forward`, `profile`)?"""
    current: Scope | None = scope
    while current is not None:
        node = current.node
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and _MEASURE_WORDS & name_words(node.name.value):
            return True
        current = current.parent
    return False


def _helper_message(read: HostRead) -> str:
    where = f"`{read.function}` calls `{read.text}`" + (" for each item of a loop" if read.per_item else "")
    then = (
        _SYNC_ADVICE
        if read.waits_only
        else "return tensors, accumulate them on the device and read the value every N steps or after the loop"
    )
    return f"This call waits for the device on every iteration of the training loop ({where}); {then}"


def _trains_or_infers(call: cst.Call, scope: Scope) -> bool:
    """`loss.backward()`, `optimizer.step()`, or a call of a model."""
    func = call.func
    if isinstance(func, cst.Attribute):
        if func.attr.value == "backward":
            return True
        owner = (dotted_name(func.value) or "").rsplit(".", 1)[-1].lower()
        if func.attr.value == "step" and owner.startswith(_OPTIMIZER_NAME):
            return True
    return module_by_syntax_or_name(func, scope)


def _loop_tensors(loop: Loop, scope: Scope) -> set[str]:
    """Names the loop binds to tensors it computes: model outputs, moved values, losses."""
    names: set[str] = set()
    for call in calls_in(loop):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward":
            key = dotted_name(call.func.value)
            if key is not None:
                names.add(key)
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    for statement in body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not (isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)):
                continue
            value = small.value
            move = as_move(value, scope)
            if (move is not None and move.to_accelerator) or module_by_syntax_or_name(value.func, scope):
                names.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
    return names


def _host_tensor(call: cst.Call, ctx: FileContext) -> bool:
    """`.item()`/`.tolist()`/... of a tensor the device flow knows is on the CPU: no sync."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    device = flow.device_of(func.value, ctx)
    return device is not None and device.type == "cpu"


def _kept_on_host(call: cst.Call, ancestors: Sequence[cst.CSTNode]) -> bool:
    """`outs.append(t.cpu())`: results deliberately collected in host memory (to spare device
    memory), or handed on to host-side post-processing, not a value read for logging."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value in ("cpu", "numpy")):
        return False
    parent = ancestors[-2] if len(ancestors) >= 2 else None
    holder = ancestors[-3] if len(ancestors) >= 3 else None
    return isinstance(parent, cst.Arg) and isinstance(holder, cst.Call)


def _copies_out(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in ("cpu", "numpy")


def _trains(call: cst.Call) -> bool:
    """`loss.backward()` or `optimizer.step()`."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    owner = (dotted_name(func.value) or "").rsplit(".", 1)[-1].lower()
    return func.attr.value == "backward" or (func.attr.value == "step" and owner.startswith(_OPTIMIZER_NAME))
