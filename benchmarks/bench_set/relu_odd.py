"""ReLU over 2049 x 4097 floats: a count that is not a multiple of 4, so vectorised kernels need their tail. One of the four tasks of the 2-GPU bench run (`bash benchmarks/device_run.sh bench`)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 2049
dim = 4097


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
