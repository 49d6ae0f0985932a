"""ReLU as a C++ extension on CPU tensors: the --device cpu form of a candidate."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "relu: expected a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu: expected float32");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = input.numel();
    for (int64_t i = 0; i < n; ++i) {
        o[i] = in[i] > 0.0f ? in[i] : 0.0f;
    }
    return out;
}

torch::Tensor leaky_relu_bug(torch::Tensor x) {
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < input.numel(); ++i) {
        o[i] = in[i] > 0.0f ? in[i] : 0.01f * in[i];
    }
    return out;
}

torch::Tensor crash(torch::Tensor x) {
    volatile float* nowhere = nullptr;
    *nowhere = 1.0f;
    return x;
}
"""

ext = load_inline(
    name="cf_relu_cpu",
    cpp_sources=cpp_source,
    functions=["relu", "leaky_relu_bug", "crash"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu(x)
