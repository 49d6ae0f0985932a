"""The loop once on a GPU with a CUDA task and scripted replies: real builds, checks, timings and NCU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, REPO

pytestmark = pytest.mark.gpu

SCRIPTED = REPO / "tests" / "fixtures" / "scripted" / "cuda_steady"


def test_two_rounds_on_cuda_with_profiling(tmp_path: Path, ext_cache: Path) -> None:
    sessions = tmp_path / "sessions"
    env = {**os.environ, "CUDAFORGE_CACHE_DIR": str(ext_cache)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    cmd = [
        sys.executable, "-m", "engine.cli.run", str(EXAMPLES / "tasks" / "relu_large.py"), "--headless",
        "--auto-approve", "--rounds", "2", "--device", "cuda", "--sessions-dir", str(sessions),
        "--coder", f"scripted/{SCRIPTED / 'coder'}", "--judge", f"scripted/{SCRIPTED / 'judge'}",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    print(done.stdout[-4000:], done.stderr[-2000:])
    assert done.returncode == 0
    session = SessionRepo.open(next(p for p in sessions.iterdir() if p.is_dir()))
    history = session.history()
    assert [it.number for it in history] == [0, 1, 2]
    assert all(it.status == "correct" for it in history)
    profile = json.loads(session.read_file(history[0].number, "profile.json"))
    assert profile["kind"] == "ncu", profile.get("unavailable")
    for it in history:
        stages = json.loads(session.read_file(it.number, "loop.json")).get("stage_seconds", {})
        print(f"iteration {it.number}: {stages}")
