"""What the command line reports when something is wrong (issue #23.8), through the real entry point.

Each case runs ``python -m tui.cli`` in a subprocess, as a user would type it; the failing-run case
points the real ``openai`` client at tests/fake_llm_server.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, python_path
from tests.fake_llm_server import FakeLLMServer

TASK = EXAMPLES / "tasks" / "relu.py"
KERNEL = EXAMPLES / "kernels" / "relu_cpu.py"


def cudaforge(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    full = {
        **clean,
        "PYTHONPATH": python_path(),
        "XDG_CONFIG_HOME": str(cwd / "xdg-config"),
        "XDG_DATA_HOME": str(cwd / "xdg-data"),
        "XDG_STATE_HOME": str(cwd / "xdg-state"),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=cwd,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_check_agrees_with_eval_on_a_kernel_that_is_not_python_and_a_broken_task(tmp_path: Path) -> None:
    cu = tmp_path / "k.cu"
    cu.write_text("__global__ void k() {}\n")
    not_python = cudaforge("check", str(TASK), str(cu), cwd=tmp_path)
    assert not_python.returncode == 1, not_python.stdout  # eval: compile error, exit 1
    assert "would NOT build" in not_python.stdout and "would build" not in not_python.stdout
    task = tmp_path / "broken.py"
    task.write_text("import torch\nclass Model(:\n")
    broken = cudaforge("check", str(task), str(KERNEL), cwd=tmp_path)
    assert broken.returncode == 2  # eval: a task error, exit 2
    assert f"{task} has a syntax error at line 2" in broken.stderr


@pytest.mark.slow
def test_eval_names_the_users_file_not_kernel_py(tmp_path: Path, ext_cache: Path) -> None:
    cu = tmp_path / "mykernel.cu"
    cu.write_text("__global__ void k() {}\n")
    done = cudaforge(
        "eval", str(TASK), str(cu), "--device", "cpu", cwd=tmp_path, env={"CUDAFORGE_CACHE_DIR": str(ext_cache)}
    )
    assert done.returncode == 1
    assert "(mykernel.cu, line 1)" in done.stdout and "kernel.py" not in done.stdout


def test_a_model_flag_without_a_provider_is_reported_as_the_flag(tmp_path: Path) -> None:
    for command in (["run", str(TASK), "--headless"], ["new", str(TASK)]):
        done = cudaforge(*command, "--coder", "o3", cwd=tmp_path)
        assert done.returncode == 2
        assert "argument --coder: 'o3' is not provider/model" in done.stderr and "[models]" not in done.stderr
    assert not (tmp_path / "xdg-data").exists()  # no session was made


def test_a_model_that_cannot_run_leaves_no_empty_session(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    for command in (["run", str(TASK), "--headless", "--auto-approve"], ["new", str(TASK)]):
        done = cudaforge(
            *command, "--coder", "openai/o3", "--judge", "openai/o3", "--sessions-dir", str(sessions), cwd=tmp_path
        )
        assert done.returncode == 2 and "no API key; set OPENAI_API_KEY" in done.stderr
        assert not sessions.exists() or not any(sessions.iterdir()), list(sessions.iterdir())


@pytest.mark.slow
def test_a_run_that_committed_nothing_does_not_claim_a_guard_it_never_used(tmp_path: Path, ext_cache: Path) -> None:
    """The seed call fails (the server answers 500 with no retry): the summary must not read a session
    without committed iterations as 'guard strict (recorded before policies)'. The session records its
    settings when it is made (so a run stopped before its seed resumes as it began): the guard it was
    made with is what the summary says."""
    with FakeLLMServer() as server:
        done = cudaforge(
            "run",
            str(TASK),
            "--headless",
            "--auto-approve",
            "--device",
            "cpu",
            "--rounds",
            "0",
            "--coder",
            "openai/gpt-4o",
            "--judge",
            "openai/gpt-4o",
            "--sessions-dir",
            str(tmp_path / "sessions"),
            cwd=tmp_path,
            env={
                "OPENAI_BASE_URL": server.openai_base_url,
                "OPENAI_API_KEY": "sk-test",
                "CUDAFORGE_CACHE_DIR": str(ext_cache),
            },
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "guard default" in done.stdout.splitlines()[0]  # what the run used, said at the start
    assert "recorded before policies" not in done.stdout
    assert "\nguard default\n" in done.stdout  # the summary's guard line: the session's recorded setting
