"""A kernel for tiny_mlp's Block task on CPU: the ReLU and the residual add in C++, the two Linear layers
kept in PyTorch (the default guard policy allows that beside own kernels). Parameter names are the
module's own (fc1.weight, …), so `cudaforge apply` loads each block's weights into it by name."""

# guard policy: default (PyTorch layers are kept beside the own kernels, as KernelBench allows)

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: expected float32");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < input.numel(); ++i) o[i] = in[i] > 0.0f ? in[i] : 0.0f;
    return out;
}

torch::Tensor residual_add(torch::Tensor x, torch::Tensor y) {
    TORCH_CHECK(x.sizes() == y.sizes(), "residual_add: shapes differ");
    auto a = x.contiguous();
    auto b = y.contiguous();
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) o[i] = pa[i] + pb[i];
    return out;
}
"""

ext = load_inline(name="cf_tiny_block_cpu", cpp_sources=cpp_source, functions=["relu_forward", "residual_add"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return ext.residual_add(x, self.fc2(ext.relu_forward(self.fc1(x))))
