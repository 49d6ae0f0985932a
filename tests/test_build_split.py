"""The split transform (engine/eval/build/split/): stock-layout sources rewritten into a torch-free CUDA unit
and a C++ unit; sources it is not sure about are left to the stock build with a reason."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.eval.build.split.rewrite import ABLATE_SETTER, LAUNCH_PREFIX, SplitSkipped, split_sources

HEAD = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"

DISPATCH = (
    HEAD
    + r"""
#include <c10/cuda/CUDAStream.h>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be CUDA")
template <typename scalar_t>
__device__ scalar_t square(scalar_t v) { return v * v; }

template <typename scalar_t>
__global__ void square_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = square(in[i]);
}

torch::Tensor square_cuda(torch::Tensor x) {
    CHECK_CUDA(x);
    auto out = torch::empty_like(x);
    int n = x.numel();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "square", ([&] {
        square_kernel<scalar_t><<<(n + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
    }));
    return out;
}
"""
)

SEVERAL = (
    HEAD
    + r"""
#include <ATen/cuda/CUDAContext.h>
constexpr int TILE = 32;
__constant__ float scale[1];
struct Pair { float a; float b; };

__global__ void fill_kernel(float* out, Pair p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = p.a + p.b * scale[0];
}

template <int BLOCK>
__global__ void sum_kernel(const float* in, float* out, int n) {
    __shared__ float tile[BLOCK];
    extern __shared__ float dyn[];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    dyn[threadIdx.x] = tile[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) { float s = 0; for (int k = 0; k < BLOCK; ++k) s += dyn[k]; atomicAdd(out, s); }
}

torch::Tensor fill_then_sum(torch::Tensor x) {
    auto out = torch::zeros({1}, x.options());
    auto tmp = torch::empty_like(x);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    int n = x.numel();
    fill_kernel<<<(n + TILE - 1) / TILE, TILE, 0, stream>>>(tmp.data_ptr<float>(), Pair{1.0f, 2.0f}, n);
    sum_kernel<256><<<(n + 255) / 256, 256, 256 * sizeof(float), stream>>>(tmp.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
)

HALF_DISPATCH = DISPATCH.replace("AT_DISPATCH_FLOATING_TYPES", "AT_DISPATCH_FLOATING_TYPES_AND_HALF")

SYMBOL_FROM_HOST = (
    HEAD
    + r"""
__constant__ float coeff[4];
__global__ void k(float* out) { out[threadIdx.x] = coeff[threadIdx.x]; }
torch::Tensor run(torch::Tensor x, torch::Tensor c) {
    cudaMemcpyToSymbol(coeff, c.data_ptr<float>(), 4 * sizeof(float));
    k<<<1, 4>>>(x.data_ptr<float>());
    return x;
}
"""
)

BROKEN = (
    HEAD
    + r"""
__global__ void broken_kernel(float* out, int n) {
    int i = threadIdx.x;
    out[i] = undefined_name * 2.0f;
}
torch::Tensor run(torch::Tensor x) {
    broken_kernel<<<1, 32>>>(x.data_ptr<float>(), x.numel());
    return x;
}
"""
)


def _cuda_only(text: str) -> bool:
    return not re.search(r"\b(torch|at|c10)::|torch/|ATen/|AT_DISPATCH|TORCH_CHECK\(", _code(text))


def _code(text: str) -> str:
    """The unit without #define lines (macros are copied to both units; unexpanded they need nothing)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#define"))


def test_dispatch_launch_becomes_a_templated_launcher_instantiated_for_the_dispatched_types() -> None:
    split = split_sources("torch::Tensor square_cuda(torch::Tensor x);", DISPATCH)
    assert _cuda_only(split.cuda)
    assert (
        f"{LAUNCH_PREFIX}square_kernel<float>" in split.cuda
        and f"{LAUNCH_PREFIX}square_kernel<double>" in split.cuda
    )
    assert "<<<" not in split.cpp and "<<<" in split.cuda
    assert (
        f"{LAUNCH_PREFIX}square_kernel<scalar_t>((n + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()"
        in split.cpp
    )
    assert "__device__ scalar_t square" in split.cuda and "square(scalar_t" not in split.cpp
    assert split.cpp.startswith("#include <torch/extension.h>")  # the precompiled header stands in for it
    assert split.kernels == ["square_kernel"]


def test_lines_after_a_rewritten_launch_keep_their_numbers() -> None:
    split = split_sources("", DISPATCH)
    host = split.cpp[split.cpp.index("torch::Tensor square_cuda") :]
    original = DISPATCH[DISPATCH.index("torch::Tensor square_cuda") :]
    assert host.splitlines().index("    return out;") == original.splitlines().index("    return out;")


def test_several_kernels_streams_shared_memory_constants_and_structs() -> None:
    split = split_sources("torch::Tensor fill_then_sum(torch::Tensor x);", SEVERAL)
    assert _cuda_only(split.cuda)
    assert "static constexpr int TILE = 32;" in split.cuda and "static constexpr int TILE = 32;" in split.cpp
    assert "struct Pair" in split.cuda and "struct Pair" in split.cpp
    assert "__constant__ float scale" in split.cuda and "scale[1]" not in split.cpp
    assert "cf_launch_fill_kernel((n + TILE - 1) / TILE, TILE, 0, stream," in split.cpp
    assert "cf_launch_sum_kernel<256>((n + 255) / 256, 256, 256 * sizeof(float), stream," in split.cpp
    assert "&cf_launch_sum_kernel<256>;" in split.cuda
    assert split.kernels == ["fill_kernel", "sum_kernel"]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (HALF_DISPATCH, "AT_DISPATCH_FLOATING_TYPES_AND_HALF is not handled"),
        (SYMBOL_FROM_HOST, "host code uses 'coeff' other than by launching it"),
        (HEAD + "__global__ void k(at::Half* x) {}\n", "uses torch in device code"),
        (HEAD + "#ifdef FOO\n__global__ void k(float* x) {}\n#endif\n", "preproc_ifdef is not handled"),
        (HEAD + "torch::Tensor f(torch::Tensor x) { return x; }\n", "no __global__ kernel"),
    ],
)
def test_sources_it_is_not_sure_about_are_left_to_the_stock_build(source: str, reason: str) -> None:
    with pytest.raises(SplitSkipped, match=re.escape(reason)):
        split_sources("", source)


def _nvcc(cuda: str, tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "unit.cu").write_text(cuda)
    return subprocess.run(
        [
            "nvcc",
            "-c",
            "-std=c++17",
            "-arch=sm_90",
            str(tmp_path / "unit.cu"),
            "-o",
            str(tmp_path / "unit.o"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("source", [DISPATCH, SEVERAL], ids=["dispatch", "several"])
def test_cuda_unit_compiles_with_nvcc_without_torch_and_exports_the_launchers(
    source: str, tmp_path: Path
) -> None:
    split = split_sources("", source)
    proc = _nvcc(split.cuda, tmp_path)
    assert proc.returncode == 0, proc.stderr
    symbols = subprocess.run(["nm", "-C", str(tmp_path / "unit.o")], capture_output=True, text=True).stdout
    for kernel in split.kernels:
        assert re.search(rf" [TW] .*{LAUNCH_PREFIX}{kernel}", symbols), symbols
    # the ablation switch (engine.eval.ablation) is exported under its C name, for ctypes
    assert re.search(rf" T {ABLATE_SETTER}$", symbols, re.M), symbols


def test_every_launcher_returns_before_launching_while_the_ablation_switch_is_on() -> None:
    split = split_sources("", SEVERAL)
    launchers = [line for line in split.cuda.splitlines() if line.startswith(("void " + LAUNCH_PREFIX, "template"))]
    bodies = [line for line in launchers if "<<<" in line]
    assert bodies and all("{ if (cf_ablated) return; " in line for line in bodies), bodies
    assert split.cuda.index(f"void {ABLATE_SETTER}(int on)") < split.cuda.index("<<<cf_grid")


# Macros torch's headers bring into a stock .cu, as a leaderboard softmax and others use them.
STD_MACROS = (
    HEAD
    + """
__global__ void row_max(const float* x, float* out, int n) {
    float m = -FLT_MAX;
    int limit = INT_MAX;
    assert(n < limit);
    for (int i = 0; i < n; ++i) m = fmaxf(m, x[i]);
    out[0] = m;
}

torch::Tensor row_max_cuda(torch::Tensor x) {
    auto out = torch::empty({1}, x.options());
    size_t bytes = sizeof(float);
    memset(nullptr, 0, 0 * bytes);
    row_max<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
"""
)


@pytest.mark.slow
@needs_nvcc
def test_the_cuda_unit_has_the_std_macros_the_stock_build_had(tmp_path: Path) -> None:
    split = split_sources("", STD_MACROS)
    proc = _nvcc(split.cuda, tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
@needs_nvcc
def test_a_compile_error_is_reported_against_the_candidates_own_line(tmp_path: Path) -> None:
    split = split_sources("", BROKEN)
    proc = _nvcc(split.cuda, tmp_path)
    line = BROKEN.splitlines().index("    out[i] = undefined_name * 2.0f;") + 1
    assert proc.returncode != 0
    assert f'cuda_sources({line}): error: identifier "undefined_name" is undefined' in proc.stderr


@pytest.mark.slow
def test_cpp_unit_compiles_against_torch_with_the_launcher_calls(tmp_path: Path) -> None:
    """The host side: launcher declarations, calls inside the AT_DISPATCH lambda, cpp_sources merged in.

    (This machine's CPU torch lacks the CUDA stream headers, so the stream variant is checked on the GPU.)
    """
    import sysconfig

    import torch.utils.cpp_extension as cpp_extension

    source = DISPATCH.replace("#include <c10/cuda/CUDAStream.h>\n", "").replace(
        "c10::cuda::getCurrentCUDAStream()", "0"
    )
    split = split_sources("torch::Tensor square_cuda(torch::Tensor x);", source)
    (tmp_path / "unit.cpp").write_text(split.cpp)
    includes = [f"-I{p}" for p in [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]]
    cuda_home = cpp_extension.CUDA_HOME or "/usr/local/cuda"
    proc = subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-fsyntax-only",
            *includes,
            f"-I{cuda_home}/include",
            str(tmp_path / "unit.cpp"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_macros_and_host_options_given_to_nvcc_still_reach_the_moved_host_code() -> None:
    from engine.eval.build.split.rewrite import host_flags

    given = ["-O3", "--use_fast_math", "-DTILE=16", "-D", "WIDE", "-Xcompiler", "-fopenmp,-Wall", "-UNDEBUG"]
    assert host_flags(given) == ["-DTILE=16", "-D", "WIDE", "-fopenmp", "-Wall", "-UNDEBUG"]
    assert host_flags(None) == []


class _Compiler:
    """Stands in for torch's load_inline, which cannot link CUDA extensions on this CPU-only machine;
    the real build is covered by tests/test_build_split_gpu.py."""

    def __init__(self, fail_split: bool) -> None:
        self.fail_split = fail_split
        self.calls: list[dict] = []

    def __call__(self, name, cpp_sources, cuda_sources, *args, **kwargs):  # noqa: ANN001, ANN204
        self.calls.append({"cpp": cpp_sources, "cuda": cuda_sources, **kwargs})
        if self.fail_split and kwargs.get("no_implicit_headers"):
            raise RuntimeError("Error building extension")
        return object()


@pytest.mark.parametrize("fail_split", [False, True], ids=["split", "falls-back"])
def test_the_build_hook_builds_split_and_falls_back_to_stock_when_that_fails(
    tmp_path: Path, fail_split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.eval.build.extension import BuildRecorder

    monkeypatch.delenv("CUDAFORGE_BUILD_SPLIT", raising=False)
    recorder = BuildRecorder(tmp_path, use_pch=False)
    recorder._original = compiler = _Compiler(fail_split)
    recorder._build(
        "ext", "torch::Tensor square_cuda(torch::Tensor x);", DISPATCH, (), {"extra_cuda_cflags": ["-DW=2"]}
    )
    first = compiler.calls[0]
    assert first["no_implicit_headers"] and first["cpp"].startswith("#include <torch/extension.h>")
    assert "torch/" not in first["cuda"] and first["extra_cflags"] == ["-DW=2"]
    [record] = recorder.builds
    if fail_split:
        assert len(compiler.calls) == 2 and compiler.calls[1]["cuda"] == DISPATCH
        assert record.path == "stock" and "split build failed" in (record.split_skipped or "")
    else:
        assert len(compiler.calls) == 1 and record.path == "split" and record.split_skipped is None


def test_the_build_hook_says_why_a_source_was_not_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.eval.build.extension import BuildRecorder

    recorder = BuildRecorder(tmp_path, use_pch=False)
    recorder._original = compiler = _Compiler(fail_split=False)
    recorder._build("ext", "", HALF_DISPATCH, (), {})
    assert compiler.calls[0]["cuda"] == HALF_DISPATCH
    assert recorder.builds[0].path == "stock" and "AND_HALF" in (recorder.builds[0].split_skipped or "")
    monkeypatch.setenv("CUDAFORGE_BUILD_SPLIT", "0")
    recorder._build("ext2", "", DISPATCH, (), {})
    assert (
        recorder.builds[1].path == "stock" and recorder.builds[1].split_skipped == "CUDAFORGE_BUILD_SPLIT=0"
    )
