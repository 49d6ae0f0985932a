"""Cold and cached build times of new candidates: stock load_inline vs cudaforge's build path.

    python benchmarks/compile_latency.py [--out results.json]      (on a CUDA machine)

Five KernelBench-level-1-like kernels (vector add, ReLU, row softmax, tiled matmul, row sum), each
written two ways from the same kernel code:

- ``stock``: the layout CudaForge and KernelBench use — kernel and ``torch::Tensor`` wrapper in the
  CUDA source (so nvcc parses torch's headers), built by plain ``load_inline``;
- ``fast``: the format cudaforge teaches — kernel and a raw-pointer launcher in a torch-free CUDA
  source, the wrapper in the C++ source, ``no_implicit_headers=True`` — built through cudaforge's
  build hook, which adds its precompiled torch header for the C++ binding (engine.eval.build.pch).

Every build runs in a fresh process with a fresh build directory (cold), then again in a new
process (cached). Each kernel is checked against PyTorch after its build. Stock and fast builds
run five at a time (one per kernel) so both see the same machine load; cudaforge's path is also
run one build at a time, as the loop does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

KERNELS: dict[str, dict[str, str]] = {
    "add": {
        "kernel": """
__global__ void add_kernel(const float* a, const float* b, float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
void launch(const float* a, const float* b, float* out, long n, cudaStream_t s) {
    add_kernel<<<(n + 255) / 256, 256, 0, s>>>(a, b, out, n);
}""",
        "decl": "void launch(const float* a, const float* b, float* out, long n, cudaStream_t s);",
        "wrapper": """
torch::Tensor run(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    launch(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.numel(), STREAM);
    return out;
}""",
        "inputs": "[torch.randn(1 << 20, device='cuda'), torch.randn(1 << 20, device='cuda')]",
        "reference": "lambda a, b: a + b",
    },
    "relu": {
        "kernel": """
__global__ void relu_kernel(const float* x, float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
void launch(const float* x, float* out, long n, cudaStream_t s) {
    relu_kernel<<<(n + 255) / 256, 256, 0, s>>>(x, out, n);
}""",
        "decl": "void launch(const float* x, float* out, long n, cudaStream_t s);",
        "wrapper": """
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty_like(x);
    launch(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), STREAM);
    return out;
}""",
        "inputs": "[torch.randn(1 << 20, device='cuda')]",
        "reference": "torch.relu",
    },
    "softmax": {
        "kernel": """
__global__ void softmax_kernel(const float* x, float* out, int cols) {
    extern __shared__ float buf[];
    const float* row = x + (long)blockIdx.x * cols;
    float* dst = out + (long)blockIdx.x * cols;
    float m = -3.4e38f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    buf[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }
    m = buf[0];
    __syncthreads();
    float sum = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(row[c] - m);
    buf[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    sum = buf[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = expf(row[c] - m) / sum;
}
void launch(const float* x, float* out, int rows, int cols, cudaStream_t s) {
    softmax_kernel<<<rows, 256, 256 * sizeof(float), s>>>(x, out, cols);
}""",
        "decl": "void launch(const float* x, float* out, int rows, int cols, cudaStream_t s);",
        "wrapper": """
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty_like(x);
    launch(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1), STREAM);
    return out;
}""",
        "inputs": "[torch.randn(512, 1024, device='cuda')]",
        "reference": "lambda x: torch.softmax(x, dim=1)",
    },
    "matmul": {
        "kernel": """
#define TILE 16
__global__ void matmul_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(long)row * K + ka] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(long)kb * N + col] : 0.f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(long)row * N + col] = acc;
}
void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t s) {
    dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_kernel<<<grid, block, 0, s>>>(A, B, C, M, N, K);
}""",
        "decl": "void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t s);",
        "wrapper": """
torch::Tensor run(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    launch(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.size(0), b.size(1), a.size(1), STREAM);
    return out;
}""",
        "inputs": "[torch.randn(256, 384, device='cuda'), torch.randn(384, 320, device='cuda')]",
        "reference": "lambda a, b: a @ b",
    },
    "rowsum": {
        "kernel": """
__global__ void rowsum_kernel(const float* x, float* out, int cols) {
    __shared__ float buf[256];
    const float* row = x + (long)blockIdx.x * cols;
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}
void launch(const float* x, float* out, int rows, int cols, cudaStream_t s) {
    rowsum_kernel<<<rows, 256, 0, s>>>(x, out, cols);
}""",
        "decl": "void launch(const float* x, float* out, int rows, int cols, cudaStream_t s);",
        "wrapper": """
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    launch(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1), STREAM);
    return out;
}""",
        "inputs": "[torch.randn(1024, 2048, device='cuda')]",
        "reference": "lambda x: x.sum(dim=1)",
    },
}


def sources(kernel: str, layout: str, salt: str) -> tuple[str, str]:
    """(cpp_source, cuda_source) of one kernel in one layout; ``salt`` makes the source new (cold)."""
    spec = KERNELS[kernel]
    tag = f"// build {salt}\n"
    if layout == "stock":
        cuda = (
            tag
            + "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
            + spec["kernel"]
            + spec["wrapper"].replace("STREAM", "0")
        )
        cpp = "torch::Tensor run(" + spec["wrapper"].split("run(", 1)[1].split(")", 1)[0] + ");"
        return cpp, cuda
    cuda = tag + "#include <cuda_runtime.h>\n" + spec["kernel"]
    cpp = (
        "#include <torch/extension.h>\n#include <c10/cuda/CUDAStream.h>\n"
        + spec["decl"]
        + spec["wrapper"].replace("STREAM", "c10::cuda::getCurrentCUDAStream()")
    )
    return cpp, cuda


def build_one(kernel: str, layout: str, salt: str, build_dir: str, cache_root: str) -> dict:
    """In this (fresh) process: build, check against PyTorch, report seconds."""
    import torch
    import torch.utils.cpp_extension as cpp_extension

    cpp, cuda = sources(kernel, layout, salt)
    name = f"bench_{kernel}_{layout}_{salt}"
    record = None
    started = time.perf_counter()
    if layout == "stock":
        os.makedirs(build_dir, exist_ok=True)
        module = cpp_extension.load_inline(name, cpp, cuda, functions=["run"], build_directory=build_dir)
    else:
        from engine.eval.build.extension import BuildRecorder

        recorder = BuildRecorder(Path(cache_root))
        recorder.install()
        module = cpp_extension.load_inline(name, cpp, cuda, functions=["run"], no_implicit_headers=True)
        record = recorder.builds[-1]
    seconds = time.perf_counter() - started
    spec = KERNELS[kernel]
    torch.manual_seed(0)
    inputs = eval(spec["inputs"], {"torch": torch})  # noqa: S307 - the benchmark's own literals
    reference = eval(spec["reference"], {"torch": torch})  # noqa: S307
    got = module.run(*inputs)
    torch.cuda.synchronize()
    correct = bool(torch.allclose(got, reference(*inputs), atol=1e-3, rtol=1e-3))
    return {
        "kernel": kernel,
        "layout": layout,
        "seconds": seconds,
        "correct": correct,
        "pch": record.pch if record else "",
    }


def run_child(kernel: str, layout: str, salt: str, build_dir: str, cache_root: str) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    arguments = [sys.executable, __file__, "--one", kernel, layout, salt, build_dir, cache_root]
    done = subprocess.run(arguments, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        print(f"{kernel} {layout} {salt} failed:\n{done.stderr[-1500:]}\n{done.stdout[-1500:]}", flush=True)
        return {
            "kernel": kernel,
            "layout": layout,
            "seconds": None,
            "correct": False,
            "error": done.stderr[-2000:],
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def batch(layout: str, salt: str, work: Path, parallel: int) -> list[dict]:
    def job(kernel: str) -> dict:
        return run_child(kernel, layout, salt, str(work / f"{layout}-{kernel}-{salt}"), str(work / "cache"))

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(job, KERNELS))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(build_one(*sys.argv[2:7])))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    work = Path(tempfile.mkdtemp(prefix="cf-compile-"))
    results: dict[str, list[dict]] = {}
    # cudaforge's header is made once per machine and flag set: make it first and time that too.
    started = time.perf_counter()
    prime = run_child("add", "fast", "prime", str(work / "prime"), str(work / "cache"))
    while (
        not list((work / "cache" / "pch").glob("*/torch/extension.h.gch"))
        and time.perf_counter() - started < 600
    ):
        time.sleep(0.5)
    header_seconds = time.perf_counter() - started
    print(
        f"one-time: first fast build {prime['seconds']:.1f} s, precompiled header ready after {header_seconds:.1f} s",
        flush=True,
    )
    results["fast, one at a time, cold"] = [
        run_child(k, "fast", "serial", str(work / f"s-{k}"), str(work / "cache")) for k in KERNELS
    ]
    results["fast, 5 at a time, cold"] = batch("fast", "par", work, 5)
    results["stock, 5 at a time, cold"] = batch("stock", "cold", work, 5)
    results["fast, cached"] = batch("fast", "par", work, 5)
    results["stock, cached"] = batch("stock", "cold", work, 5)
    print(
        f"\ncompile latency on {torch.cuda.get_device_name()} · torch {torch.__version__} · arch {os.environ['TORCH_CUDA_ARCH_LIST']}"
    )
    print(f"{'':28}" + "".join(f"{k:>9}" for k in KERNELS) + f"{'median':>9}  all correct")
    for label, rows in results.items():
        secs = [r["seconds"] for r in rows]
        shown = "".join(f"{s:>8.1f}s" if s is not None else f"{'fail':>9}" for s in secs)
        ok = [s for s in secs if s is not None]
        median = statistics.median(ok) if ok else float("nan")
        print(
            f"{label:28}{shown}{median:>8.1f}s  {all(r['correct'] for r in rows)}  pch={[r.get('pch', '') for r in rows]}"
        )
    stock = [r["seconds"] for r in results["stock, 5 at a time, cold"] if r["seconds"]]
    fast = [r["seconds"] for r in results["fast, one at a time, cold"] if r["seconds"]]
    if stock and fast:
        ratio = statistics.median(stock) / statistics.median(fast)
        print(
            f"median cold: stock {statistics.median(stock):.1f} s vs cudaforge {statistics.median(fast):.1f} s → {ratio:.1f}× faster"
        )
    if args.out:
        args.out.write_text(
            json.dumps({"results": results, "header_seconds": header_seconds, "prime": prime}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
