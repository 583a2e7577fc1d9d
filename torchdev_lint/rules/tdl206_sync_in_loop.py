"""TDL206 sync-in-loop."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.devices import as_move
from torchdev_lint.analysis.kinds import module_or_model_name
from torchdev_lint.analysis.loaders import is_loader
from torchdev_lint.analysis.loops import Loop, calls_in, innermost_loop, is_conditional_in
from torchdev_lint.analysis.scopes import Scope, dotted_name
from torchdev_lint.rule import Invalid, Rule, Valid

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
        `torch.cuda.synchronize()`. A training or inference loop iterates a data loader, or calls
        `backward()`, `optimizer.step()` or a model in its body. Only files that move data to an
        accelerator are checked. Reads under an `if` (`if step % 100 == 0:`) and after the loop
        are not flagged. Opt-in: logging a loss each step is sometimes what you want.

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
                    preds = model(x.to(device)).argmax(1).cpu().numpy()
                return total
            """,
            lines=(9, 10, 11, 12),
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

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._accelerated: dict[int, bool] = {}

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        if not self._is_sync(node, scope):
            return
        loop = innermost_loop(self.ctx.ancestors)
        if loop is None or is_conditional_in(self.ctx.ancestors, loop):
            return
        if self._is_training_loop(loop, scope) and self._uses_accelerator(scope):
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
        if module_or_model_name(receiver, scope):
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
        cached = self._accelerated.get(id(owner.node))
        if cached is None:
            found = False

            class _Moves(cst.CSTVisitor):
                def visit_Call(self, node: cst.Call) -> None:
                    nonlocal found
                    move = as_move(node, owner)
                    found = found or (move is not None and move.to_accelerator)

            owner.node.visit(_Moves())
            cached = self._accelerated[id(owner.node)] = found
        return cached


def _trains_or_infers(call: cst.Call, scope: Scope) -> bool:
    """`loss.backward()`, `optimizer.step()`, or a call of a model."""
    func = call.func
    if isinstance(func, cst.Attribute):
        if func.attr.value == "backward":
            return True
        owner = (dotted_name(func.value) or "").rsplit(".", 1)[-1].lower()
        if func.attr.value == "step" and owner.startswith(_OPTIMIZER_NAME):
            return True
    return module_or_model_name(func, scope)


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
            if (move is not None and move.to_accelerator) or module_or_model_name(value.func, scope):
                names.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
    return names
