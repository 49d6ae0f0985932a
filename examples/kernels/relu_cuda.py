"""ReLU as a CUDA kernel in cudaforge's fast format.

The CUDA source holds the kernel and a launcher on raw pointers and includes only CUDA headers,
so nvcc never parses torch's headers (a cold build takes seconds instead of a minute); the
torch::Tensor wrapper lives in the C++ source, which includes <torch/extension.h> itself
(hence ``no_implicit_headers=True``). The kernel runs on PyTorch's current stream.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ in, float* __restrict__ out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = in[i];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

__global__ void leaky_relu_bug_kernel(const float* __restrict__ in, float* __restrict__ out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = in[i];
        out[i] = v > 0.0f ? v : 0.01f * v;
    }
}

__global__ void out_of_bounds_kernel(const float* __restrict__ in, float* __restrict__ out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        out[i + (1L << 40)] = in[i];
    }
}

__global__ void spin_kernel(const int* flag) {
    while (*(volatile const int*)flag == 0) {
    }
}

static long blocks_for(long n, int threads) { return (n + threads - 1) / threads; }

void launch_relu(const float* in, float* out, long n, int repeats, cudaStream_t stream) {
    const int threads = 256;
    for (int r = 0; r < repeats; ++r) {
        relu_kernel<<<blocks_for(n, threads), threads, 0, stream>>>(in, out, n);
    }
}

void launch_leaky_relu_bug(const float* in, float* out, long n, cudaStream_t stream) {
    leaky_relu_bug_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(in, out, n);
}

void launch_out_of_bounds(const float* in, float* out, long n, cudaStream_t stream) {
    out_of_bounds_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(in, out, n);
}

void launch_spin(const int* flag, cudaStream_t stream) {
    spin_kernel<<<1, 1, 0, stream>>>(flag);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch_relu(const float* in, float* out, long n, int repeats, cudaStream_t stream);
void launch_leaky_relu_bug(const float* in, float* out, long n, cudaStream_t stream);
void launch_out_of_bounds(const float* in, float* out, long n, cudaStream_t stream);
void launch_spin(const int* flag, cudaStream_t stream);

static void check_input(const torch::Tensor& x) {
    TORCH_CHECK(x.is_cuda(), "expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "expected float32");
}

torch::Tensor relu(torch::Tensor x) {
    check_input(x);
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    launch_relu(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(), 1, c10::cuda::getCurrentCUDAStream());
    return out;
}

torch::Tensor relu_twice(torch::Tensor x) {
    check_input(x);
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    launch_relu(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(), 2, c10::cuda::getCurrentCUDAStream());
    return out;
}

torch::Tensor leaky_relu_bug(torch::Tensor x) {
    check_input(x);
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    launch_leaky_relu_bug(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(), c10::cuda::getCurrentCUDAStream());
    return out;
}

torch::Tensor out_of_bounds(torch::Tensor x) {
    check_input(x);
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    launch_out_of_bounds(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(), c10::cuda::getCurrentCUDAStream());
    return out;
}

torch::Tensor spin(torch::Tensor x) {
    auto flag = torch::zeros({1}, x.options().dtype(torch::kInt32));
    launch_spin(flag.data_ptr<int>(), c10::cuda::getCurrentCUDAStream());
    return x;
}

torch::Tensor host_crash(torch::Tensor x) {
    volatile float* nowhere = nullptr;
    *nowhere = 1.0f;
    return x;
}
"""

ext = load_inline(
    name="cf_relu_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu", "relu_twice", "leaky_relu_bug", "out_of_bounds", "spin", "host_crash"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu(x)
