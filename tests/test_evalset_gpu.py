"""``cudaforge evalset`` on a GPU: memory-aware phase 1, CUDA-event timing in phase 2, Ray with GPUs.

Two ReLU tasks with 2 GiB of inputs (and 2 GiB of output) each reserve 1 + 1.25 × (3·2 + 5·2) = 21 GiB
apiece; with ``--gpu-budget 30`` they must never be checked at the same time, while a small task may
run beside either of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, python_path

pytestmark = pytest.mark.gpu

BIG_TASK = (
    (EXAMPLES / "tasks" / "relu_large.py")
    .read_text()
    .replace("batch_size = 4096", "batch_size = 16384")
    .replace("dim = 8192", "dim = 32768")
)
GiB = 1 << 30


def make_pairs(root: Path) -> Path:
    pairs = root / "pairs"
    for name, task in (
        ("small", (EXAMPLES / "tasks" / "relu.py").read_text()),
        ("big_a", BIG_TASK),
        ("big_b", BIG_TASK),
    ):
        (pairs / name).mkdir(parents=True)
        (pairs / name / "task.py").write_text(task)
        shutil.copy(EXAMPLES / "kernels" / "relu_cuda.py", pairs / name / "kernel.py")
    return pairs


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "cudaforge.toml").write_text("[eval]\ntiming_trials = 50\ntiming_budget_s = 5.0\n")
    env = {**os.environ, "PYTHONPATH": python_path()}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "engine.cli.evalset", *args, "--device", "cuda", "--progress", "lines"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)


def test_big_tasks_are_never_checked_together_and_timing_uses_cuda_events(tmp_path: Path) -> None:
    assert "batch_size = 16384" in BIG_TASK
    pairs, out = make_pairs(tmp_path), tmp_path / "out"
    done = run(
        tmp_path, str(pairs), "--out", str(out), "--gpus", "0", "--gpu-budget", "30", "--build-workers", "3"
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {n: json.loads((out / "checks" / f"{n}.json").read_text()) for n in ("small", "big_a", "big_b")}
    assert all(c["status"] == "correct" for c in checks.values()), {
        n: c["messages"] for n, c in checks.items()
    }
    big_a, big_b = checks["big_a"]["evalset"], checks["big_b"]["evalset"]
    assert big_a["footprint"]["input_bytes"] == 2 * GiB and big_a["reserved_bytes"] == 21 * GiB
    assert big_a["gpu"] == big_b["gpu"] == 0
    apart = big_a["finished_at"] <= big_b["started_at"] or big_b["finished_at"] <= big_a["started_at"]
    assert apart, (big_a, big_b)
    summary = json.loads((out / "summary.json").read_text())
    run_stats = summary["time"]["this_run"]
    assert run_stats["gpu_budgets_bytes"] == {"0": 30 * GiB}
    assert run_stats["gpu_peak_reserved_bytes"]["0"] <= 30 * GiB
    for name in ("small", "big_a", "big_b"):
        result = json.loads((out / "results" / f"{name}.json").read_text())
        assert result["status"] == "correct" and result["timing"]["method"] == "cuda-events"
        assert result["evalset"]["phase"] == 2 and result["speedup"] > 0
    assert summary["set"]["correct"] == 3 and summary["timing_spread"]["n"] == 3


def test_ray_on_gpus_gives_phase_two_a_whole_gpu(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    pairs, out = make_pairs(tmp_path), tmp_path / "out"
    shutil.rmtree(pairs / "big_b")
    done = run(tmp_path, str(pairs), "--out", str(out), "--ray", "auto")
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("small", "big_a"):
        result = json.loads((out / "results" / f"{name}.json").read_text())
        assert result["status"] == "correct" and result["timing"]["method"] == "cuda-events"
        assert result["evalset"]["gpu"] is not None  # Ray set CUDA_VISIBLE_DEVICES for the task
