"""A kernel for tiny_mlp's Linear task (the `embed` layer) on CPU: y = x Wᵀ + b in C++. Its parameters
are named as nn.Linear's (weight, bias), so `cudaforge apply` loads the layer's weights into it by name."""

# guard policy: default (PyTorch layers are kept beside the own kernels, as KernelBench allows)

import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.dim() == 2, "linear_forward: expected 2-d float32 input");
    auto input = x.contiguous();
    auto weight = w.contiguous();
    const int64_t rows = input.size(0), inner = input.size(1), cols = weight.size(0);
    auto out = torch::empty({rows, cols}, input.options());
    const float* in = input.data_ptr<float>();
    const float* wt = weight.data_ptr<float>();
    const float* bias = b.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            float sum = bias[c];
            for (int64_t k = 0; k < inner; ++k) sum += in[r * inner + k] * wt[c * inner + k];
            o[r * cols + c] = sum;
        }
    }
    return out;
}
"""

ext = load_inline(name="cf_tiny_linear_cpu", cpp_sources=cpp_source, functions=["linear_forward"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return ext.linear_forward(input, self.weight, self.bias)
