"""A kernel for transformers' LlamaRMSNorm (bf16), extracted by `cudaforge extract` from a Llama: one block
per row, one read to sum the squares (fp32), one read and write to scale, rounding where the reference
does (the normalised value to bf16, then times the bf16 weight). The parameter is named `weight`, as the
module's, so `cudaforge apply` loads each norm's weight into it."""

# guard policy: default (PyTorch layers are kept beside the own kernels, as KernelBench allows)

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>

template <int VEC> struct alignas(2 * VEC) Pack { __nv_bfloat16 v[VEC]; };

template <int VEC>
__global__ void rmsnorm_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                               __nv_bfloat16* __restrict__ out, long hidden, float eps) {
    const long row = blockIdx.x;
    const Pack<VEC>* xs = reinterpret_cast<const Pack<VEC>*>(x + row * hidden);
    const Pack<VEC>* ws = reinterpret_cast<const Pack<VEC>*>(weight);
    Pack<VEC>* os = reinterpret_cast<Pack<VEC>*>(out + row * hidden);
    float sum = 0.0f;
    for (long j = threadIdx.x; j < hidden / VEC; j += blockDim.x) {
        const Pack<VEC> p = xs[j];
        #pragma unroll
        for (int k = 0; k < VEC; ++k) { float f = __bfloat162float(p.v[k]); sum += f * f; }
    }
    __shared__ float partial[32];
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, offset);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x + 31) / 32 ? partial[threadIdx.x] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
        if (threadIdx.x == 0) partial[0] = v;
    }
    __syncthreads();
    const float inv = rsqrtf(partial[0] / (float)hidden + eps);
    for (long j = threadIdx.x; j < hidden / VEC; j += blockDim.x) {
        const Pack<VEC> p = xs[j];
        const Pack<VEC> w = ws[j];
        Pack<VEC> r;
        #pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float normed = __bfloat162float(__float2bfloat16(__bfloat162float(p.v[k]) * inv));
            r.v[k] = __float2bfloat16(__bfloat162float(w.v[k]) * normed);
        }
        os[j] = r;
    }
}

void launch_rmsnorm(const void* x, const void* weight, void* out, long rows, long hidden, float eps, cudaStream_t stream) {
    const __nv_bfloat16* in = (const __nv_bfloat16*)x;
    const __nv_bfloat16* w = (const __nv_bfloat16*)weight;
    __nv_bfloat16* o = (__nv_bfloat16*)out;
    if (hidden % 8 == 0) {
        long lanes = (hidden / 8 + 31) / 32 * 32;
        rmsnorm_kernel<8><<<rows, lanes < 1024 ? (int)lanes : 1024, 0, stream>>>(in, w, o, hidden, eps);
    } else {
        long lanes = (hidden + 31) / 32 * 32;
        rmsnorm_kernel<1><<<rows, lanes < 1024 ? (int)lanes : 1024, 0, stream>>>(in, w, o, hidden, eps);
    }
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch_rmsnorm(const void* x, const void* weight, void* out, long rows, long hidden, float eps, cudaStream_t stream);

torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kBFloat16, "rmsnorm: a bf16 CUDA tensor");
    TORCH_CHECK(weight.scalar_type() == torch::kBFloat16 && weight.numel() == x.size(-1), "rmsnorm: bf16 weight of the last dim");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const long hidden = input.size(-1);
    const long rows = hidden ? input.numel() / hidden : 0;
    if (rows == 0) return out;
    launch_rmsnorm(input.data_ptr(), weight.contiguous().data_ptr(), out.data_ptr(), rows, hidden, (float)eps,
                   c10::cuda::getCurrentCUDAStream());
    return out;
}
"""

ext = load_inline(
    name="cf_llama_rmsnorm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["rmsnorm"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.to(torch.bfloat16)
        self.eval()

    def forward(self, hidden_states):
        return ext.rmsnorm(hidden_states, self.weight, self.variance_epsilon)
