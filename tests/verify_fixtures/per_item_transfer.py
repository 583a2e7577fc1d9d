"""Test fixture: a collate step that moves each of 100 small tensors to the device, then stacks."""

import torch

CODES = ("TDL201",)
DEFAULT_N = 100


def main(device: torch.device, n: int) -> object:
    """Stack `n` feature vectors on `device`; returns the batch and its mean."""
    items = [torch.arange(4, dtype=torch.float32) + i for i in range(n)]
    batch = torch.stack([x.to(device) for x in items])
    return {"batch": batch, "mean": batch.mean(dim=0)}


if __name__ == "__main__":
    print(main(torch.device("cuda" if torch.cuda.is_available() else "cpu"), DEFAULT_N))
