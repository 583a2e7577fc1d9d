"""Test fixture: a module keeps its mean as a plain tensor, left on the CPU by `model.to("cuda")`."""

import torch
from torch import nn

CODES = ("TDL313",)
DEFAULT_N = 4


class Center(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.tensor([1.0, 2.0, 3.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.mean


def main(device: torch.device, n: int) -> object:
    """Ignores `device` on purpose: the literal "cuda" is emulated on a CPU-only machine."""
    model = Center().to("cuda")
    return model(torch.ones(n, 3, device="cuda")).cpu()


if __name__ == "__main__":
    print(main(torch.device("cuda"), DEFAULT_N))
