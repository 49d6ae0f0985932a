"""y = x * weight * scale + bias: a task with constructor arguments and parameters."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight * self.scale + self.bias


batch_size = 256
features = 512


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, 0.5]
