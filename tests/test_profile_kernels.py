"""`__global__` name extraction over a corpus of candidate-style sources."""

from __future__ import annotations

import pytest

from engine.profile.kernels import kernel_names_from_source

CORPUS = [
    pytest.param(
        '''
import torch
from torch.utils.cpp_extension import load_inline
cuda_src = """
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
''',
        ["add_kernel"],
        id="plain",
    ),
    pytest.param(
        """
template <typename scalar_t, int BLOCK>
__global__ void softmax_rows(const scalar_t* __restrict__ x, scalar_t* y, int cols) {}
template <>
__global__ void softmax_rows<float, 128>(const float* x, float* y, int cols) {}
""",
        ["softmax_rows"],
        id="template-and-specialisation",
    ),
    pytest.param(
        """
extern "C" __global__ void relu_kernel(float* x, int n) {}
extern "C" {
  __global__ void gelu_kernel(float* x, int n) {}
}
""",
        ["relu_kernel", "gelu_kernel"],
        id="extern-C",
    ),
    pytest.param(
        """
__global__ void __launch_bounds__(256, 2) matmul_tiled(const float* A, const float* B, float* C) {}
__global__ __launch_bounds__(MAX_THREADS) void layernorm_fwd(float* x) {}
__global__ void __attribute__((noinline)) scan_kernel(int* x) {}
""",
        ["matmul_tiled", "layernorm_fwd", "scan_kernel"],
        id="launch-bounds-and-attributes",
    ),
    pytest.param(
        """
__global__
void
fused_bias_gelu
(
    const float* x, float* y)
{}
static __global__ void conv_kernel (float* y) {}
""",
        ["fused_bias_gelu", "conv_kernel"],
        id="line-breaks-and-static",
    ),
    pytest.param(
        """
// __global__ void old_kernel(float* x) {}
/* __global__ void disabled_kernel(float* x) {}
   __global__ void also_disabled(float* x) {} */
__global__ void live_kernel(float* x) {} // __global__ void trailing_comment_kernel()
# __global__ void python_comment_kernel(float*)
""",
        ["live_kernel"],
        id="comments",
    ),
    pytest.param(
        """
__global__ void reduce_sum(const float* x, float* out, int n);   // forward declaration
__device__ float warp_sum(float v) { return v; }
__global__ void reduce_sum(const float* x, float* out, int n) { out[0] = warp_sum(x[0]); }
__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
""",
        ["reduce_sum"],
        id="prototype-device-and-host-functions",
    ),
    pytest.param(
        'src = "#include <cuda_runtime.h>\\n__global__ void\\tone_line_kernel(float* x) { x[0] = 1; }\\n"\n',
        ["one_line_kernel"],
        id="one-line-python-string-with-escapes",
    ),
    pytest.param(
        """
namespace ops {
__global__ void __cluster_dims__(2, 1, 1) cluster_kernel(float* x) {}
}
__global__ void [[maybe_unused]] attr_kernel(float* x) {}
""",
        ["cluster_kernel", "attr_kernel"],
        id="cluster-dims-and-cxx-attributes",
    ),
    pytest.param(
        """
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)  # no custom kernel at all
""",
        [],
        id="no-kernels",
    ),
]


@pytest.mark.parametrize(("source", "expected"), CORPUS)
def test_kernel_names(source: str, expected: list[str]) -> None:
    assert kernel_names_from_source(source) == expected


def test_combined_corpus_lists_each_kernel_once() -> None:
    """All sources concatenated: prototypes and repeats collapse, commented-out kernels stay out."""
    source = "\n".join(str(p.values[0]) for p in CORPUS)
    names = kernel_names_from_source(source)
    assert len(names) == len(set(names))
    assert "add_kernel" in names and "old_kernel" not in names
