"""TDL304 transfer-in-dataset."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import libcst as cst

from torchdev_lint.analysis.data.datasets import (
    SAMPLE_METHODS,
    collate_reference,
    follows_sample_device,
    is_dataset_class,
    named_like_collate,
)
from torchdev_lint.analysis.knowledge.devices import as_move
from torchdev_lint.analysis.values.kinds import is_module_subclass
from torchdev_lint.rule import Invalid, Rule, Valid
from torchdev_lint.syntax import keyword

if TYPE_CHECKING:
    from torchdev_lint.engine import FileContext


class TransferInDataset(Rule):
    code = "TDL304"
    name = "transfer-in-dataset"
    message = (
        "Device transfer inside a Dataset or collate function: it runs per sample in DataLoader workers; "
        "return CPU tensors and move the batch in the training loop"
    )
    triggers = (".to(", ".cuda(")
    docs = """
        ## What it does
        Flags `.to(device)` / `.cuda()` calls (moves that are not to the CPU) inside
        `__getitem__`, `__getitems__` or `__iter__` of a class deriving from a
        `torch.utils.data.*Dataset` (directly or through classes of the same file), and inside
        collate functions: a function or lambda passed as `collate_fn=`, or a function named
        like one (`collate_fn`, `pad_collate`, `collate_batch`). A method of an `nn.Module` class
        named like one counts only where a loader is given it (`collate_fn=self.collate_captions`):
        otherwise it runs in the module's forward pass, on the main process.

        A move to the `.device` of another value the function holds (a parameter, a local, a
        loop variable, or an attribute or subscript of one: `inc.to(value.device)`,
        `mask.to(batch[0].device)`) is not reported: it keeps the data where the sample
        already is, not a host-to-accelerator copy. `.to(self.device)`, `.to(device)` with a
        device variable, and the `.device` of `self`'s attributes, of globals, of a model
        (`self.model.device`, `model.device`) or of a setting (`args.device`) still are.

        ## Why it matters
        A `DataLoader` calls these in its worker processes. CUDA cannot be initialised in a
        forked worker (`RuntimeError: Cannot re-initialize CUDA in forked subprocess`), so the
        code only works with `num_workers=0`, which gives up parallel loading. Even then each
        sample is copied on its own (many small synchronous copies instead of one per batch),
        and `pin_memory=True` cannot pin tensors that already live on the GPU, so copies cannot
        overlap with compute.

        ## Example
        ```python
        class Images(Dataset):
            def __getitem__(self, i):
                return self.images[i].to("cuda"), self.labels[i].cuda()
        ```

        ## Use instead
        ```python
        class Images(Dataset):
            def __getitem__(self, i):
                return self.images[i], self.labels[i]

        loader = DataLoader(Images(), batch_size=64, num_workers=4, pin_memory=True)
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
        ```

        ## Fix safety
        No fix: the move has to go to wherever the batches are consumed.
        """
    invalid = (
        Invalid(
            """
            import torch
            from torch.utils.data import Dataset

            class Images(Dataset):
                def __getitem__(self, i):
                    return self.images[i].to("cuda"), self.labels[i].cuda()

            class Crops(Images):
                def __getitem__(self, i):
                    image, label = super().__getitem__(i)
                    return image[:, :8].to(self.device), label
            """,
            lines=(6, 6, 11),
        ),
        Invalid(
            """
            import torch

            class Stream(torch.utils.data.IterableDataset):
                def __iter__(self):
                    for row in self.rows:
                        yield torch.as_tensor(row).to(self.device)

            class Pairs(torch.utils.data.TensorDataset):
                def __getitem__(self, i):
                    return tuple(t.cuda() for t in super().__getitem__(i))
            """,
            lines=(6, 10),
        ),
        Invalid(
            """
            import torch
            from functools import partial
            from torch.utils.data import DataLoader

            def pad_batch(batch, device):
                return torch.stack(batch).to(device)

            def collate_fn(batch):
                return [x.cuda() for x in batch]

            a = DataLoader(ds, collate_fn=partial(pad_batch, device=dev))
            b = DataLoader(ds, collate_fn=lambda batch: torch.stack(batch).to("cuda"))
            """,
            lines=(6, 9, 12),
        ),
        # Moves to the device of the model, of the dataset's own attribute, or of a setting.
        Invalid(
            """
            import torch
            from torch.utils.data import Dataset

            class Tokens(Dataset):
                def __getitem__(self, i):
                    ids = self.ids[i]
                    return ids.to(self.model.device), ids.to(self.table.device)

            def collate(batch, args, model):
                stacked = torch.stack(batch)
                return stacked.to(args.device), stacked.to(model.device)
            """,
            lines=(7, 7, 11, 11),
        ),
        # A module's method named like a collate function counts once a loader is given it.
        Invalid(
            """
            from torch import nn
            from torch.utils.data import DataLoader

            class Captioner(nn.Module):
                def collate_captions(self, items):
                    return self.vocab(items).to(self.device)

                def loader(self, captions):
                    return DataLoader(captions, collate_fn=self.collate_captions)
            """,
            lines=(6,),
        ),
    )
    valid = (
        # ... and not before: it runs in the module's forward pass, on the main process.
        Valid(
            """
            from torch import nn

            class Captioner(nn.Module):
                def collate_captions(self, items):
                    return self.vocab(items).to(self.device)

                def forward(self, captions):
                    return self.decoder(self.collate_captions(captions))
            """
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class Images(Dataset):
                def __getitem__(self, i):
                    return self.images[i].cpu(), self.labels[i].to("cpu")

                def to_device(self, device):
                    self.images = self.images.to(device)

            for images, labels in DataLoader(Images(), pin_memory=True):
                images = images.to(device, non_blocking=True)
                labels = labels.cuda()
            """
        ),
        Valid(
            # Not a torch Dataset: a container that serves device batches to a loop.
            """
            import torch

            class DeviceBatches:
                def __getitem__(self, i):
                    return self.batches[i].to(self.device)

            def prepare(batch):
                return batch.to(device)
            """
        ),
        Valid(
            """
            import torch

            def collate_fn(batch):
                return torch.stack(batch).to(torch.float16)

            loader = torch.utils.data.DataLoader(ds, collate_fn=collate_fn)
            """
        ),
        # Moves to the device the sample's own tensors already have.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            def collate(data_list, increments):
                values = [data.x for data in data_list]
                shifted = [value + inc.to(value.device) for value, inc in zip(values, increments)]
                return shifted, torch.ones(len(values)).to(data_list[0].x.device)

            class Pairs(Dataset):
                def __getitem__(self, i):
                    image, mask = self.images[i], self.masks[i]
                    return image, mask.to(image.device)

            loader = DataLoader(ds, collate_fn=lambda batch: torch.stack(batch).to(batch[0].device))
            """
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        # Moves inside plain functions, by function name, until we know which are collate_fns.
        self._pending: dict[str, list[cst.Call]] = defaultdict(list)
        self._collate_names: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        collate = keyword(node, "collate_fn")
        if collate is not None:
            name = collate_reference(collate.value)
            if name is not None:
                self._collate_names.add(name)
        move = as_move(node, self.ctx.scope)
        if move is None or not move.to_accelerator or follows_sample_device(move.device_node, self.ctx.scope):
            return
        where = self._enclosing()
        if where is True:
            self.report(node)
        elif isinstance(where, str):
            self._pending[where].append(node)

    def leave_Module(self, node: cst.Module) -> None:
        for name, calls in self._pending.items():
            if name in self._collate_names:
                for call in calls:
                    self.report(call)

    def _enclosing(self) -> bool | str:
        """True inside dataset sample methods and collate functions; a function's name when undecided."""
        ancestors = self.ctx.ancestors
        scope = self.ctx.scope
        for index in range(len(ancestors) - 1, -1, -1):
            node = ancestors[index]
            if isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value == "collate_fn":
                return isinstance(node.value, cst.Lambda)
            if not isinstance(node, cst.FunctionDef):
                continue
            name = node.name.value
            owner = ancestors[index - 2] if index >= 2 else None
            owner = owner if isinstance(owner, cst.ClassDef) else None
            if owner is not None:
                while scope.node is not owner and scope.parent is not None:
                    scope = scope.parent
            around = scope.parent if owner is not None else None
            if named_like_collate(name):
                # A module's method runs in its forward pass, on the main process: a collate
                # function only where a loader is given it (then reported in `leave_Module`).
                return name if owner and around and is_module_subclass(owner, around) else True
            if name in SAMPLE_METHODS and owner is not None and around is not None:
                return is_dataset_class(owner, around)
            return name
        return False
