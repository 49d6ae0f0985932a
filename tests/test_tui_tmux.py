"""``cudaforge new`` in a real terminal (tmux) honours ./cudaforge.toml: sessions dir, models, policy.

Everything is real: the console entry point, the project config file, the loop with scripted
agents, the evaluator's CPU build (cached by content) and the session repository. The test types
`r` as a user would and reads the session the run left in the configured folder.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, REPO, python_path

STEADY = REPO / "tests" / "fixtures" / "scripted" / "steady"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (.ci/run installs it)"),
]


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


def test_new_in_tmux_uses_the_project_sessions_dir_models_and_policy(tmp_path: Path, ext_cache: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    sessions = tmp_path / "mysessions"
    coder, judge = f"scripted/{STEADY}/coder", f"scripted/{STEADY}/judge"
    (project / "cudaforge.toml").write_text(
        f'[sessions]\ndir = "{sessions}"\n[models]\ncoder = "{coder}"\njudge = "{judge}"\n'
        '[loop]\nrounds = 1\napproval = "auto"\n[eval]\ndevice = "cpu"\ntrials = 2\ntiming_trials = 10\n'
    )
    shutil.copy(EXAMPLES / "tasks" / "relu.py", project / "relu.py")
    env = {
        "PYTHONPATH": python_path(),
        "CUDAFORGE_CACHE_DIR": str(ext_cache),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),  # the default root: nothing may land there
        "TERM": "xterm-256color",
        "CUDAFORGE_NO_ANIMATION": "1",
    }
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = (
        f"cd {shlex.quote(str(project))} && env {exports} {shlex.quote(sys.executable)} -m tui.cli new relu.py; "
        "echo EXITED $?; sleep 30"
    )
    name = f"cf-test-{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "40", command], check=True)
    try:
        assert _wait(lambda: "live 0/0 · mai" in _screen(name), 60), _screen(name)  # the live workbench is up (80 columns end it in "…")
        subprocess.run(["tmux", "send-keys", "-t", name, "r"], check=True)

        def two_iterations() -> bool:
            found = list(sessions.glob("*/HEAD"))
            if not found:
                return False
            with SessionRepo.open(found[0].parent) as repo:
                return len(repo.history()) >= 2

        assert _wait(two_iterations, 300), _screen(name)
        time.sleep(1.0)
        subprocess.run(["tmux", "send-keys", "-t", name, "q"], check=True)
        assert _wait(lambda: "EXITED 0" in _screen(name), 30), _screen(name)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
    assert not (tmp_path / "data").exists()  # the configured sessions dir, not the default root
    (session_dir,) = [p.parent for p in sessions.glob("*/HEAD")]
    with SessionRepo.open(session_dir) as repo:
        history = repo.history()
        assert [it.number for it in history] == [0, 1]
        assert history[0].coder == coder and history[1].judge == judge
        assert history[1].suggestion["approved_by"] == "policy:auto"
