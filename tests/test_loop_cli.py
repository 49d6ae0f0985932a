"""``cudaforge run --headless`` as a real subprocess: full runs, kill -9 and Ctrl-C, then resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions.records import REQUIRED_FILES
from sessions.repo import SessionRepo
from tests.conftest import python_path
from tests.loop_helpers import RELU_TASK, SCRIPTED

pytestmark = pytest.mark.slow

FAST_CONFIG = "[eval]\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n"


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "cudaforge.toml").write_text(FAST_CONFIG)
    return folder


def command(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "engine.cli.run",
        *args,
        "--headless",
        "--sessions-dir",
        str(tmp_path / "s"),
    ]


def scripted(scenario: str) -> list[str]:
    return [
        "--coder",
        f"scripted/{SCRIPTED / scenario / 'coder'}",
        "--judge",
        f"scripted/{SCRIPTED / scenario / 'judge'}",
    ]


def env(cache: Path, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": python_path(),
        "CUDAFORGE_CACHE_DIR": str(cache),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }


def run(cmd: list[str], cwd: Path, cache: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=env(cache, tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )


def start_and_wait_for(
    cmd: list[str], cwd: Path, cache: Path, tmp_path: Path, marker: str
) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env(cache, tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 300
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if marker in line:
            return proc, lines
        assert time.monotonic() < deadline, lines
    raise AssertionError(f"{marker!r} never printed:\n" + "\n".join(lines))


def assert_complete(session_dir: Path, numbers: list[int]) -> None:
    with SessionRepo.open(session_dir) as session:
        history = session.history()
        assert [it.number for it in history] == numbers
        for item in history:
            assert set(REQUIRED_FILES) <= set(item.files())
            assert item.eval_result["status"] == item.status
    fsck = subprocess.run(
        ["git", "fsck", "--full", "--strict"], cwd=session_dir, capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stderr


def test_headless_without_a_terminal_needs_auto_approve(tmp_path: Path, ext_cache: Path) -> None:
    done = run(command(tmp_path, str(RELU_TASK), *scripted("steady")), project(tmp_path), ext_cache, tmp_path)
    assert done.returncode == 2
    assert "--auto-approve" in done.stderr
    assert not (tmp_path / "s").exists()  # nothing was created


def test_config_typo_is_a_usage_error_naming_the_key(tmp_path: Path, ext_cache: Path) -> None:
    cwd = project(tmp_path)
    (cwd / "cudaforge.toml").write_text("[loop]\nrouns = 2\n")
    done = run(command(tmp_path, str(RELU_TASK), "--auto-approve"), cwd, ext_cache, tmp_path)
    assert done.returncode == 2
    assert "did you mean 'rounds'" in done.stderr


def test_kill_9_mid_round_then_resume_loses_nothing(tmp_path: Path, ext_cache: Path) -> None:
    cwd = project(tmp_path)
    first = command(
        tmp_path, str(RELU_TASK), "--auto-approve", "--rounds", "3", "--device", "cpu", "--name", "k9"
    )
    proc, lines = start_and_wait_for(
        first + scripted("steady"), cwd, ext_cache, tmp_path, "iter 2 · evaluate"
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    session_dir = tmp_path / "s" / "k9"
    assert_complete(session_dir, [0, 1])
    # resume: the rounds and models come from the session; the interrupted stage is redone, nothing before it
    done = run(
        command(tmp_path, "--session", "k9", "--auto-approve", "--device", "cpu"), cwd, ext_cache, tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    stage_lines = [
        line for line in done.stdout.splitlines() if line.startswith("iter ") and "·   " not in line
    ]
    assert stage_lines[0] == "iter 2 · evaluate (optimize)"
    assert_complete(session_dir, [0, 1, 2, 3])
    # the final table lists every iteration of the branch, and the best kernel
    table = done.stdout.split("loop rounds", 1)[1]
    assert [row.split()[0] for row in table.strip().splitlines()[1:5]] == ["0", "1", "2", "3"]
    assert "best: iter " in table and "kernel.py" in table


def test_ctrl_c_stops_cleanly_and_a_branch_continues(tmp_path: Path, ext_cache: Path) -> None:
    cwd = project(tmp_path)
    first = command(
        tmp_path, str(RELU_TASK), "--auto-approve", "--rounds", "2", "--device", "cpu", "--name", "cc"
    )
    proc, _ = start_and_wait_for(first + scripted("steady"), cwd, ext_cache, tmp_path, "iter 1 · evaluate")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert "loop paused" in out
    session_dir = tmp_path / "s" / "cc"
    assert_complete(session_dir, [0, 1])  # the evaluation in flight finished and was committed
    with SessionRepo.open(session_dir) as session:
        session.branch_from(0, name="alt")
    done = run(
        command(
            tmp_path, "--session", str(session_dir), "--branch", "alt", "--auto-approve", "--rounds", "1"
        ),
        cwd,
        ext_cache,
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "branch alt" in done.stdout
    assert "plan: 1 more round(s), iterations 1–1" in done.stdout
    with SessionRepo.open(session_dir) as session:
        assert [it.number for it in session.history("alt")] == [0, 1]
        assert [it.number for it in session.history("main")] == [0, 1]
        assert session.history("alt")[1].sha != session.history("main")[1].sha
    # on a resume --rounds N means N more rounds: the same command adds iteration 2 to alt
    again = command(tmp_path, "--session", str(session_dir), "--branch", "alt", "--auto-approve", "--rounds", "1")
    done = run(again, cwd, ext_cache, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plan: 1 more round(s), iterations 2–2" in done.stdout
    assert "this run: 1 new iteration(s), 2–2" in done.stdout
    # and zero more rounds says that nothing was run, instead of exiting silently
    nothing = command(tmp_path, "--session", str(session_dir), "--branch", "alt", "--auto-approve", "--rounds", "0")
    done = run(nothing, cwd, ext_cache, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plan: nothing to run — the branch is at iteration 2" in done.stdout
    assert "this run: no new iteration" in done.stdout
    with SessionRepo.open(session_dir) as session:
        assert [it.number for it in session.history("alt")] == [0, 1, 2]


def test_headless_output_shows_flags_and_refusals() -> None:
    import io

    from engine.cli.run import Printer
    from engine.events import EvalFinished

    out = io.StringIO()
    result = {
        "status": "correct",
        "speedup": 27.5,
        "flags": ["speedup 27.50x is above the 10x review threshold"],
        "messages": ["refused by the runtime guard [x]: y", "kernels launched by one forward: k"],
    }
    Printer(out)(EvalFinished(iteration=1, result=result))
    text = out.getvalue()
    assert "→ correct · 27.50x" in text
    assert "! speedup 27.50x is above the 10x review threshold" in text
    assert "! refused by the runtime guard [x]: y" in text and "kernels launched" not in text
