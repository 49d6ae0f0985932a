"""A first step that cannot succeed leaves no session behind: ``new`` refuses a task that does not load
before making one, and a headless run whose first LLM call finds no server removes the session it made."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, python_path
from tests.loop_helpers import RELU_TASK
from tests.test_loop_cli import FAST_CONFIG, command, run

BROKEN_TASK = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\ndef get_inputs():\n    return [torch.randn(4)]\n"


def test_new_refuses_a_task_that_does_not_load_and_makes_nothing(tmp_path: Path) -> None:
    task = tmp_path / "broken.py"
    task.write_text(BROKEN_TASK)
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "new", str(task), "--sessions-dir", str(tmp_path / "s")],
        capture_output=True, text=True, cwd=REPO, timeout=120,
        env={**os.environ, "PYTHONPATH": python_path(), "XDG_CONFIG_HOME": str(tmp_path / "xdg")},
    )  # fmt: skip
    assert done.returncode == 2
    assert (
        done.stderr.startswith(f"cudaforge: {task} does not define get_init_inputs")
        and done.stderr.count("\n") == 1
    )
    assert not (tmp_path / "s").exists()


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_a_run_whose_first_call_finds_no_server_leaves_no_session(
    tmp_path: Path, ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "cudaforge.toml").write_text(FAST_CONFIG + "[providers.openai]\nmax_retries = 0\n")
    cmd = command(tmp_path, str(RELU_TASK), "--auto-approve", "--device", "cpu", "--name", "dead")
    cmd += ["--coder", "openai/local-coder", "--judge", "openai/local-judge"]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")  # the run's environment
    monkeypatch.setenv("OPENAI_API_KEY", "local-placeholder")
    done = run(cmd, cwd, ext_cache, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error in seed: openai/local-coder: cannot reach the server" in done.stdout
    assert "cudaforge run: removed session dead: it stopped before its first iteration" in done.stderr
    assert list((tmp_path / "s").iterdir()) == []
