"""Headless against a loopback LLM server: a broken task costs no tokens; an unpriced model, no fake $0.

The loop checks the task's reference before its first LLM call, so a broken task stops it with no
request made. A local model has no price, so its cost is "unknown", never $0.

``cudaforge run --headless`` as a real subprocess against the local fake OpenAI-compatible server
(tests/fake_llm_server.py), which records every request it gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, python_path
from tests.fake_llm_server import CHAT, FakeLLMServer, FakeResponse, chat_sse
from tests.test_reference_check import MISMATCHED, SOMETIMES

pytestmark = pytest.mark.slow


def headless(
    task: Path, server: FakeLLMServer, tmp_path: Path, cache: Path | None = None, rounds: str = "1"
) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "cudaforge.toml").write_text("[eval]\ntrials = 5\ntiming_trials = 5\n")
    env = {
        **os.environ,
        "PYTHONPATH": python_path(),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "CUDAFORGE_CACHE_DIR": str(cache or tmp_path / "cache"),
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "local-placeholder",
    }
    return subprocess.run(
        [
            sys.executable, "-m", "engine.cli.run", str(task), "--headless", "--auto-approve",
            "--device", "cpu", "--rounds", rounds, "--coder", "openai/local-model",
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


def test_a_weak_task_is_said_so_before_the_first_llm_request(tmp_path: Path) -> None:
    """The task check measures which outputs a degenerate answer would pass (issue 25) and says so."""
    weak = Path(__file__).parent / "fixtures" / "defences" / "softmax_wide.py"
    with FakeLLMServer() as server:
        done = headless(weak, server, tmp_path)
    note = done.stdout.index("weak task: a degenerate answer passes the value check for output (zeros, constant")
    assert note < done.stdout.index("iter 0 · seed"), done.stdout


def test_an_unpriced_local_model_shows_cost_unknown_not_zero(tmp_path: Path, ext_cache: Path) -> None:
    """The seed from a local OpenAI-compatible server (14k tokens, no price): the table says so."""
    reply = "Here is the kernel:\n```python\n" + (EXAMPLES / "kernels" / "relu_cpu.py").read_text() + "```\n"
    with FakeLLMServer() as server:
        server.enqueue(CHAT, FakeResponse(sse=chat_sse([reply], prompt_tokens=9000, completion_tokens=5000)))
        done = headless(EXAMPLES / "tasks" / "relu.py", server, tmp_path, cache=ext_cache, rounds="0")
        assert len(server.requests) == 1
    assert done.returncode == 0, done.stdout + done.stderr
    assert "→ correct" in done.stdout
    assert "total: 14000 tokens · cost unknown" in done.stdout
    assert "$0.0000" not in done.stdout


FLAKY = """import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        if os.path.exists({flag!r}):
            raise RuntimeError("the reference read a file that is now there")
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
"""


def test_a_reference_failing_later_stops_the_round_without_committing(
    tmp_path: Path, ext_cache: Path
) -> None:
    """The task passed its check, then its reference fails in an evaluation: a task error, not an iteration.

    The reference reads a flag file in the test's ``/tmp``; the sandbox gives the worker a private ``/tmp``,
    so this loop runs unsandboxed (the sandbox has its own tests)."""
    from engine.events import LoopError
    from engine.loop.machine import ERROR
    from sessions.repo import SessionRepo
    from tests.loop_helpers import make_loop

    flag = tmp_path / "flag"
    task = tmp_path / "flaky.py"
    task.write_text(FLAKY.format(flag=str(flag)))
    events: list = []
    with SessionRepo.create(tmp_path / "sessions", task, name="flaky") as session:
        loop = make_loop(session, ext_cache, "steady", events=events, sandbox="off")
        assert loop.step() is None and loop.stage == "evaluate"  # task check passed, seed written
        flag.write_text("")
        assert loop.step() == ERROR and loop.task_problem and "RuntimeError" in loop.task_problem
        assert session.history() == [] and loop.stage == "evaluate"  # nothing committed; redone next
        assert any(isinstance(e, LoopError) and e.stage == "task" for e in events)
        flag.unlink()
        assert loop.step() is None and loop.task_problem is None
        assert [it.status for it in session.history()] == ["correct"]
