"""Test fixture: code written for a GPU box, with literal .cuda() calls and a "cuda" string."""

import torch

CODES = ("TDL201",)
DEFAULT_N = 50


def main(device: torch.device, n: int) -> object:
    """Ignores `device` on purpose: the literal CUDA calls must still run (emulated on CPU)."""
    rows = [torch.arange(3, dtype=torch.float32) * i for i in range(n)]
    batch = torch.cat([row.cuda() for row in rows])
    weights = torch.ones(batch.shape[0]).to("cuda")
    total = (weights * batch).sum()
    assert total.device.type == "cuda"
    return total.cpu(), total.item()


if __name__ == "__main__":
    print(main(torch.device("cuda"), DEFAULT_N))
