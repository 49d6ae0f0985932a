"""A KernelBench level-2-style task written for the prompt budget: GEMM, scale, bias, GELU, row sum."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = sum_j GELU(scale * (x @ W^T + b) + shift)_j, over the feature dimension, kept as a column."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.randn(out_features) * 0.02)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = y * self.scale + self.shift
        y = torch.nn.functional.gelu(y)
        return y.sum(dim=1, keepdim=True)


batch_size = 512
in_features = 2048
out_features = 4096
scale = 0.75


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
