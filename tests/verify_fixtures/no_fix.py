"""Test fixture: TDL308 (DataParallel) has no fix, so verify runs it once, untimed, as "no change"."""

import torch
from torch import nn

CODES = ("TDL308",)
DEFAULT_N = 4


def main(device: torch.device, n: int) -> object:
    model = nn.DataParallel(nn.Linear(3, 2))
    return model(torch.ones(n, 3))


if __name__ == "__main__":
    print(main(torch.device("cpu"), DEFAULT_N))
