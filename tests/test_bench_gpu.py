"""The torch.compile baseline on the GPU: compiled (Triton) and eager reference timed side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, python_path

pytestmark = pytest.mark.gpu


def test_compile_baseline_times_compiled_and_eager_with_cuda_events(tmp_path: Path) -> None:
    (tmp_path / "cudaforge.toml").write_text("[eval]\ntiming_trials = 50\ntiming_budget_s = 5.0\n")
    out = tmp_path / "baseline.json"
    env = {**os.environ, "PYTHONPATH": python_path(), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run(
        [sys.executable, "-m", "engine.bench.compile_baseline", str(EXAMPLES / "tasks" / "relu_large.py"),
         "--device", "cuda", "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    print(done.stdout)
    assert data["device"] == "cuda" and data["method"] == "cuda-events" and data["gpu"]
    assert data["compiled_matches"] is True and data["trials"] >= 50
    # ReLU over 32 M floats is memory-bound: compiled and eager move the same bytes, so within 2x
    assert 0.5 < data["eager_ms"] / data["compiled_ms"] < 2.0
