"""Partial replacement for task.py: the GEMM stays in cuBLAS, one own kernel fuses the epilogue and the row sum."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <math.h>

// One block per row: scale, shift, exact GELU, then a block-wide sum of the row.
__global__ void scale_shift_gelu_rowsum_kernel(const float* __restrict__ y, const float* __restrict__ shift,
                                               float scale, int rows, int cols, float* __restrict__ out) {
    extern __shared__ float partial[];
    const int row = blockIdx.x;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = y[(size_t)row * cols + c] * scale + shift[c];
        acc += 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = partial[0];
}

void launch_scale_shift_gelu_rowsum(const float* y, const float* shift, float scale, int rows, int cols,
                                    float* out, cudaStream_t stream) {
    const int threads = 256;
    scale_shift_gelu_rowsum_kernel<<<rows, threads, threads * sizeof(float), stream>>>(
        y, shift, scale, rows, cols, out);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch_scale_shift_gelu_rowsum(const float* y, const float* shift, float scale, int rows, int cols,
                                    float* out, cudaStream_t stream);

torch::Tensor scale_shift_gelu_rowsum(torch::Tensor y, torch::Tensor shift, double scale) {
    TORCH_CHECK(y.is_cuda() && shift.is_cuda(), "expected CUDA tensors");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "expected float32");
    auto yc = y.contiguous();
    auto sc = shift.contiguous();
    const int rows = yc.size(0), cols = yc.size(1);
    auto out = torch::empty({rows, 1}, yc.options());
    launch_scale_shift_gelu_rowsum(yc.data_ptr<float>(), sc.data_ptr<float>(), (float)scale, rows, cols,
                                   out.data_ptr<float>(), c10::cuda::getCurrentCUDAStream());
    return out;
}
"""

ext = load_inline(
    name="cf_gemm_scale_gelu_rowsum",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_shift_gelu_rowsum"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.randn(out_features) * 0.02)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.scale_shift_gelu_rowsum(self.linear(x), self.shift, self.scale)
