"""TDL308 data-parallel."""

from __future__ import annotations

import libcst as cst

from torchdev_lint.rule import Invalid, Rule, Valid

# Every public spelling of the one class; resolved names are compared exactly so
# that DistributedDataParallel and FullyShardedDataParallel never match.
DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)


class DataParallelRule(Rule):
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

        ## Why it matters
        `DataParallel` runs one Python process that scatters each batch over the GPUs, replicates
        the model on every forward pass and gathers outputs on GPU 0. The GIL, the replication and
        the unbalanced memory on the first GPU make it slower than `DistributedDataParallel` even
        on a single machine; PyTorch's documentation recommends DDP for all multi-GPU training.
        It also hard-wires CUDA: it does nothing useful on MPS, XPU or CPU.

        ## Example
        ```python
        model = nn.DataParallel(model).cuda()
        ```

        ## Use instead
        ```python
        # launched with `torchrun --nproc-per-node=NUM_GPUS train.py`
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])
        ```

        ## Fix safety
        No fix: moving to DDP changes how the program is launched (one process per GPU), how data
        is sharded (`DistributedSampler`) and how checkpoints and logs are written.
        """
    invalid = (
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
    )
    valid = (
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
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) in DATA_PARALLEL:
            self.report(node)
