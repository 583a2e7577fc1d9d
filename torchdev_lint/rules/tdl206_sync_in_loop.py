"""TDL206 sync-in-loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis import flow
from torchdev_lint.analysis.devices import as_move
from torchdev_lint.analysis.kinds import module_by_syntax_or_name
from torchdev_lint.analysis.loaders import is_loader, moves_to_accelerator
from torchdev_lint.analysis.loops import Loop, calls_in, innermost_loop, is_conditional_in, names_in
from torchdev_lint.analysis.scopes import Scope, dotted_name
from torchdev_lint.analysis.units import remember
from torchdev_lint.analysis.walk import first, visit
from torchdev_lint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# Tensor methods that copy to the host and so wait for the device to finish.
_SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})
_OPTIMIZER_NAME = ("optim", "opt", "scaler")


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
        inference loop iterates a data loader, or calls
        `backward()`, `optimizer.step()` or a model in its body. Only files that move data to an
        accelerator are checked. Reads under an `if` (`if step % 100 == 0:`) and after the loop
        are not flagged, nor reads of tensors the device flow knows are on the CPU, results
        collected in host memory or handed to host-side code (`outs.append(t.cpu())`,
        `decode(p.cpu().numpy())`), and loops where a read decides the control flow (a stop test
        `if token.item() in stop: break`, a value used in an `if`, `while`, `assert` or index):
        such a loop waits every iteration anyway. One finding per loop, at its first read: after
        it the device has nothing left to wait for. Opt-in: logging a loss each step is
        sometimes what you want.

        ## Why it matters
        CUDA runs asynchronously: the host queues kernels and moves on. Reading a value on the host
        forces it to wait until every queued kernel has finished, so the next step cannot be
        queued while the current one runs and the GPU idles between steps.

        ## Example
        ```python
        for x, y in loader:
            loss = criterion(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            total += loss.item()
        ```

        ## Use instead
        ```python
        total = torch.zeros((), device=device)
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            total += loss.detach()
            if step % 100 == 0:
                print(total.item() / (step + 1))
        ```

        ## Fix safety
        No fix: where and how often to read values is a choice about logging, not a rewrite.
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
    )
    valid = (
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
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._reported: set[Loop] = set()

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        if not self._is_sync(node, scope):
            return
        loop = innermost_loop(self.ctx.ancestors)
        if loop is None or is_conditional_in(self.ctx.ancestors, loop) or loop in self._reported:
            return
        if _host_tensor(node, self.ctx) or _kept_on_host(node, self.ctx.ancestors):
            return
        if _copies_out(node) and not any(_trains(call) for call in calls_in(loop)):
            return  # inference: the outputs have to reach the host for post-processing
        if not (self._is_training_loop(loop, scope) and self._uses_accelerator(scope)):
            return
        if _steers(loop, scope):
            return  # the loop must read a value every iteration anyway (a stop test, an index)
        self._reported.add(loop)  # after the first read, the device has nothing left to wait for
        self.report(node)

    def _is_sync(self, node: cst.Call, scope: Scope) -> bool:
        func = node.func
        if self.ctx.qualname(func) == "torch.cuda.synchronize":
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
        if isinstance(loop, cst.For) and is_loader(loop.iter, scope):
            return True
        return any(_trains_or_infers(call, scope) for call in calls_in(loop))

    def _uses_accelerator(self, scope: Scope) -> bool:
        """Does the enclosing function (or module) move anything to a device not known to be the CPU?"""
        owner = scope.owner
        return remember(
            self.ctx,
            "moves to an accelerator",
            owner.node,
            lambda: moves_to_accelerator(owner.node, owner),
        )


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


def _steers(loop: Loop, scope: Scope) -> bool:
    """Does a host read in the loop decide its control flow (`if t.item() in stop: break`,
    `x = t.item()` then `if x == 0:`, an index or a slice bound)? Then every iteration waits
    for the device anyway, and no other read in it costs a further wait."""
    reads: set[str] = set()
    smalls = _SmallStatements()
    visit(loop.body, smalls)
    for statement in smalls.found:
        if isinstance(statement, cst.Assign) and _has_read(statement.value):
            reads.update(t.target.value for t in statement.targets if isinstance(t.target, cst.Name))

    def decides(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.If, cst.While, cst.Assert)):
            test: cst.CSTNode = node.test
        elif isinstance(node, cst.SubscriptElement):
            test = node.slice
        else:
            return False
        return _has_read(test) or bool(names_in(test) & reads)

    return first(loop.body, decides, prune=(cst.FunctionDef,)) is not None


def _has_read(node: cst.CSTNode) -> bool:
    """Does the expression read a value on the host (`.item()`, `.tolist()`)?"""
    return first(node, _is_read) is not None


def _is_read(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call) or node.args:
        return False
    func = node.func
    return isinstance(func, cst.Attribute) and func.attr.value in ("item", "tolist")


class _SmallStatements(cst.CSTVisitor):
    """The small statements of a loop body, in order (nested functions left out)."""

    def __init__(self) -> None:
        self.found: list[cst.BaseSmallStatement] = []

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.found.extend(node.body)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


def _copies_out(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in ("cpu", "numpy")


def _trains(call: cst.Call) -> bool:
    """`loss.backward()` or `optimizer.step()`."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    owner = (dotted_name(func.value) or "").rsplit(".", 1)[-1].lower()
    return func.attr.value == "backward" or (func.attr.value == "step" and owner.startswith(_OPTIMIZER_NAME))
