"""Test fixture: `total += loss` keeps every step's graph; FIGURES records how much of it."""

import torch

CODES = ("TDL208",)
DEFAULT_N = 10
FIGURES: dict[str, float] = {}


def fit(weight, batches, report) -> None:
    total = 0.0
    for x in batches:
        loss = (x * weight).sum()
        loss.backward()
        total += loss
    report(total)


def main(device: torch.device, n: int) -> object:
    weight = torch.ones(3, device=device, requires_grad=True)
    batches = [torch.full((3,), float(i), device=device) for i in range(n)]

    def report(total: torch.Tensor) -> None:
        nodes, pending = set(), [total.grad_fn]
        while pending:
            node = pending.pop()
            if node is not None and node not in nodes:
                nodes.add(node)
                pending.extend(parent for parent, _ in node.next_functions)
        FIGURES["graph nodes"] = len(nodes)

    fit(weight, batches, report)
    return weight.grad


if __name__ == "__main__":
    print(main(torch.device("cpu"), DEFAULT_N), FIGURES)
