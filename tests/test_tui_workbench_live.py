"""The live workbench on the real loop (engine.loop.factory.create_loop, scripted agents) over a real session.

The fixture session's ``main`` ends at #3 (incorrect), so the loop's next stage is the Judge: no
build is needed for what these tests drive (status line, approval, rounds, edits, branches, keys).
Only the agents' replies are scripted; the loop, its journal, the session repo and the writer
lock are the real ones. Where a stage must stay running, the loop double of tests/test_tui_live.py
(``FakeLoop``) blocks in a real thread worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessions.repo import SessionRepo
from tests.conftest import REPO, python_path
from tests.test_tui_fixtures import screen_text
from tests.test_tui_live import FakeLoop
from tui.app import CudaforgeApp
from tui.messages import IterationShown
from tui.screens.approval import ApprovalScreen
from tui.screens.browser import BrowserScreen
from tui.screens.dialogs import ConfirmScreen, PromptScreen
from tui.screens.workbench import WorkbenchScreen
from tui.widgets.footer import KeyFooter
from tui.widgets.status_line import StatusLine
from tui.widgets.timeline import Timeline

REJECT = REPO / "tests" / "fixtures" / "scripted" / "reject"

pytestmark = pytest.mark.asyncio


def configure(tui_env: Path, rounds: int) -> None:
    """The user config file the app reads (tui_env points CUDAFORGE_CONFIG at it): scripted agents."""
    (tui_env / "config.toml").write_text(
        f'[models]\ncoder = "scripted/{REJECT}/coder"\njudge = "scripted/{REJECT}/judge"\n'
        f'[loop]\nrounds = {rounds}\n[eval]\ndevice = "cpu"\n'
    )


async def until(pilot: Any, condition: Callable[[], bool], seconds: float = 30.0) -> None:
    for _ in range(int(seconds / 0.1)):
        if condition():
            return
        await pilot.pause(0.1)
    raise AssertionError("timed out waiting")


def status(app: CudaforgeApp) -> str:
    return app.screen.query_one(StatusLine).text()


def flat(app: CudaforgeApp) -> str:
    return " ".join(screen_text(app).split())


async def test_the_status_line_says_whom_the_loop_waits_for_and_a_reject_shows_in_the_next_dialog(
    session_root: Path, tui_env: Path
) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.screen.mode == "live"
        assert status(app).startswith("your turn: press s to run the Judge on #3")
        app.notify("an old error", severity="error")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        assert "FIRST" in flat(app) and not app._notifications  # the old notice is gone
        await pilot.press("escape")  # decide later: nothing runs, and the line says what it waits for
        await until(pilot, lambda: isinstance(app.screen, WorkbenchScreen))
        line = status(app)
        assert line.startswith("your turn: approve, edit or reject the suggestion (a shows it)")
        assert "⏳" not in line and not app.screen.query_one(StatusLine).busy
        await pilot.press("a", "r", *"too risky", "enter")
        await until(pilot, lambda: status(app).startswith("your turn: press s to run the Judge on #3"))
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        text = flat(app)
        assert "2nd suggestion this round · you rejected the last one: “too risky”" in text
        assert "SECOND" in text and "FIRST" not in text
        await pilot.press("q")  # q quits from the approval dialog too (a modal hides the app's keys)
        await pilot.pause()
    assert app.return_value == 0
    repo.close()


async def test_plus_adds_rounds_to_a_finished_branch_and_the_palette_offers_it(
    session_root: Path, tui_env: Path
) -> None:
    configure(tui_env, rounds=3)  # main is at #3: nothing left to run
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert status(app).startswith("finished: target #3 reached · + adds rounds")
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Add rounds (plus)" in titles
        await pilot.press("plus")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("enter")  # the default, 3
        await until(pilot, lambda: isinstance(app.screen, WorkbenchScreen))
        loop = app.screen.adapter.loop
        assert loop.options.rounds == 6 and loop.stage == "judge"
        assert status(app).startswith("your turn: press s to run the Judge on #3")
        assert "now runs to #6" in " ".join(n.message for n in app._notifications)
        await pilot.press("q")  # idle: quits without asking
        await pilot.pause()
    assert app.return_value == 0
    repo.close()


async def test_a_saved_edit_says_what_happens_next_and_the_editor_footer_shows_its_keys(
    session_root: Path, tui_env: Path
) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        footer = {e.description for e in app.screen.query_one(KeyFooter).entries()}
        assert {"Save edit", "Cancel edit"} <= footer
        await pilot.press(*"# mine\n", "ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))  # the check refuses the fixture
        await pilot.press("y")  # hand it over all the same
        await until(pilot, lambda: "evaluate your edit" in status(app))
        assert status(app).startswith("your turn: press s to evaluate your edit as #4 (human)")
        notes = " ".join(n.message for n in app._notifications)
        assert "Edit saved: it becomes #4 (human). s evaluates it" in notes
        assert "kernel · #4 human · not committed yet" in flat(app)
        loop = app.screen.adapter.loop
        assert (loop.stage, loop.pending.phase, loop.pending.kernel.startswith("# mine")) == (
            "evaluate",
            "human",
            True,
        )
    repo.close()


async def test_n_p_and_left_browse_the_live_branch(session_root: Path, tui_env: Path) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    messages: list = []
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await pilot.pause()
        await pilot.press("p", "left", "n")
        await pilot.pause()
        shown = [m.number for m in messages if isinstance(m, IterationShown)]
        assert shown[-3:] == [2, 1, 2] and "kernel · iter 2 (main)" in flat(app)
        rows = {ident: text for _, text, ident in app.binding_rows()}  # help lists what works here, live
        assert {"workbench.next", "workbench.previous", "workbench.step", "workbench.add-rounds"} <= set(rows)
        assert "workbench.play" not in rows
        assert rows["workbench.pause"] == "Pause loop (not now)"  # x pauses a running stage; none runs
    repo.close()


async def test_b_moves_the_live_loop_to_a_branch_drawn_as_the_child_of_main(
    session_root: Path, tui_env: Path
) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("p", "b")  # at #2
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WorkbenchScreen) and screen.branch == "from-iter-2"
        assert screen.adapter.loop.branch == "from-iter-2" and repo.current_branch == "from-iter-2"
        labels = screen.query_one(Timeline).labels()
        assert labels[0] == "main"  # main first, in full: #0 … #3
        assert [label.split()[1] for label in labels[1:5]] == ["#0", "#1", "#2", "#3"]
        assert "from-iter-2 (from #2) · no iterations of its own yet · current" in labels
        (main,) = screen.query_one(Timeline).root.children
        assert any(str(n.label).startswith("from-iter-2") for n in main.children)  # a child of main
        assert status(app).startswith("your turn: press s to run the Judge on #2")
    repo.close()


async def test_escape_hands_the_session_back_and_the_browser_opens_it_again(
    session_root: Path, tui_env: Path
) -> None:
    """Issue #23.3: o, Escape, o again opened read-only ("being written by pid N", this app)."""
    configure(tui_env, rounds=4)
    path = session_root / "relu-demo"
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for _ in range(2):
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, WorkbenchScreen))
            await pilot.pause()
            assert app.screen.mode == "live", [n.message for n in app._notifications]
            await pilot.press("escape", "y")  # live: leave (not stay)
            await until(pilot, lambda: isinstance(app.screen, BrowserScreen))
            # the lock is free for anyone, not only for this process: another one can take it now
            taken = subprocess.run(
                [sys.executable, "-c", f"from sessions.repo import SessionRepo; r = SessionRepo({str(path)!r}); r.acquire_lock(); r.close()"],
                env={**os.environ, "PYTHONPATH": python_path()},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert taken.returncode == 0, taken.stderr
        assert not any("being written" in n.message for n in app._notifications)
        assert "1 session in" in flat(app)


async def test_escape_while_a_stage_runs_leaves_at_once_and_the_loop_hands_back_after_the_stage(
    session_root: Path,
) -> None:
    repo = SessionRepo.open("relu-demo", session_root)
    loops: list[FakeLoop] = []

    def factory(session: SessionRepo, on_event: Any) -> FakeLoop:
        loops.append(FakeLoop(session, on_event))
        return loops[-1]

    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live", loop_factory=factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause(0.1)
        await pilot.press("s")  # a second s while the stage runs starts nothing
        await pilot.press("escape", "y")  # leave: the stage is not cut, nothing is lost
        await until(pilot, lambda: isinstance(app.screen, BrowserScreen))
        # FakeLoop.pause opens its gate: the stage ends, then the loop is closed (the lock goes back)
        await until(pilot, lambda: [c[0] for c in loops[0].calls] == ["step", "pause", "close"])
    repo.close()


async def test_a_narrow_terminal_keeps_the_status_and_the_edit_and_brackets_switch_panes(
    session_root: Path, tui_env: Path
) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "workbench.pane-next" not in {ident for _, _, ident in app.binding_rows()}  # wide: all in view
        await pilot.press("e", *"# half done")
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.3)
        screen = app.screen
        assert status(app).startswith("your turn: press s to run the Judge on #3")  # not "idle"
        from tui.widgets.kernel_pane import KernelPane

        pane = screen.query_one(KernelPane)
        assert pane.editing and pane.text_area.text.startswith("# half done")
        await pilot.press("escape")  # cancel the edit; the keys are the workbench's again
        tabs = screen.query_one("#narrow")
        await pilot.press("right_square_bracket")
        assert tabs.active == "pane-output"
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert tabs.active == "pane-timeline"
        await pilot.press("e")  # editing shows the kernel, wherever the tabs were
        assert tabs.active == "pane-kernel" and pane.editing
        footer = [e.description for e in screen.query_one(KeyFooter).entries()]
        assert footer[:2] == ["Save edit", "Cancel edit"]  # the editor's keys come first, in view at 80 columns
    repo.close()
