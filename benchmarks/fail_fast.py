"""How fast a failing candidate reaches its verdict (issue 47; ARCHITECTURE.md §3, "Builds").

Three candidates, each evaluated once through ``cudaforge eval --json`` in a fresh build cache:

- ``own-error``: one CUDA kernel with an error in its own code (``blockIdx.q``). Goal: ``compile_error`` in
  at most 8 s with one build, the compiler's line first in the messages.
- ``unet-same``: a candidate shaped like a CUDA-L1 UNet, twenty modules each calling ``load_inline`` on the
  same failing source, catching the error and going on. Goal: a verdict in at most 3 minutes.
- ``unet-distinct``: the same with twenty different failing sources (each a new build), which only the
  build budget stops.

On a machine without a GPU the CUDA sources still compile (nvcc), so the figures are the builds'.

    python benchmarks/fail_fast.py --out DIR [--device cuda]

Writes DIR/fail_fast.jsonl (a row per candidate as it ends: its builds' paths, how many ninja runs failed,
the stages over half a second) and DIR/NAME.json (the whole verdict with its build log), and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "examples" / "tasks" / "relu.py"

KERNEL = r'''
__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.{axis} * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;{extra}
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
'''

HEAD = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor relu(torch::Tensor x);"
'''

OWN_ERROR = HEAD + '''
CUDA = """#include <torch/extension.h>
{kernel}"""
ext = load_inline(name="cf_failfast_own", cpp_sources=CPP, cuda_sources=CUDA, functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''

UNET = HEAD + '''
SOURCES = {sources}


class Block(nn.Module):
    def __init__(self, k):
        super().__init__()
        try:  # as a CUDA-L1 UNet did: each block builds its own kernel and falls back when that fails
            self.ext = load_inline(name=f"cf_failfast_block_{{k}}", cpp_sources=CPP, cuda_sources=SOURCES[k], functions=["relu"])
        except Exception:
            self.ext = None

    def forward(self, x):
        return self.ext.relu(x) if self.ext is not None else torch.relu(x)


blocks = [Block(k) for k in range(20)]


class ModelNew(nn.Module):
    def forward(self, x):
        for block in blocks[:1]:
            x = block(x)
        return x
'''


def candidates() -> dict[str, str]:
    broken = "#include <torch/extension.h>\n" + KERNEL.replace("{axis}", "x").replace("{extra}", " undefined_call();")
    distinct = [broken.replace("undefined_call();", f"undefined_call_{k}();") for k in range(20)]
    return {
        "own-error": OWN_ERROR.format(kernel=KERNEL.replace("{axis}", "q").replace("{extra}", "")),
        "unet-same": UNET.format(sources=repr([broken] * 20)),
        "unet-distinct": UNET.format(sources=repr(distinct)),
    }


def run_one(name: str, source: str, device: str, out: Path) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"failfast-{name}-"))
    kernel = folder / "kernel.py"
    kernel.write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), "CUDAFORGE_CACHE_DIR": str(folder / "cache")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "eval", str(TASK), str(kernel), "--device", device, "--json", "--no-timing"],
        capture_output=True, text=True, env=env, timeout=1200,
    )  # fmt: skip
    seconds = time.monotonic() - started
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {"status": f"no JSON (exit {done.returncode})", "messages": [done.stderr[-300:]]}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))  # the whole verdict, its build log too
    builds = (result.get("build") or {}).get("extensions") or []
    log = (result.get("build") or {}).get("log") or ""
    row = {
        "candidate": name,
        "status": result.get("status"),
        "seconds": round(seconds, 1),
        "builds": len(builds),
        "compiler_runs": log.count("FAILED: "),  # each failed ninja run prints one
        "paths": [f"{b.get('name')}:{b.get('path')}{'' if b.get('ok') else ' failed'}" for b in builds],
        "stage_s": {k: round(v, 1) for k, v in (result.get("durations") or {}).items() if v >= 0.5},
        "first_message": (result.get("messages") or [""])[0][:200],
        "last_message": (result.get("messages") or [""])[-1][:200],
    }
    with open(out / "fail_fast.jsonl", "a") as rows:
        rows.write(json.dumps(row) + "\n")
    print(
        f"{name:14} {row['status']:14} {row['seconds']:7.1f} s  {row['builds']:2} build(s) "
        f"{row['compiler_runs']:2} failed ninja run(s)  {row['first_message'][:90]}",
        flush=True,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", action="append", help="one candidate by name (repeatable)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fail_fast.jsonl").unlink(missing_ok=True)
    for name, source in candidates().items():
        if not args.only or name in args.only:
            run_one(name, source, args.device, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
