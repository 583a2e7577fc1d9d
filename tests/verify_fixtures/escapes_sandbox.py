"""Test fixture: tries to reach the network and to write outside its folder; both must be refused."""

import os
import socket

import torch

CODES = ("TDL201",)
DEFAULT_N = 4
TARGET = os.environ.get("TORCHDEV_TEST_ESCAPE_FILE", "/tmp/torchdev-verify-escape.txt")


def main(device: torch.device, n: int) -> object:
    """Attempts both escapes, swallowing the errors, then computes a tensor."""
    refused = 0
    try:
        with open(TARGET, "w") as file:
            file.write("escaped")
    except PermissionError:
        refused += 1
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.connect(("127.0.0.1", 9))
    except PermissionError:
        refused += 1
    except OSError:
        pass
    rows = [torch.full((2,), float(refused)) for _ in range(n)]
    return torch.stack([row.to(device) for row in rows])


if __name__ == "__main__":
    print(main(torch.device("cpu"), DEFAULT_N))
