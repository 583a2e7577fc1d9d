"""TDL308 data-parallel."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.analysis.context.guards import instance_guarded
from torchdev_lint.analysis.context.parallel_choice import (
    data_parallel_backend,
    distributed_alternative,
    option_alternative,
    unwrapped_after_loading,
    warned_against,
)
from torchdev_lint.analysis.knowledge.torch_api import DATA_PARALLEL_CLASSES
from torchdev_lint.rule import Invalid, Rule, Valid


class DataParallel(Rule):
    code = "TDL308"
    name = "data-parallel"
    message = (
        "`nn.DataParallel` is single-process multi-threaded and slower than "
        "`DistributedDataParallel`; use DDP (one process per GPU) instead"
    )
    triggers = ("DataParallel",)
    docs = """
        ## What it does
        Flags constructions of `torch.nn.DataParallel` (also spelled
        `torch.nn.parallel.DataParallel`), however the name is imported.

        Not flagged where DataParallel is the fallback branch of the decision that picks the
        recommended path: the other branch of the same `if`/`elif`/`else` chain, conditional
        expression or `match`, in the same function, wraps the model in
        `DistributedDataParallel`, FSDP (`FullyShardedDataParallel`, `fully_shard`) or a helper
        whose name says DDP/FSDP (`wrap_ddp`, `smart_DDP`). A DDP anywhere else (in another
        function, at module level, in a separate `if` next to it, in the test of the `if`) is
        no such decision, and the DataParallel is flagged, unless the two `if`s test one option
        for two values (`if cfg.parallel == "dp":` holds the DataParallel, `if cfg.parallel ==
        "ddp":` the DDP, in any function of the file): the branches of one decision, the option's
        value. A DataParallel next to which the
        program itself prints, warns or logs that DataParallel is not recommended (deprecated,
        discouraged, slower) is always flagged: the program says the choice is wrong.

        Not flagged either inside a class that implements a DataParallel backend or strategy
        (its name says `DataParallel` or `DP`; a `DDP`/`FSDP` name does not count), and where
        the code runs only once the model is already a DataParallel: in the body of
        `if isinstance(model, nn.DataParallel):` (statement or conditional expression; also a
        tuple of classes holding it, or the `else` of `if not isinstance(...)`), re-wrapping its
        parts (`nn.DataParallel(model.module.wide)`) follows the first wrap, which is reported
        where the choice is made. The `else` of such a test and the body of
        `if not isinstance(...)` are still flagged. Nor is a wrap that only loads a checkpoint saved
        from a DataParallel (its keys start with `module.`) and is unwrapped right after in the same
        function (`net = nn.DataParallel(net)`, `net.load_state_dict(state)`, `net = net.module`, with no
        other use of `net` in between): it never runs a forward pass.

        Earlier versions silenced every DataParallel of a file that mentioned DDP or FSDP anywhere
        (a `smart_DDP` import, a class named `DDP...`); now only the decision itself counts.

        ## Why it matters
        `DataParallel` runs one Python process that scatters each batch over the GPUs, replicates
        the model on every forward pass and gathers outputs on GPU 0. The GIL, the replication and
        the unbalanced memory on the first GPU make it slower than `DistributedDataParallel` even
        on a single machine; PyTorch's documentation recommends DDP for all multi-GPU training.
        It also hard-wires CUDA: it does nothing useful on MPS, XPU or CPU. A DDP path elsewhere
        in the file does not make a DataParallel wrap better: the program takes it whenever it
        is not launched with `torchrun`, usually on the machines with the most GPUs.

        ## Example
        ```python
        def spread(model, rank):
            if rank == -1 and torch.cuda.device_count() > 1:
                print("DataParallel not recommended, use torchrun")
                model = nn.DataParallel(model)  # flagged: a separate decision, and warned against
            if rank != -1:
                model = DistributedDataParallel(model, device_ids=[rank])
            return model
        ```

        ## Use instead
        ```python
        # launched with `torchrun --nproc-per-node=NUM_GPUS train.py`
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])
        ```
        Where a single-process fallback must stay, make it the other branch of the decision
        that picks DDP: `model = DDP(model) if distributed else nn.DataParallel(model)`.

        ## Fix safety
        No fix: moving to DDP changes how the program is launched (one process per GPU), how data
        is sharded (`DistributedSampler`) and how checkpoints and logs are written.
        """
    invalid = (
        # The wrapper runs a forward pass before it is unwrapped: it does spread the batch.
        Invalid(
            """
            import torch
            from torch import nn

            def score_then_unwrap(ranker, weights_path, queries):
                ranker = nn.DataParallel(ranker)
                ranker.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True))
                scores = ranker(queries)
                ranker = ranker.module
                return scores
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch
            model = torch.nn.DataParallel(net)
            """,
            lines=(2,),
        ),
        Invalid(
            """
            from torch import nn
            from torch.nn.parallel import DataParallel as DP
            from torch.nn.parallel.data_parallel import DataParallel

            a = nn.DataParallel(net, device_ids=[0, 1])
            b = DP(net)
            c = DataParallel(net)
            """,
            lines=(5, 6, 7),
        ),
        Invalid(
            # Only the body of an `isinstance(..., DataParallel)` test follows an earlier wrap.
            """
            import torch
            from torch import nn

            def fine_tune(self):
                if isinstance(self.model, torch.nn.DataParallel):
                    self.model = self.model.module
                else:
                    wide = nn.DataParallel(self.model.wide)
                if not isinstance(self.model, nn.DataParallel):
                    self.model = nn.DataParallel(self.model)
                if isinstance(self.model, nn.Module):
                    head = nn.DataParallel(self.model.head)
            """,
            lines=(8, 10, 12),
        ),
        Invalid(
            # DDP in another function is no decision between the two.
            """
            import torch.nn as nn
            from torch.nn.parallel import DistributedDataParallel

            def wrap_for_cluster(encoder, rank):
                return DistributedDataParallel(encoder, device_ids=[rank])

            def wrap_for_workstation(encoder):
                return nn.DataParallel(encoder)
            """,
            lines=(8,),
        ),
        Invalid(
            # DDP at module level; the helper's DataParallel is unconditional.
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            ranked = DDP(backbone) if torch.distributed.is_initialized() else backbone

            def replicate_heads(heads):
                return torch.nn.DataParallel(heads)
            """,
            lines=(7,),
        ),
        Invalid(
            # A separate `if` from the DDP one, and the program warns against its own wrap.
            """
            import warnings
            from torch import nn

            def spread(decoder, local_rank, gpus):
                if local_rank < 0 and gpus > 1:
                    warnings.warn("nn.DataParallel is not recommended here; launch with torchrun for DDP")
                    decoder = nn.DataParallel(decoder)
                if local_rank >= 0:
                    decoder = nn.parallel.DistributedDataParallel(decoder, device_ids=[local_rank])
                return decoder
            """,
            lines=(7,),
        ),
        Invalid(
            # The fallback branch, but the program itself says DataParallel is the wrong choice.
            """
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel

            def place(policy, launched_with_torchrun, log):
                if launched_with_torchrun:
                    policy = DistributedDataParallel(policy)
                else:
                    log.warning("[place] DP mode " "is slower than DDP and not recommended")
                    policy = nn.DataParallel(policy)
                return policy
            """,
            lines=(9,),
        ),
        Invalid(
            # A DDP call in the test picks nothing; a class named after DDP is no DP backend.
            """
            from torch.nn import DataParallel

            class DDPLauncher:
                def single_node(self, critic, cfg):
                    if not cfg.ddp_enabled():
                        critic = DataParallel(critic)
                    return critic
            """,
            lines=(6,),
        ),
        Invalid(
            # Two options, or one option not tested for a value: no decision picks DDP instead.
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel

            class Launcher:
                def replicate(self, net):
                    if self.opts.replicas == "threads":
                        net = torch.nn.DataParallel(net)
                    if self.opts.gpus > 1:
                        net = torch.nn.DataParallel(net)
                    return net

                def shard(self, net, rank):
                    if self.opts.backend == "processes":
                        net = DistributedDataParallel(net, device_ids=[rank])
                    return net
            """,
            lines=(7, 9),
        ),
    )
    valid = (
        Valid(
            # A shim to load keys a DataParallel prefixed with `module.`, unwrapped before any use.
            """
            import torch
            from torch import nn

            def restore_tagger(tagger, weights_path):
                tagger = nn.DataParallel(tagger)
                state = torch.load(weights_path, map_location="cpu", weights_only=True)
                tagger.load_state_dict(state)
                tagger = tagger.module
                return tagger.eval()
            """
        ),
        Valid(
            # One option, two values, two methods: the user picks the DataParallel mode where the
            # program offers DDP for another value of the same option.
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel

            class Launcher:
                def setup(self, net, rank):
                    if self.opts.replication is Replication.PROCESSES:
                        net = DistributedDataParallel(net, device_ids=[rank])
                    return net

                def rebuild(self, net):
                    net = net.to(self.device)
                    if self.opts.replication is Replication.THREADS:
                        net = torch.nn.DataParallel(net)
                    return net
            """
        ),
        Valid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel
            from torch.distributed.fsdp import FullyShardedDataParallel
            a = DistributedDataParallel(net, device_ids=[rank])
            b = torch.nn.parallel.DistributedDataParallel(net)
            c = FullyShardedDataParallel(net)
            """
        ),
        Valid(
            """
            class DataParallel:
                def __init__(self, module):
                    self.module = module

            wrapped = DataParallel(net)
            """
        ),
        Valid(
            """
            import torch
            if isinstance(model, torch.nn.DataParallel):
                model = model.module
            """
        ),
        Valid(
            # The other branch of the `if` that picks DDP; a plain log line warns against nothing.
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            def distribute(unet, world_size, rank):
                if world_size > 1:
                    unet = DDP(unet.to(rank), device_ids=[rank])
                else:
                    print(f"one process, DataParallel over {torch.cuda.device_count()} GPUs")
                    unet = torch.nn.DataParallel(unet)
                return unet
            """
        ),
        Valid(
            # The other branch of a conditional expression.
            """
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel as DDP

            def wrapped(tagger, distributed):
                return DDP(tagger) if distributed else nn.DataParallel(tagger)
            """
        ),
        Valid(
            # The last branch of an `elif` chain whose first branch picks FSDP, nested `if` inside.
            """
            import torch
            from torch.distributed.fsdp import FullyShardedDataParallel

            def shard_or_split(transformer, strategy):
                if strategy == "fsdp":
                    transformer = FullyShardedDataParallel(transformer)
                elif strategy == "single":
                    transformer = transformer.cuda()
                else:
                    if torch.cuda.device_count() > 1:
                        transformer = torch.nn.DataParallel(transformer)
                return transformer
            """
        ),
        Valid(
            # Another case of a `match` that picks a project's DDP helper.
            """
            from torch.nn import DataParallel
            from .launch import wrap_ddp

            def by_backend(speaker, backend):
                match backend:
                    case "ddp":
                        return wrap_ddp(speaker)
                    case "dp":
                        return DataParallel(speaker)
                return speaker
            """
        ),
        Valid(
            # A strategy class implementing the DataParallel backend users choose explicitly.
            """
            from torch.nn import DataParallel

            class DataParallelStrategy(ParallelStrategy):
                def setup_module(self, module):
                    return DataParallel(module=module, device_ids=self.parallel_devices)
            """
        ),
        Valid(
            # Re-wrapping the parts of a model already wrapped: the first wrap is the choice.
            """
            import torch

            def finetune_components(self):
                if isinstance(self.model, torch.nn.DataParallel):
                    wide = (
                        torch.nn.DataParallel(self.model.module.wide)
                        if self.model.module.wide
                        else None
                    )
                    self.model.module.deephead = torch.nn.DataParallel(self.model.module.deephead)
            """
        ),
        Valid(
            """
            from torch.nn import DataParallel
            from wrappers import ModelWrapper

            def rewrap(model):
                if isinstance(model, (DataParallel, ModelWrapper)) and model.module.head is not None:
                    model.module.head = DataParallel(model.module.head)
                if not isinstance(model, DataParallel):
                    return model
                else:
                    model.module.tail = DataParallel(model.module.tail)
                return model
            """
        ),
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) not in DATA_PARALLEL_CLASSES:
            return
        ancestors, scope = self.ctx.ancestors, self.ctx.scope
        if warned_against(node, ancestors):
            self.report(node)  # the program itself says DataParallel is the wrong choice
            return
        if distributed_alternative(node, ancestors, scope) or self._in_data_parallel_class():
            return
        if option_alternative(node, ancestors, scope, self.ctx.module):
            return
        if instance_guarded(node, ancestors, scope, DATA_PARALLEL_CLASSES):
            return  # the model is a DataParallel already: this wrap follows the first one
        if unwrapped_after_loading(node, ancestors):
            return  # a shim to load `module.`-prefixed keys, unwrapped before any forward pass
        self.report(node)

    def _in_data_parallel_class(self) -> bool:
        return any(
            isinstance(node, cst.ClassDef) and data_parallel_backend(node.name.value)
            for node in self.ctx.ancestors
        )
