"""A kernel for torchvision's Bottleneck block (ResNet-50's layers, bf16, NCHW), extracted by `cudaforge
extract torchvision.models:resnet50`: the three convolutions stay in cuDNN (the default guard policy
allows that), and each batch norm is fused with what follows it in one pass over memory: BN+ReLU after
conv1 and conv2, BN + the residual add + ReLU after conv3. Eager runs those as 2, 2 and 3 kernels with
in-place passes between them. Each step rounds to bf16 where eager's would, so the result stays within
bf16's tolerance. Submodule names are torchvision's, so `cudaforge apply` loads each block's weights."""

# guard policy: default (PyTorch layers are kept beside the own kernels, as KernelBench allows)

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline
from torchvision.models.resnet import Bottleneck

cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

template <int VEC> struct alignas(2 * VEC) Pack { __nv_bfloat16 v[VEC]; };

// One block per (n, c) plane of an NCHW tensor: the channel's scale and shift are loaded once, the
// plane read and written in VEC-wide aligned packs (the plane size is a multiple of VEC).
template <int VEC>
__global__ void bn_act_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ residual,
                              __nv_bfloat16* __restrict__ out, const float* __restrict__ scale,
                              const float* __restrict__ shift, int channels, long plane_size, int relu) {
    const long plane = blockIdx.x;
    const int c = (int)(plane % channels);
    const float s = scale[c], b = shift[c];
    const long base = plane * plane_size;
    const Pack<VEC>* xs = reinterpret_cast<const Pack<VEC>*>(x + base);
    const Pack<VEC>* rs = residual ? reinterpret_cast<const Pack<VEC>*>(residual + base) : nullptr;
    Pack<VEC>* os = reinterpret_cast<Pack<VEC>*>(out + base);
    for (long j = threadIdx.x; j < plane_size / VEC; j += blockDim.x) {
        const Pack<VEC> in = xs[j];
        Pack<VEC> add, result;
        if (rs) add = rs[j];
        #pragma unroll
        for (int k = 0; k < VEC; ++k) {
            // batch norm's output is bf16 in eager; then the residual add, then the ReLU
            float v = __bfloat162float(__float2bfloat16(fmaf(__bfloat162float(in.v[k]), s, b)));
            if (rs) v = __bfloat162float(__float2bfloat16(v + __bfloat162float(add.v[k])));
            if (relu) v = fmaxf(v, 0.0f);
            result.v[k] = __float2bfloat16(v);
        }
        os[j] = result;
    }
}

void launch_bn_act(const void* x, const void* residual, void* out, const float* scale, const float* shift,
                   long planes, int channels, long plane_size, int relu, cudaStream_t stream) {
    const __nv_bfloat16* in = (const __nv_bfloat16*)x;
    const __nv_bfloat16* add = (const __nv_bfloat16*)residual;
    __nv_bfloat16* o = (__nv_bfloat16*)out;
    int vec = plane_size % 8 == 0 ? 8 : (plane_size % 4 == 0 ? 4 : (plane_size % 2 == 0 ? 2 : 1));
    long lanes = (plane_size / vec + 31) / 32 * 32;
    int threads = (int)(lanes < 256 ? lanes : 256);
    switch (vec) {
        case 8: bn_act_kernel<8><<<planes, threads, 0, stream>>>(in, add, o, scale, shift, channels, plane_size, relu); break;
        case 4: bn_act_kernel<4><<<planes, threads, 0, stream>>>(in, add, o, scale, shift, channels, plane_size, relu); break;
        case 2: bn_act_kernel<2><<<planes, threads, 0, stream>>>(in, add, o, scale, shift, channels, plane_size, relu); break;
        default: bn_act_kernel<1><<<planes, threads, 0, stream>>>(in, add, o, scale, shift, channels, plane_size, relu); break;
    }
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch_bn_act(const void* x, const void* residual, void* out, const float* scale, const float* shift,
                   long planes, int channels, long plane_size, int relu, cudaStream_t stream);

torch::Tensor bn_act(torch::Tensor x, torch::Tensor scale, torch::Tensor shift, c10::optional<torch::Tensor> residual, bool relu) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kBFloat16 && x.dim() == 4, "bn_act: a 4-d bf16 CUDA tensor");
    TORCH_CHECK(scale.scalar_type() == torch::kFloat32 && shift.scalar_type() == torch::kFloat32, "bn_act: fp32 scale/shift");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    torch::Tensor add;
    if (residual.has_value()) {
        add = residual->contiguous();
        TORCH_CHECK(add.sizes() == input.sizes() && add.scalar_type() == input.scalar_type(), "bn_act: residual shape");
    }
    const long channels = input.size(1), plane_size = input.size(2) * input.size(3);
    const long planes = input.size(0) * channels;
    if (planes == 0 || plane_size == 0) return out;
    launch_bn_act(input.data_ptr(), residual.has_value() ? add.data_ptr() : nullptr, out.data_ptr(),
                  scale.contiguous().data_ptr<float>(), shift.contiguous().data_ptr<float>(), planes, (int)channels,
                  plane_size, relu ? 1 : 0, c10::cuda::getCurrentCUDAStream());
    return out;
}
"""

ext = load_inline(
    name="cf_bottleneck_bn_act",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bn_act"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
)


def _scale_shift(bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    scale = bn.weight.float() * torch.rsqrt(bn.running_var.float() + bn.eps)
    return scale, bn.bias.float() - bn.running_mean.float() * scale


class ModelNew(nn.Module):
    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1, norm_layer=None):
        super().__init__()
        block = Bottleneck(inplanes, planes, stride, downsample, groups, base_width, dilation, norm_layer)
        self.conv1, self.bn1, self.conv2, self.bn2 = block.conv1, block.bn1, block.conv2, block.bn2
        self.conv3, self.bn3, self.relu = block.conv3, block.bn3, block.relu
        self.to(torch.bfloat16)
        self.eval()

    def _conv(self, conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)

    def forward(self, x):
        s1, b1 = _scale_shift(self.bn1)
        s2, b2 = _scale_shift(self.bn2)
        s3, b3 = _scale_shift(self.bn3)
        out = ext.bn_act(self._conv(self.conv1, x), s1, b1, None, True)
        out = ext.bn_act(self._conv(self.conv2, out), s2, b2, None, True)
        return ext.bn_act(self._conv(self.conv3, out), s3, b3, x, True)
