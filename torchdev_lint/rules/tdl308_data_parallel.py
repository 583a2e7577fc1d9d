"""TDL308 data-parallel."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.guards import instance_guarded
from torchdev_lint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext

# Every public spelling of the one class; resolved names are compared exactly so
# that DistributedDataParallel and FullyShardedDataParallel never match.
DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)


# A file that also wraps models for distributed training (`DistributedDataParallel`,
# a project's `smart_DDP`/`DDP` helper, FSDP) offers the recommended path already:
# its DataParallel is the deliberate single-process fallback.
_DISTRIBUTED_PATH = re.compile(
    r"DistributedDataParallel|FullyShardedDataParallel|\bDDP\b|_DDP\b|\bDDP_|\bFSDP\b"
)


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
        `torch.nn.parallel.DataParallel`), however the name is imported. Not flagged where
        DataParallel is a deliberate choice next to the recommended path: in a file that also
        wraps models in `DistributedDataParallel` or FSDP (or a project helper named `DDP`), where
        DataParallel is the single-process fallback, and inside a class that implements a
        DataParallel backend or strategy (its name says `DataParallel`/`DP`). Not flagged either
        where the code runs only once the model is already a DataParallel: in the body of
        `if isinstance(model, nn.DataParallel):` (statement or conditional expression; also a
        tuple of classes holding it, or the `else` of `if not isinstance(...)`), re-wrapping its
        parts (`nn.DataParallel(model.module.wide)`) follows the first wrap, which is reported
        where the choice is made. The `else` of such a test and the body of
        `if not isinstance(...)` are still flagged.

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
        Valid(
            # The fallback next to a distributed path the file offers.
            """
            import torch
            from utils import smart_DDP

            def setup(model, rank, cuda):
                if cuda and rank == -1 and torch.cuda.device_count() > 1:
                    log.warning("DP not recommended, use torchrun for DDP")
                    model = torch.nn.DataParallel(model)
                if cuda and rank != -1:
                    model = smart_DDP(model)
                return model
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

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._distributed: bool | None = None

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) not in DATA_PARALLEL:
            return
        if self._offers_distributed() or self._in_data_parallel_class():
            return
        if instance_guarded(node, self.ctx.ancestors, self.ctx.scope, DATA_PARALLEL):
            return  # the model is a DataParallel already: this wrap follows the first one
        self.report(node)

    def _offers_distributed(self) -> bool:
        """Does the file also wrap models for distributed training (a deliberate DP fallback)?"""
        if self._distributed is None:  # the file's text is generated once, and only here
            self._distributed = bool(_DISTRIBUTED_PATH.search(self.ctx.module.code))
        return self._distributed

    def _in_data_parallel_class(self) -> bool:
        for node in self.ctx.ancestors:
            if isinstance(node, cst.ClassDef) and re.search(r"DataParallel|DP", node.name.value):
                return True
        return False
