"""The loop checks the task's reference before its first LLM call: a broken task costs no tokens.

``cudaforge run --headless`` as a real subprocess against the local fake OpenAI-compatible server
(tests/fake_llm_server.py), which records every request it gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO
from tests.fake_llm_server import FakeLLMServer
from tests.test_reference_check import MISMATCHED, SOMETIMES

pytestmark = pytest.mark.slow


def headless(task: Path, server: FakeLLMServer, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "cudaforge.toml").write_text("[eval]\ntrials = 5\ntiming_trials = 5\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "CUDAFORGE_CACHE_DIR": str(tmp_path / "cache"),
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "local-placeholder",
    }
    return subprocess.run(
        [
            sys.executable, "-m", "engine.cli_run", str(task), "--headless", "--auto-approve",
            "--device", "cpu", "--rounds", "1", "--coder", "openai/local-model",
            "--judge", "openai/local-model", "--sessions-dir", str(tmp_path / "s"),
        ],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("source", [MISMATCHED, SOMETIMES], ids=["every-seed", "one-seed"])
def test_a_broken_task_stops_the_loop_before_any_llm_request(source: str, tmp_path: Path) -> None:
    task = tmp_path / "broken.py"
    task.write_text(source)
    with FakeLLMServer() as server:
        done = headless(task, server, tmp_path)
        assert server.requests == []  # the loopback server saw nothing
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error in task: task error: the reference Model.forward failed" in done.stdout
    assert "line 8 of the task file (`return a + b`)" in done.stdout
    assert "iter 0 · seed" not in done.stdout  # the seed stage never started


def test_a_sound_task_reaches_the_llm(tmp_path: Path) -> None:
    """The control: the same command on a sound task does call the server (nothing scripted: it fails)."""
    with FakeLLMServer() as server:
        done = headless(EXAMPLES / "tasks" / "relu.py", server, tmp_path)
        assert server.requests, done.stdout + done.stderr
    assert done.returncode == 1 and "iter 0 · seed" in done.stdout
