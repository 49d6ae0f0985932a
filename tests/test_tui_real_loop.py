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


def _seeded_for_explore(tmp_path: Path, ext_cache: Path, monkeypatch: pytest.MonkeyPatch) -> SessionRepo:
    """A live session with a correct iteration 0 and a config whose agents are the scripted explore ones."""
    from tests.loop_helpers import SCRIPTED, make_loop

    explore = SCRIPTED / "explore"
    (tmp_path / "cudaforge.toml").write_text(
        f'[models]\ncoder = "scripted/{explore}/coder"\njudge = "scripted/{explore}/judge"\n'
        '[loop]\nrounds = 1\n[eval]\ndevice = "cpu"\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDAFORGE_CACHE_DIR", str(ext_cache))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    repo = SessionRepo.create(tmp_path / "sessions", EXAMPLES / "tasks" / "relu.py")
    seed = make_loop(repo, ext_cache, coder_dir=explore / "coder", judge_dir=explore / "judge", rounds=0)
    seed.run()
    seed.close()
    return repo


async def test_x_explores_the_ideas_the_person_ticks_and_the_timeline_grows(
    tmp_path: Path, ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``X`` on a live session: the Judge's three ideas in the chooser, two ticked, one round each; the
    branches are committed with the person as the approver and the timeline shows them with their state."""
    from engine.explore.plan import load_plan
    from tui.screens.dialogs import SummaryScreen
    from tui.screens.explore import ExploreChooser

    repo = _seeded_for_explore(tmp_path, ext_cache, monkeypatch)
    app = CudaforgeApp(sessions_root=tmp_path / "sessions", session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        workbench = app.screen
        await pilot.press("X")
        deadline = time.monotonic() + 60
        while not isinstance(app.screen, ExploreChooser) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        chooser = app.screen
        assert isinstance(chooser, ExploreChooser) and len(chooser.ideas) == 3
        await pilot.press("down", "space", "minus", "r")  # ideas 1 and 3, one round each
        await pilot.pause()
        assert app.screen is workbench
        await pilot.press("s")  # no stage of the workbench's own loop starts while the exploration runs
        deadline = time.monotonic() + 300
        while workbench.exploration.active and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
        await pilot.pause(0.3)
        labels = " ".join(workbench.query_one(Timeline).labels())
        summary = app.screen  # the exploration's summary, as `cudaforge explore` prints it (issue 46.7)
        assert isinstance(summary, SummaryScreen) and summary.title_text.startswith("exploration done: best")
        assert "explore/0-1" in summary.text and "explore/0-2" in summary.text
    plan = load_plan(repo.path, 0)
    assert plan is not None and [b.idea["bottleneck"] for b in plan.branches] == [
        "the Python wrapper's overhead", "branch mispredictions"]  # fmt: skip
    for k in (1, 2):
        history = repo.history(f"explore/0-{k}")
        assert [it.number for it in history] == [0, 1] and history[1].suggestion["approved_by"] == "human"
    assert "explore/0-3" not in repo.branches() and [it.number for it in repo.history("main")] == [0]
    assert "explore/0-1 · done · best" in labels and "explore/0-2 · done · best" in labels
    repo.close()


async def test_s_in_the_chooser_asks_the_person_at_every_branchs_gate(
    tmp_path: Path, ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``s`` instead of ``r``: from round 2 each branch stops at its gate and the workbench shows its
    suggestion in the approval view, the branch named. The person edits one branch's suggestion, then
    lets the other go on unasked (``g``); the commits record who decided what."""
    from textual.widgets import TextArea

    from tui.screens.approval import ApprovalScreen
    from tui.screens.explore import ExploreChooser

    repo = _seeded_for_explore(tmp_path, ext_cache, monkeypatch)

    async def wait_for(screen_type: type, seconds: float = 120) -> object:
        deadline = time.monotonic() + seconds
        while not isinstance(app.screen, screen_type) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert isinstance(app.screen, screen_type), f"no {screen_type.__name__} within {seconds} s"
        return app.screen

    app = CudaforgeApp(sessions_root=tmp_path / "sessions", session=repo, mode="live")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        workbench = app.screen
        await pilot.press("X")
        await wait_for(ExploreChooser)
        await pilot.press("down", "down", "space", "s")  # ideas 1 and 2, two rounds each, step
        first = await wait_for(ApprovalScreen)
        edited_branch = first.branch
        assert edited_branch in ("explore/0-1", "explore/0-2") and edited_branch in str(first._title())
        await pilot.press("e")
        first.query_one(TextArea).text = "unroll the loop by four"
        await pilot.press("ctrl+s")
        second = await wait_for(ApprovalScreen)
        assert second is not first and second.branch != edited_branch
        await pilot.press("g")  # every branch on, without asking
        deadline = time.monotonic() + 300
        while workbench.exploration.active and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
        await pilot.pause(0.3)
    other = "explore/0-2" if edited_branch == "explore/0-1" else "explore/0-1"
    edited = repo.history(edited_branch)[2].suggestion
    assert edited["approved_by"] == "human" and edited["edited"]
    assert edited["approved"]["text"] == "unroll the loop by four"
    assert repo.history(other)[2].suggestion["approved_by"] == "policy:auto"
    assert [it.number for it in repo.history(other)] == [0, 1, 2]
    repo.close()
