"""A small nested model of our own with repeated identical blocks: the CPU walk-through of
`cudaforge profile` / `extract` / `apply` (README, "Optimize your own model")."""

import torch
import torch.nn as nn


class Block(nn.Module):
    """A residual MLP block: x + fc2(relu(fc1(x)))."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class TinyNet(nn.Module):
    def __init__(self, features: int = 32, dim: int = 64, hidden: int = 256, depth: int = 2, classes: int = 10):
        super().__init__()
        self.embed = nn.Linear(features, dim)
        self.blocks = nn.ModuleList([Block(dim, hidden) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make_model() -> nn.Module:
    return TinyNet()


def example_inputs() -> torch.Tensor:
    return torch.randn(256, 32)
