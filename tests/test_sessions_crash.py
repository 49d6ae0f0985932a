"""Crash safety: SIGKILL a real writer at random moments; the repository must stay sound.

After every kill, ``git fsck --full --strict`` must accept the repository, it must open normally,
and every iteration its history lists must be complete: all files readable and all of them from
the same write (each file carries the iteration's marker).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sessions.listing import list_sessions
from sessions.paths import is_session_dir
from sessions.records import REQUIRED_FILES
from sessions.repo import SessionRepo
from tests.conftest_sessions import TASK_SOURCE, child_env, spawn_python, wait_for_line

# Large files widen the window in which a kill lands in the middle of writing objects.
WRITER = """
import sys
from sessions.repo import SessionRepo
repo = SessionRepo.open(sys.argv[1])
repo.acquire_lock()
n = len(repo.history())
print("ready", flush=True)
while True:
    marker = f"m{n}"
    repo.record_iteration(
        kernel_source=f"# {marker}\\n" + "x = 1\\n" * 4000,
        eval_result={"status": "correct", "speedup": 1.0 + n / 100, "marker": marker, "log": "y" * 60000},
        phase="seed" if n == 0 else "optimize",
        transcript=[{"marker": marker, "reply": "z" * 120000}, {"marker": marker}],
        profile={"marker": marker}, suggestion={"marker": marker},
        coder="scripted/coder", judge="scripted/judge", tokens=n, cost_usd=0.0,
    )
    n += 1
"""

CREATOR = """
import sys
from sessions.repo import SessionRepo
print("ready", flush=True)
while True:
    SessionRepo.create(sys.argv[1], task_source="print('task')\\n" * 3000, task_name="crashy").close()
"""


def assert_fsck_clean(path: Path) -> None:
    done = subprocess.run(
        ["git", "fsck", "--full", "--strict", "--no-dangling"],
        cwd=path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"git fsck failed in {path}:\n{done.stdout}\n{done.stderr}"
    for word in ("error", "missing", "broken", "corrupt", "bad "):
        assert word not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr


def assert_every_iteration_complete(path: Path) -> int:
    with SessionRepo.open(path) as repo:
        history = repo.history()
        assert [it.number for it in history] == list(range(len(history)))
        for item in history:
            marker = f"m{item.number}"
            assert set(REQUIRED_FILES) <= set(item.files())
            assert item.kernel_source.splitlines()[0] == f"# {marker}"
            assert item.eval_result["marker"] == marker
            assert [call["marker"] for call in item.transcript] == [marker, marker]
            assert item.profile == {"marker": marker}
            assert item.suggestion == {"marker": marker}
            assert json.loads(item.read_text("eval.json"))["status"] == item.status == "correct"
            assert item.read_text("task.py") == TASK_SOURCE
        return len(history)


@pytest.mark.slow
def test_kill_9_while_recording_leaves_a_sound_repository(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    with SessionRepo.create(tmp_path, task_source=TASK_SOURCE, task_name="add", name="crash") as repo:
        path = repo.path
    counts = []
    for _ in range(8):
        writer = spawn_python(WRITER, str(path))
        wait_for_line(writer, "ready")
        time.sleep(rng.uniform(0.0, 0.6))
        assert writer.poll() is None, f"writer died on its own (seed {seed}): {writer.communicate()[1]}"
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=30)
        assert_fsck_clean(path)
        counts.append(assert_every_iteration_complete(path))
    assert counts == sorted(counts), f"history shrank (seed {seed}): {counts}"
    assert counts[-1] >= 4, f"the writer hardly wrote anything (seed {seed}): {counts}"

    # the session carries on normally: the dead writer's lock is taken over, the next number follows
    with SessionRepo.open(path) as repo:
        with pytest.warns(UserWarning, match="stale writer lock"):
            number = repo.record_iteration(
                kernel_source=f"# m{counts[-1]}\n",
                eval_result={"status": "correct", "speedup": 1.0, "marker": f"m{counts[-1]}"},
                transcript=[{"marker": f"m{counts[-1]}"}] * 2,
                profile={"marker": f"m{counts[-1]}"},
                suggestion={"marker": f"m{counts[-1]}"},
            )
        assert number == counts[-1]
    assert_fsck_clean(path)
    assert not list(path.rglob("*.lock")), "stale git lock files were left behind"


@pytest.mark.slow
def test_kill_9_while_creating_sessions_leaves_only_whole_sessions(tmp_path: Path) -> None:
    rng = random.Random()
    root = tmp_path / "root"
    for _ in range(4):
        creator = spawn_python(CREATOR, str(root))
        wait_for_line(creator, "ready")
        time.sleep(rng.uniform(0.05, 0.5))
        creator.send_signal(signal.SIGKILL)
        creator.communicate(timeout=30)
    sessions = [p for p in root.iterdir() if not p.name.startswith(".") and is_session_dir(p)]
    assert sessions, "no session was created before the kills"
    assert {s.path for s in list_sessions(root)} == {p.resolve() for p in sessions}
    for path in sessions:
        assert_fsck_clean(path)
        with SessionRepo.open(path) as repo:
            assert repo.task_name == "crashy"
            assert repo.history() == []
            assert repo.task_source == "print('task')\n" * 3000


RECORD_ONE = """
import sys
from sessions.repo import SessionRepo
with SessionRepo.open(sys.argv[1]) as repo:
    repo.record_iteration(
        kernel_source="x = 1\\n", eval_result={"status": "correct", "speedup": 1.0}, phase="seed",
        transcript=[], coder="scripted/coder", judge="scripted/judge", tokens=0, cost_usd=0.0,
    )
print("recorded", flush=True)
"""


def test_objects_are_written_in_process_so_no_git_child_outlives_a_killed_writer(tmp_path: Path) -> None:
    """A writer must not hand an object's bytes to a ``git`` child: killed mid-pipe, that child still
    writes what it got, a truncated object (this is how a kill once left a "bogus commit object").
    Every git command the writer runs goes through a logging wrapper; none may be ``hash-object``."""
    real_git = shutil.which("git")
    assert real_git is not None
    bin_dir, log = tmp_path / "bin", tmp_path / "git-calls.log"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real_git}" "$@"\n')
    wrapper.chmod(0o755)
    with SessionRepo.create(tmp_path, task_source=TASK_SOURCE, task_name="add", name="s") as repo:
        path = repo.path
    env = child_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    writer = spawn_python(RECORD_ONE, str(path), env=env)
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0 and "recorded" in out, err
    calls = log.read_text().splitlines()
    assert any(c.startswith("update-ref") for c in calls), calls  # the wrapper really saw the writer's git
    assert not [c for c in calls if c.startswith("hash-object")], calls
    assert_fsck_clean(path)
