"""The model path on a GPU: device time per module from the kernels themselves, a hardware floor per
module, a CUDA kernel applied to a transformers Llama in bf16 and checked whole, and a model too large
for the device as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO, python_path

pytestmark = pytest.mark.gpu
LLAMA = REPO / "tests" / "fixtures" / "model" / "llama_tiny.py"
TINY = EXAMPLES / "models" / "tiny_mlp.py"


def cudaforge(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": python_path()}
    if cache is not None:
        env["CUDAFORGE_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, env=env, timeout=900)


def test_a_cuda_profile_attributes_kernel_time_to_modules_and_gives_floors(tmp_path: Path) -> None:
    done = cudaforge("profile", f"{TINY}:make_model", "--input-shape", "4096,32", "--dtype", "bf16", "--device", "cuda", "--json", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stderr
    profile = json.loads((tmp_path / "p.json").read_text())
    modules = {m["path"]: m for m in profile["modules"]}
    assert profile["gpu"] and profile["device_ms"] > 0
    linear = modules["blocks.0.fc1"]
    assert linear["self_ms"] > 0 and linear["self_ms"] == linear["total_ms"]
    assert sum(m["share"]["self"] for m in profile["modules"]) == pytest.approx(1.0, abs=0.02)
    if profile["gpu_spec"]:  # a GPU of the spec table: every module gets its floor and its headroom
        assert linear["floor"]["floor_ms"] > 0 and linear["headroom"] > 1
        assert linear["floor"]["bound"] in ("bandwidth", "flops")


def test_a_cuda_kernel_applied_to_a_transformers_llama_is_checked_whole(tmp_path: Path, ext_cache: Path) -> None:
    pytest.importorskip("transformers")
    model = [f"{LLAMA}:make_model", "--inputs", f"{LLAMA}:example_inputs", "--dtype", "bf16", "--device", "cuda"]
    done = cudaforge("extract", *model, "--path", "model.norm", "--out", str(tmp_path / "tasks"))
    assert done.returncode == 0, done.stderr
    kernel = EXAMPLES / "models" / "kernels" / "llama_rmsnorm_cuda.py"
    done = cudaforge(
        "apply", *model, "--kernel", f"{tmp_path / 'tasks' / 'tasks' / 'llama_rmsnorm.py'}={kernel}",
        "--json", str(tmp_path / "apply.json"), "--export", str(tmp_path / "optimized.py"), "--verify", cache=ext_cache,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads((tmp_path / "apply.json").read_text())
    assert report["kernels"][0]["status"] == "correct" and len(report["kernels"][0]["paths"]) == 5
    assert report["whole"]["status"] == "correct" and report["whole"]["speedup"] > 0
    assert (tmp_path / "optimized.py").is_file()


def test_a_model_that_does_not_fit_the_device_is_one_line(tmp_path: Path) -> None:
    huge = tmp_path / "huge.py"
    huge.write_text("import torch.nn as nn\n\ndef make():\n    return nn.Linear(1 << 20, 1 << 20)\n")
    done = cudaforge("profile", f"{huge}:make", "--input-shape", "2,1048576", "--device", "cuda")
    assert done.returncode == 2
    [line] = [x for x in done.stderr.splitlines() if not x.endswith("…")]  # the rest are progress lines
    assert line.startswith("cudaforge profile: the model does not fit on cuda: ")
