"""On a GPU: a real round's prompts carry the device's spec, and the Judge every measured NCU value.

The headless loop runs a CUDA task with scripted replies, real builds, real timing and real ncu; the
test then reads the prompts back from the session's transcripts (issue #19's completeness, end to end).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.profile.metric_table import requested_metrics
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, REPO

pytestmark = pytest.mark.gpu

SCRIPTED = REPO / "tests" / "fixtures" / "scripted" / "cuda_steady"


def _number(cell: str) -> float:
    return float(re.match(r"-?[\d,]*\.?\d+(e[-+]?\d+)?", cell.strip()).group(0).replace(",", ""))


def test_a_real_round_gives_the_judge_every_metric_and_both_agents_the_gpu(
    tmp_path: Path, ext_cache: Path
) -> None:
    sessions = tmp_path / "sessions"
    env = {**os.environ, "CUDAFORGE_CACHE_DIR": str(ext_cache)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    cmd = [
        sys.executable, "-m", "engine.cli.run", str(EXAMPLES / "tasks" / "relu_large.py"), "--headless",
        "--auto-approve", "--rounds", "1", "--device", "cuda", "--sessions-dir", str(sessions),
        "--coder", f"scripted/{SCRIPTED / 'coder'}", "--judge", f"scripted/{SCRIPTED / 'judge'}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    print(done.stdout[-4000:], done.stderr[-2000:])
    assert done.returncode == 0
    session = SessionRepo.open(next(p for p in sessions.iterdir() if p.is_dir()))
    seed, first = session.history()
    gpu = seed.eval_result["env"]["gpu"]
    seed_call = seed.transcript[0]
    assert f"GPU: {gpu}" in seed_call["system"] and "Correctness bar" in seed_call["system"]
    judge = next(c for c in first.transcript if c["role"] == "judge")
    prompt = judge["messages"][0]["content"]
    assert f"GPU: {gpu}" in prompt and "SMs" in prompt
    profile = seed.profile
    assert profile["kind"] == "ncu", profile.get("unavailable")
    assert len(profile["metrics"]) == 1  # relu: one own kernel, so the table's first column is it
    requested = requested_metrics(profile["command"])
    checked = 0
    for values in profile["metrics"].values():
        for name in requested:
            value = (values.get(name) or [None])[0]
            if not isinstance(value, (int, float)):
                continue
            row = next(line for line in prompt.splitlines() if line.startswith(f"{name} | "))
            assert _number(row.split(" | ")[1]) == pytest.approx(value, rel=1e-3, abs=1e-9), row
            checked += 1
    print(f"checked {checked} measured values in the Judge's prompt")
    assert checked >= 30
    session.close()
