"""TDL201 per-item-transfer-in-loop."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data.item_moves import (
    batched_loop,
    chain_root,
    comprehension_move,
    item_loop,
    matches_layer,
    moved_aliases,
    moves_only,
    per_item_move,
)
from torchdev_lint.analysis.knowledge.devices import Move, as_move
from torchdev_lint.analysis.knowledge.torch_api import JOINS
from torchdev_lint.analysis.syntax.loops import depends_on, loop_bound_names
from torchdev_lint.analysis.syntax.scopes import Scope, resolve
from torchdev_lint.analysis.values import flow
from torchdev_lint.analysis.values.tensor_collections import (
    collection_values,
    host_items_of_one_dtype,
    is_list,
    shapes_differ,
)
from torchdev_lint.rule import Fix, Invalid, Rule, Valid
from torchdev_lint.syntax import comments, keyword, method_call

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

_JOINS = frozenset(f"torch.{name}" for name in JOINS)
# `tuple(x.cuda() for x in xs)`: the comprehension, as a join's sequence.
_SEQUENCES = frozenset({"builtins.tuple", "builtins.list"})
# What may change where a fix is unsafe (the docs' "Fix safety"), by the reason it is unsafe there.
_DEVICE_ITEMS_RISK = (
    "the items are not known to be host tensors: items on several devices (CPU and CUDA, two GPUs) "
    "now make the join raise"
)
_CAST_ITEMS_RISK = (
    "the items are not known to be host tensors of one dtype: items on several devices now make the "
    "join raise, and mixed dtypes are promoted by the join before the move's cast instead of after it"
)
_CONVERTING_MOVE_RISK = (
    "the move's other arguments now apply to the joined batch instead of each item: a memory format "
    "may give other strides"
)
_BATCH_RISK = (
    "the model runs once on the batch: outputs that depend on the other items (batch norm in "
    "training mode) change, and batched kernels may round differently"
)


class PerItemTransferInLoop(Rule):
    code = "TDL201"
    name = "per-item-transfer-in-loop"
    message = (
        "Each item of an in-memory collection is moved to the device separately; "
        "join the items first and move the batch once"
    )
    fix_availability = "sometimes"
    triggers = (".to(", ".cuda(")
    docs = """
        ## What it does
        Flags host-to-device moves of the items of an in-memory collection, one by one, where one
        batched move would do:

        - (a) the moved items are joined afterwards: `torch.stack([x.to(d) for x in xs])`,
          `torch.cat(...)` and the other joins (`vstack`, `hstack`...; the comprehension also inside
          `tuple(...)`), a list comprehension of moved items bound to a name and joined later
          (`ys = [x.cuda() for x in xs]` ... `torch.cat(ys)`), or a list filled by
          `out.append(x.to(d))` (also `x = x.to(d)` then `out.append(x.unsqueeze(0))`) in a
          `for x in xs` loop and then stacked or concatenated after the loop, or a running join
          that grows one tensor by each moved item (`acc = torch.cat((acc, x.to(d)))` in the loop);
        - (b) a `for` loop over a collection (not a data loader or batch iterator) moves each item
          to the device and calls a model on it, one item at a time.

        Batches from a `DataLoader` (or anything named like a loader or batches), tuple-unpacking
        loop targets, dict `.items()`/`.values()`, device-to-host moves, collections whose items
        are known to differ in shape, and moves that make an input match a layer
        (`.to(device=w.device, dtype=w.dtype)`, inside model code whose items already live on a
        device) are not flagged.

        ## Why it matters
        Every host-to-device copy pays a fixed launch and synchronisation cost of several
        microseconds, whatever its size. Thousands of small copies cost far more than one copy of
        the same bytes, and a model called on one item at a time leaves the GPU mostly idle.

        ## Example
        ```python
        batch = torch.stack([img.to(device) for img in images])

        for img in images:
            outputs.append(model(img.to(device)))
        ```

        ## Use instead
        ```python
        batch = torch.stack(images).to(device)

        outputs.extend(model(torch.stack(images).to(device)).unbind(0))
        ```

        ## Fix safety
        (a) The comprehension form `torch.stack([x.to(d) for x in xs])` becomes
        `torch.stack(xs).to(d)` (a comprehension is kept when `xs` is not known to be a list, or
        when it filters), with the same move arguments. Safe only when the items are provably
        host tensors of one dtype (`xs` is a local list or comprehension of `torch.randn/rand/
        zeros/ones/empty` calls without `device=`, all with the same `dtype=`, and given no other
        item: no `xs.append(t)`, `xs[i] = t`, `xs += [t]`, nor a helper it is handed to) and the move
        changes nothing but the device (`.to(d)`, `.cuda()`, `non_blocking=`): then both orders
        give the same tensor on the same device. Otherwise unsafe: a list mixing devices (CPU and
        CUDA, or two GPUs) joins after per-item moves but raises when joined on the host; items of
        several dtypes are promoted by the join before a `.to(d, dtype)` cast instead of after it
        (a double rounding); a memory format may give other strides. A join with `out=` gets no
        fix (the buffer lives on the device). The append form and the two-statement forms
        (`ys = [x.cuda() for x in xs]` then `torch.cat(ys)`) and the running join are reported
        without a fix. (b) Unsafe, and only when the collection
        is a list of same-shape tensors built in the same function and the loop body is exactly
        `results.append(model(item.to(d)))`: the model is called once on the stacked batch and the
        outputs are split back into `results`. A model whose output for an item depends on the
        other items of the batch (batch norm in training mode) gives different results, and a
        batched kernel may round differently. Otherwise no fix is offered. An unsafe fix's message
        says which of these reasons applies at its site.
        """
    invalid = (
        Invalid(
            # Other joins, and a comprehension wrapped in `tuple(...)`.
            """
            import torch

            def gather(frames, device):
                rows = torch.vstack([f.to(device) for f in frames])
                return rows, torch.stack(tuple(f.to(device) for f in frames))
            """,
            lines=(4, 5),
            fixed="""
            import torch

            def gather(frames, device):
                rows = torch.vstack([f for f in frames]).to(device)
                return rows, torch.stack([f for f in frames]).to(device)
            """,
        ),
        Invalid(
            # A comment inside the move goes with it.
            """
            import torch

            def gather(n, device):
                xs = [torch.zeros(3) for _ in range(n)]
                return torch.cat([x.to(  # the GPU
                    device) for x in xs])
            """,
            lines=(5,),
            fixed="""
            import torch

            def gather(n, device):
                xs = [torch.zeros(3) for _ in range(n)]
                return torch.cat(xs).to(  # the GPU
                    device)
            """,
        ),
        Invalid(
            # A comment elsewhere in the comprehension would have nowhere to go: no fix.
            """
            import torch

            def gather(n, device):
                xs = [torch.zeros(3) for _ in range(n)]
                return torch.cat([x.to(device)  # each
                                  for x in xs])
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch

            def to_device(images, device):
                return torch.stack([img.to(device, non_blocking=True) for img in images], dim=0)
            """,
            lines=(4,),
            fixed="""
            import torch

            def to_device(images, device):
                return torch.stack([img for img in images], dim=0).to(device, non_blocking=True)
            """,
        ),
        Invalid(
            """
            import torch

            def gather(n):
                xs = [torch.randn(3) for _ in range(n)]
                a = torch.cat([x.cuda() for x in xs])
                b = torch.stack([x.cuda() for x in xs if x.sum() > 0])
                return a, b
            """,
            lines=(5, 6),
            fixed="""
            import torch

            def gather(n):
                xs = [torch.randn(3) for _ in range(n)]
                a = torch.cat(xs).cuda()
                b = torch.stack([x for x in xs if x.sum() > 0]).cuda()
                return a, b
            """,
        ),
        Invalid(
            """
            import torch

            def gather(xs):
                return torch.stack([x.float().cuda() for x in xs])
            """,
            lines=(4,),
        ),
        Invalid(
            """
            import torch

            def gather(xs, device):
                ys = [x.cuda() for x in xs]
                zs = [x.to(device) for x in xs]
                return torch.cat(ys), torch.cat(ys, dim=1), torch.stack(zs)
            """,
            lines=(4, 5),
        ),
        Invalid(
            """
            import torch

            def frames(clips, device):
                out = []
                for t in clips:
                    t = t.to(device)
                    out.append(t.unsqueeze(0))
                return torch.cat(out)
            """,
            lines=(6,),
        ),
        Invalid(
            """
            import torch

            def gather(n, device):
                xs = [torch.zeros(3, dtype=torch.int64) for _ in range(n)]
                a = torch.stack([x.to(device, torch.float16) for x in xs])
                b = torch.stack([x.to(device, memory_format=torch.contiguous_format) for x in xs])
                c = torch.cat([x.to(device) for x in [torch.ones(2), torch.ones(2, dtype=torch.int64)]])
                return a, b, c
            """,
            lines=(5, 6, 7),
            fixed="""
            import torch

            def gather(n, device):
                xs = [torch.zeros(3, dtype=torch.int64) for _ in range(n)]
                a = torch.stack(xs).to(device, torch.float16)
                b = torch.stack(xs).to(device, memory_format=torch.contiguous_format)
                c = torch.cat([x for x in [torch.ones(2), torch.ones(2, dtype=torch.int64)]]).to(device)
                return a, b, c
            """,
        ),
        Invalid(
            """
            import torch

            def embed(tokens, device):
                out = []
                for t in tokens:
                    out.append(t.to(device))
                return torch.stack(out)
            """,
            lines=(6,),
        ),
        Invalid(
            """
            import torch
            from torch import nn

            def infer(n, device):
                model = nn.Conv2d(3, 8, 3).to(device)
                images = [torch.randn(3, 32, 32) for _ in range(n)]
                results = []
                # one image at a time
                for image in images:
                    # the model's outputs, in order
                    results.append(model(image.to(device)))  # keep the order
                return results
            """,
            lines=(11,),
            fixed="""
            import torch
            from torch import nn

            def infer(n, device):
                model = nn.Conv2d(3, 8, 3).to(device)
                images = [torch.randn(3, 32, 32) for _ in range(n)]
                results = []
                # one image at a time
                # the model's outputs, in order
                results.extend(model(torch.stack(images).to(device)).unbind(0))  # keep the order
                return results
            """,
        ),
        Invalid(
            """
            import torch as T

            def infer(net, n, device):
                images = [T.zeros(1, 3, 8, 8) for _ in range(n)]
                results = []
                for image in images:
                    results.append(net(image.cuda()))
                return results
            """,
            lines=(7,),
            fixed="""
            import torch as T

            def infer(net, n, device):
                images = [T.zeros(1, 3, 8, 8) for _ in range(n)]
                results = []
                results.extend(net(T.cat(images).cuda()).split(1))
                return results
            """,
        ),
        Invalid(
            """
            import torch

            def predict(model, images):
                preds = []
                for img in images:
                    x = img.unsqueeze(0).to("cuda")
                    preds.append(model(x).argmax(1))
                return preds
            """,
            lines=(6,),
        ),
        # A running join grows one tensor by each moved item (quadratic copies on top).
        Invalid(
            """
            import torch

            def spectra(clips, gpu):
                bank = torch.empty(0, 80, device=gpu)
                for clip in clips:
                    bank = torch.concat([bank, clip.mel.to(gpu, non_blocking=True)], dim=0)
                return bank
            """,
            lines=(6,),
        ),
    )
    valid = (
        # Running joins that copy to the host, or grow by what the tensor itself holds: no item crosses.
        Valid(
            """
            import torch

            def harvest(samples, gpu):
                kept = torch.empty(0)
                for sample in samples:
                    kept = torch.concat([kept, sample.logits.cpu()])
                walk = torch.ones(1, device=gpu)
                for sample in samples:
                    walk = torch.cat((walk, walk[-1:].to(gpu)))
                return kept, walk
            """
        ),
        Valid(
            """
            import torch

            def project(self, crops):
                target_device = self.proj.bias.device
                target_dtype = self.proj.bias.dtype
                outputs = []
                for crop in crops:
                    crop = crop.to(device=target_device, dtype=target_dtype)
                    outputs.append(self.proj(crop))
                feats = []
                for crop in crops:
                    feats.append(crop.to(self.proj.weight.device, self.proj.weight.dtype))
                return torch.cat(outputs), torch.cat(feats)
            """
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader as DL

            def train(model, dataset, device):
                loader = DL(dataset, batch_size=32)
                for batch in loader:
                    model(batch.to(device))
                it = iter(loader)
                batch = next(it)
                for x in batch:
                    model(x.to(device))
                for x in train_loader:
                    model(x.to(device))
                outs = torch.cat([b.to(device) for b in batches])
            """
        ),
        Valid(
            """
            import torch

            def evaluate(model, pairs, feats, device):
                for x, y in pairs:
                    model(x.to(device))
                for k, v in feats.items():
                    model(v.to(device))
                for v in feats.values():
                    model(v.to(device))
                return torch.stack([v.to(device) for v in feats.values()])
            """
        ),
        Valid(
            """
            import torch

            def collect(model, outputs, xs):
                host = torch.stack([o.cpu() for o in outputs])
                for o in outputs:
                    model(o.to("cpu"))
                moved = [x.to("cuda") for x in xs]
                first_device = outputs[0].device
                norms = torch.stack([n.to(first_device) for n in outputs])
                other = torch.stack([n.to(outputs[0].device) for n in outputs])
                for x in xs:
                    y = x.to("cuda")
                    print(y.sum())
                return host, moved
            """
        ),
        Valid(
            """
            import torch

            def multiscale(model, sizes, device):
                pyramid = [torch.randn(1, 3, s, s) for s in sizes]
                for level in pyramid:
                    model(level.to(device))
                crops = [torch.randn(1, 3, 32, 32), torch.randn(1, 3, 64, 64)]
                for crop in crops:
                    model(crop.to(device))
            """
        ),
        Valid(
            """
            import torch

            def shard(model, xs, devices):
                parts = torch.stack([x.to(d) for x, d in zip(xs, devices)])
                same = torch.stack([x.to(x.device) for x in xs])
                for d in devices:
                    model(xs.to(d))
                return parts, same
            """
        ),
        Valid(
            """
            import torch

            def train(model, features, n, device):
                for start in range(0, n, 8):
                    x = features[start : start + 8].to(device)
                    model(x)
                    model(features[start].to(device))
                return torch.stack([features[i].cuda() for i in range(n)])
            """
        ),
        Valid(
            """
            import torch

            def sample(unet, scheduler, latents, device, paths, tf):
                for t in scheduler.timesteps:
                    noise = unet(latents, t.to(device))
                    latents = scheduler.step(noise, t, latents).prev_sample
                for p in paths:
                    img = tf(open(p)).unsqueeze(0).to(device)
                    model(img)
                return latents
            """
        ),
        Valid(
            """
            import torch

            def per_step(model, xs, device):
                out = []
                for x in xs:
                    out.append(x.to(device))
                    torch.stack(out)
                return out
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # Appends of moved items, per (function scope, list name), waiting for a join.
        self.appended: dict[tuple[int, str], list[tuple[cst.For, cst.Call]]] = defaultdict(list)
        self.reported: set[cst.Call] = set()  # moves of a named comprehension, reported at the first join

    # (a) comprehension joined: torch.stack([x.to(d) for x in xs])
    def visit_Call(self, node: cst.Call) -> None:
        scope = self.ctx.scope
        name = resolve(node.func, scope)
        if name in _JOINS:
            self._check_join(node, scope)
            return
        self._check_append(node, scope)
        self._check_model_call(node, scope)

    def _check_join(self, node: cst.Call, scope: Scope) -> None:
        if not node.args or node.args[0].keyword is not None or node.args[0].star:
            return
        first = node.args[0].value
        if (
            isinstance(first, cst.Call)
            and resolve(first.func, scope) in _SEQUENCES
            and len(first.args) == 1
            and isinstance(first.args[0].value, (cst.ListComp, cst.GeneratorExp))
        ):
            first = first.args[0].value
        if isinstance(first, cst.Name):
            for loop, appended in self.appended.pop((id(scope.owner), first.value), ()):
                if loop not in self.ctx.ancestors:
                    self.report(appended)
            values = collection_values(first, scope)
            if values is not None and len(values) == 1 and isinstance(values[0], cst.ListComp):
                move = comprehension_move(values[0], scope)
                if move is not None and move.call not in self.reported:
                    self.reported.add(move.call)
                    self.report(move.call)  # `ys = [x.cuda() for x in xs]` ... `torch.cat(ys)`
            return
        if isinstance(first, (cst.List, cst.Tuple)):
            self._check_running_join(node, first, scope)
            return
        if not isinstance(first, (cst.ListComp, cst.GeneratorExp)):
            return
        move = comprehension_move(first, scope)
        if move is not None:
            self.report(move.call, fix=_join_fix(node, first, move, scope))

    # (a) running join: `acc = torch.cat((acc, x.to(d)))` in `for x in xs`
    def _check_running_join(self, node: cst.Call, parts: cst.List | cst.Tuple, scope: Scope) -> None:
        assign = self.ctx.ancestors[-2] if len(self.ctx.ancestors) >= 2 else None
        if not (isinstance(assign, cst.Assign) and assign.value is node and len(assign.targets) == 1):
            return
        grown = assign.targets[0].target
        values = [e.value for e in parts.elements]
        if not (isinstance(grown, cst.Name) and any(grown.deep_equals(v) for v in values)):
            return
        loop = item_loop(self.ctx)
        if loop is None:
            return
        for value in values:
            move = as_move(value, scope) if isinstance(value, cst.Call) else None
            if move is not None and _moves_item(move, loop, scope):
                self.report(move.call)
                return

    # (a) append form: out.append(x.to(d)) in `for x in xs`, then torch.stack(out)
    def _check_append(self, node: cst.Call, scope: Scope) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "append"):
            return
        if not isinstance(func.value, cst.Name) or len(node.args) != 1:
            return
        loop = item_loop(self.ctx)
        if loop is None:
            return
        value = node.args[0].value
        move = as_move(value, scope) if isinstance(value, cst.Call) else None
        if move is None:  # `t = t.to(d)` ... `out.append(t.unsqueeze(0))`
            move = moved_aliases(loop, loop.target.value, scope).get(chain_root(value) or "")  # type: ignore[attr-defined]
        if move is not None and _moves_item(move, loop, scope):
            self.appended[(id(scope.owner), func.value.value)].append((loop, move.call))

    # (b) for item in items: model(item.to(d))
    def _check_model_call(self, node: cst.Call, scope: Scope) -> None:
        # Cheap questions first: an argument that may be a move (a call, or a name bound to one).
        passed = [a.value for a in node.args if type(a.value) is cst.Call or type(a.value) is cst.Name]
        loop = item_loop(self.ctx) if passed else None
        if loop is None or shapes_differ(loop.iter, scope):  # item_loop: over an item collection
            return
        item = loop.target.value  # type: ignore[attr-defined]
        aliases = moved_aliases(loop, item, scope) if any(type(v) is cst.Name for v in passed) else {}
        for arg in node.args:
            value = arg.value
            move = as_move(value, scope) if isinstance(value, cst.Call) else None
            move = aliases.get(value.value) if move is None and isinstance(value, cst.Name) else move
            varying = loop_bound_names(loop) if move is not None else frozenset()  # walks the loop body
            if move is None or not per_item_move(move, item, varying) or matches_layer(move, scope):
                continue
            # Other inputs that change per iteration (`x = model(x, t.to(d))`): a sequential loop.
            others = [a.value for a in node.args if a is not arg]
            if any(depends_on(other, varying) for other in others):
                return
            # Whether the callee is a model is asked last: it may take the function's flow analysis.
            if flow.module_by_any_evidence(node.func, self.ctx):
                self.report(move.call, fix=self._batch_fix(loop, node, move, scope))
            return

    def _batch_fix(self, loop: cst.For, model_call: cst.Call, move: Move, scope: Scope) -> Fix | None:
        """`for x in xs: out.append(model(x.to(d)))` → one model call on the stacked batch."""
        statement = batched_loop(loop, model_call, move, scope, self.ctx.ancestors)
        if statement is None:
            return None
        return Fix("unsafe", "Call the model once on the stacked batch", {loop: statement}, _BATCH_RISK)


def _moves_item(move: Move, loop: cst.For, scope: Scope) -> bool:
    """A move of the loop's item itself to a device the loop does not change (`per_item_move`), not
    one making an input match a layer: what a join after the loop gathers item by item."""
    item = loop.target.value  # type: ignore[attr-defined]
    return per_item_move(move, item, loop_bound_names(loop)) and not matches_layer(move, scope)


def _join_fix(join: cst.Call, comp: cst.ListComp | cst.GeneratorExp, move: Move, scope: Scope) -> Fix | None:
    """`torch.stack([x.to(d) for x in xs])` → `torch.stack(xs).to(d)` (or a bare comprehension)."""
    target = comp.for_in.target
    if not (isinstance(move.receiver, cst.Name) and isinstance(target, cst.Name)):
        return None
    if move.receiver.value != target.value or keyword(join, "out") is not None:
        return None  # `out=` names a device buffer: joining on the host would fail
    items: cst.BaseExpression
    if not comp.for_in.ifs and is_list(comp.for_in.iter, scope):
        items = comp.for_in.iter
    else:
        items = cst.ListComp(elt=move.receiver, for_in=comp.for_in)
    first = join.args[0].with_changes(value=items)
    joined = join.with_changes(args=[first, *join.args[1:]])
    method = move.call.func.attr.value  # type: ignore[attr-defined]
    fixed = method_call(joined, method, tuple(move.call.args)).with_changes(
        whitespace_before_args=move.call.whitespace_before_args
    )
    if comments(fixed) != comments(join):
        return None  # a comment in the comprehension would have nowhere to go
    risk, only = None, moves_only(move)
    if not host_items_of_one_dtype(comp.for_in.iter, scope):
        risk = _DEVICE_ITEMS_RISK if only else _CAST_ITEMS_RISK
    elif not only:
        risk = _CONVERTING_MOVE_RISK
    return Fix.judged("Join the items first, then move the batch once", {join: fixed}, risk)
