"""The workbench driving the real loop (engine.loop.factory.create_loop) on CPU with scripted agents.

Everything is real here: the config file, the loop, the evaluator's worker and C++ build (cached by
content), the session repo; only the agents' replies are scripted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, REPO
from tui.app import CudaforgeApp
from tui.screens.approval import ApprovalScreen
from tui.screens.workbench import WorkbenchScreen
from tui.widgets.timeline import Timeline

STEADY = REPO / "tests" / "fixtures" / "scripted" / "steady"

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


async def test_r_runs_a_round_of_the_real_loop_and_the_timeline_shows_it(
    tmp_path: Path, ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cudaforge.toml").write_text(
        f'[models]\ncoder = "scripted/{STEADY}/coder"\njudge = "scripted/{STEADY}/judge"\n'
        '[loop]\nrounds = 1\n[eval]\ndevice = "cpu"\ntiming_trials = 10\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDAFORGE_CACHE_DIR", str(ext_cache))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    repo = SessionRepo.create(tmp_path / "sessions", EXAMPLES / "tasks" / "relu.py")
    app = CudaforgeApp(sessions_root=tmp_path / "sessions", session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "live"
        await pilot.press("r")
        approved = False
        deadline = time.monotonic() + 300
        while len(repo.history()) < 2 and time.monotonic() < deadline:
            if isinstance(app.screen, ApprovalScreen):  # the TUI's default policy asks the human
                await pilot.press("a")
                approved = True
            await asyncio.sleep(0.3)
        await pilot.pause(0.5)
        history = repo.history()
        assert [it.number for it in history] == [0, 1] and all(it.status == "correct" for it in history)
        assert approved
        labels = " ".join(app.screen.query_one(Timeline).labels())
        assert "#1" in labels
    repo.close()


async def test_a_policy_from_the_project_config_approves_and_is_recorded_as_the_decider(
    tmp_path: Path, ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[loop] approval = "auto"`` in ./cudaforge.toml: the loop approves without asking, and the
    suggestion records ``policy:auto`` as the one who decided, not ``human``."""
    (tmp_path / "cudaforge.toml").write_text(
        f'[models]\ncoder = "scripted/{STEADY}/coder"\njudge = "scripted/{STEADY}/judge"\n'
        '[loop]\nrounds = 1\napproval = "auto"\n[eval]\ndevice = "cpu"\ntiming_trials = 10\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDAFORGE_CACHE_DIR", str(ext_cache))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    repo = SessionRepo.create(tmp_path / "sessions", EXAMPLES / "tasks" / "relu.py")
    app = CudaforgeApp(sessions_root=tmp_path / "sessions", session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        asked = False
        deadline = time.monotonic() + 300
        while len(repo.history()) < 2 and time.monotonic() < deadline:
            asked = asked or isinstance(app.screen, ApprovalScreen)
            await asyncio.sleep(0.3)
        await pilot.pause(0.5)
    history = repo.history()
    assert [it.number for it in history] == [0, 1] and not asked
    assert history[1].suggestion["approved_by"] == "policy:auto"
    repo.close()


async def test_a_broken_task_stops_the_real_loop_before_the_coder_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task check runs first: no iteration, the status line and a notice name the task error."""
    from tests.test_reference_check import MISMATCHED
    from tests.test_tui_fixtures import screen_text
    from tui.widgets.output_pane import OutputPane
    from tui.widgets.status_line import StatusLine

    (tmp_path / "cudaforge.toml").write_text(
        f'[models]\ncoder = "scripted/{STEADY}/coder"\njudge = "scripted/{STEADY}/judge"\n'
        '[loop]\nrounds = 1\n[eval]\ndevice = "cpu"\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    task = tmp_path / "broken.py"
    task.write_text(MISMATCHED)
    repo = SessionRepo.create(tmp_path / "sessions", task)
    app = CudaforgeApp(sessions_root=tmp_path / "sessions", session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        status = app.screen.query_one(StatusLine)
        deadline = time.monotonic() + 120
        while status.stage != "error in task" and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
        await pilot.pause(0.3)
        assert status.stage == "error in task"
        log = app.screen.query_one(OutputPane).build_text()  # it keeps why (the notice fades)
        assert "error in task: task error: the reference Model.forward failed on seed 43" in log
        assert "error in task: task error" in " ".join(screen_text(app).split())
        assert repo.history() == []  # the Coder was never asked
    repo.close()
