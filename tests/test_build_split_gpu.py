"""Stock-layout CUDA candidates through the real evaluator on a GPU take the split build (issue 16)
and stay correct; a compile error is reported against the candidate's own line.

Run on the GPU machine: ``pytest tests/test_build_split_gpu.py -m gpu``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu

TASK = EXAMPLES / "tasks" / "relu_large.py"
STOCK_KERNEL = EXAMPLES / "kernels" / "relu_cuda_stock.py"

# ReLU written the way LLMs write it: AT_DISPATCH over a templated kernel, the current stream, a
# device helper, dynamic shared memory, a CHECK macro and a __constant__.
DISPATCH_KERNEL = r'''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
__constant__ float zero_value[1] = {0.0f};

template <typename scalar_t>
__device__ __forceinline__ scalar_t relu_value(scalar_t v) { return v > scalar_t(0) ? v : scalar_t(zero_value[0]); }

template <typename scalar_t>
__global__ void relu_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, long n) {
    extern __shared__ unsigned char staging_bytes[];
    scalar_t* staging = reinterpret_cast<scalar_t*>(staging_bytes);
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    staging[threadIdx.x] = i < n ? in[i] : scalar_t(0);
    __syncthreads();
    if (i < n) out[i] = relu_value(staging[threadIdx.x]);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    CHECK_CUDA(x);
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    const long n = in.numel();
    const int threads = 256;
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "relu_cuda", ([&] {
        relu_kernel<scalar_t><<<(n + threads - 1) / threads, threads, threads * sizeof(scalar_t), stream>>>(
            in.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
    }));
    return out;
}
"""

ext = load_inline(
    name="cf_split_dispatch_relu",
    cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
'''


def run(source: str, cache: Path) -> EvalResult:
    return evaluate(
        TASK.read_text(),
        source,
        EvalOptions(device="cuda", cache_root=cache, do_timing=False),
        task_name=TASK.stem,
    )


def test_the_stock_example_takes_the_split_build_and_is_correct(tmp_path: Path) -> None:
    result = run(STOCK_KERNEL.read_text(), tmp_path)
    assert result.status == "correct", (result.messages, result.build.log[-3000:])
    ext = result.build.extensions[0]
    assert ext.path == "split" and ext.split_skipped is None, ext
    print(f"split cold build {ext.seconds:.1f} s")


def test_dispatch_template_stream_shared_memory_kernel_takes_the_split_build(tmp_path: Path) -> None:
    result = run(DISPATCH_KERNEL, tmp_path)
    assert result.status == "correct", (result.messages, result.build.log[-3000:])
    assert result.build.extensions[0].path == "split", result.build.extensions[0]


def test_a_compile_error_names_the_candidates_own_line(ext_cache: Path) -> None:
    source = STOCK_KERNEL.read_text().replace(
        "if (i < n) out[i] = in[i] > 0.0f ? in[i] : 0.0f;",
        "if (i < n) out[i] = in[i] > 0.0f ? in[i] : undeclared_thing;",
    )
    assert "undeclared_thing" in source
    cuda = source.split('cuda_source = r"""')[1]
    line = (
        cuda.splitlines().index("    if (i < n) out[i] = in[i] > 0.0f ? in[i] : undeclared_thing;") + 1
    )  # the string starts with a newline
    result = run(source, ext_cache)
    assert result.status == "compile_error"
    assert f'cuda_sources({line}): error: identifier "undeclared_thing" is undefined' in result.build.log
    # an error in its own code is reported after the split build alone: stock would fail the same way (issue 47)
    assert [ext.path for ext in result.build.extensions] == ["split"], result.build.extensions


def test_a_host_side_compile_error_names_the_candidates_own_line(ext_cache: Path) -> None:
    """The C++ unit numbers each piece from 1 (so a growing kernel leaves it unchanged); the log still
    names the candidate's line of the host function."""
    source = STOCK_KERNEL.read_text().replace(
        "    auto out = torch::empty_like(in);", "    auto out = torch::empty_like(undeclared_host_name);"
    )
    assert "undeclared_host_name" in source
    cuda = source.split('cuda_source = r"""')[1]
    line = cuda.splitlines().index("    auto out = torch::empty_like(undeclared_host_name);") + 1
    result = run(source, ext_cache)
    assert result.status == "compile_error"
    assert f"cuda_sources:{line}:" in result.build.log, result.build.log[-3000:]
    assert "cuda_sources@" not in result.build.log
