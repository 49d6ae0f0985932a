"""A stopped ``cudaforge run --headless`` prints the exact command that resumes it, and that command works."""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.loop_helpers import RELU_TASK
from tests.test_loop_cli import command, project, run, scripted, start_and_wait_for

pytestmark = pytest.mark.slow


def test_the_first_ctrl_c_prints_the_command_that_resumes(tmp_path: Path, ext_cache: Path) -> None:
    cwd = project(tmp_path)
    first = command(
        tmp_path, str(RELU_TASK), "--auto-approve", "--rounds", "1", "--device", "cpu", "--name", "rs"
    )
    proc, _ = start_and_wait_for(first + scripted("steady"), cwd, ext_cache, tmp_path, "iter 0 · evaluate")
    proc.send_signal(signal.SIGINT)  # once: the seed's evaluation finishes and is committed
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    lines = [line for line in out.splitlines() if line.startswith("resume: ")]
    session_dir = (tmp_path / "s" / "rs").resolve()
    expected = f"cudaforge run --session rs --headless --sessions-dir {session_dir.parent} --auto-approve"
    assert lines == [f"resume: {expected}"], out
    with SessionRepo.open(session_dir) as session:
        assert [it.number for it in session.history()] == [0]

    # the printed command, as typed (cudaforge is `python -m tui.cli` here), finishes the session's rounds
    words = shlex.split(lines[0].removeprefix("resume: "))
    done = run([sys.executable, "-m", "tui.cli", *words[1:]], cwd, ext_cache, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resume: " not in done.stdout
    with SessionRepo.open(session_dir) as session:
        assert [it.number for it in session.history()] == [0, 1]
