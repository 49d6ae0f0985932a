"""A kernel for transformers' LlamaMLP (bf16), extracted by `cudaforge extract` from a Llama: the three
projections stay in cuBLAS, and SiLU(gate) × up runs as one pass instead of two (eager: silu, then mul),
rounding SiLU's output to bf16 as the reference does. Submodule names are the module's own."""

# guard policy: default (PyTorch layers are kept beside the own kernels, as KernelBench allows)

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>

struct alignas(16) Pack8 { __nv_bfloat16 v[8]; };

__global__ void silu_mul_kernel(const Pack8* __restrict__ gate, const Pack8* __restrict__ up, Pack8* __restrict__ out, long packs) {
    for (long j = blockIdx.x * (long)blockDim.x + threadIdx.x; j < packs; j += (long)gridDim.x * blockDim.x) {
        const Pack8 g = gate[j], u = up[j];
        Pack8 r;
        #pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float x = __bfloat162float(g.v[k]);
            const float act = __bfloat162float(__float2bfloat16(x / (1.0f + expf(-x))));
            r.v[k] = __float2bfloat16(act * __bfloat162float(u.v[k]));
        }
        out[j] = r;
    }
}

__global__ void silu_mul_tail_kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out, long start, long n) {
    long i = start + blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        const float x = __bfloat162float(gate[i]);
        const float act = __bfloat162float(__float2bfloat16(x / (1.0f + expf(-x))));
        out[i] = __float2bfloat16(act * __bfloat162float(up[i]));
    }
}

void launch_silu_mul(const void* gate, const void* up, void* out, long n, int sms, cudaStream_t stream) {
    const long packs = n / 8;
    if (packs) {
        long blocks = (packs + 255) / 256;
        long cap = (long)sms * 8;
        silu_mul_kernel<<<blocks < cap ? blocks : cap, 256, 0, stream>>>((const Pack8*)gate, (const Pack8*)up, (Pack8*)out, packs);
    }
    if (n % 8) {
        silu_mul_tail_kernel<<<1, 8, 0, stream>>>((const __nv_bfloat16*)gate, (const __nv_bfloat16*)up, (__nv_bfloat16*)out, packs * 8, n);
    }
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/cuda/CUDAContext.h>

void launch_silu_mul(const void* gate, const void* up, void* out, long n, int sms, cudaStream_t stream);

torch::Tensor silu_mul(torch::Tensor gate, torch::Tensor up) {
    TORCH_CHECK(gate.is_cuda() && gate.scalar_type() == torch::kBFloat16 && up.sizes() == gate.sizes()
                && up.scalar_type() == gate.scalar_type(), "silu_mul: two bf16 CUDA tensors of one shape");
    auto g = gate.contiguous();
    auto u = up.contiguous();
    auto out = torch::empty_like(g);
    if (g.numel() == 0) return out;
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    launch_silu_mul(g.data_ptr(), u.data_ptr(), out.data_ptr(), g.numel(), sms, c10::cuda::getCurrentCUDAStream());
    return out;
}
"""

ext = load_inline(
    name="cf_llama_silu_mul",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["silu_mul"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size, self.intermediate_size = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=config.mlp_bias)
        self.to(torch.bfloat16)
        self.eval()

    def forward(self, x):
        return self.down_proj(ext.silu_mul(self.gate_proj(x), self.up_proj(x)))
