"""A read-only workbench offers no "b Branch here" nor "X Explore" (issue 46.6).

A session another writer holds opens read-only (``view``): the browser's ``o`` on a locked session,
and the model view's ``enter`` on one, end up here. Branching or exploring there would write a
session someone else is writing, so the keys are hidden (``check_action`` False), from the footer,
the help and the palette, and pressing them does nothing. Replay keeps ``b``: it continues live.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.test_tui_fixtures import screen_text
from tests.test_tui_workbench_live import configure
from tui.app import CudaforgeApp
from tui.screens.workbench import WorkbenchScreen
from tui.widgets.footer import KeyFooter

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("size", SIZES)
async def test_a_session_another_writer_holds_offers_no_branch_or_explore(
    session_root: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    configure(tui_env, rounds=4)
    writer = SessionRepo.open("relu-demo", session_root)
    writer.acquire_lock()  # another writer (its own flock): the workbench opens read-only
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=size) as pilot:
        await pilot.press("o")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WorkbenchScreen) and screen.mode == "view"
        footer = {e.description for e in screen.query_one(KeyFooter).entries()}
        assert "Branch here" not in footer and "Diff iterations" in footer
        rows = {ident for _, _, ident in app.binding_rows()}
        assert "workbench.branch" not in rows and "workbench.explore" not in rows
        assert "workbench.diff" in rows
        titles = {c.title for c in app.get_system_commands(screen)}
        assert not any(t.startswith(("Branch here", "Explore ideas")) for t in titles)
        await pilot.press("b")
        await pilot.pause()
        assert "Branch here" not in screen_text(app)
    assert sorted(writer.branches()) == ["from-iter-1", "main"]  # b made no branch
    writer.close()


async def test_replay_still_offers_branch_here(session_root: Path) -> None:
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        footer = {e.description for e in app.screen.query_one(KeyFooter).entries()}
        assert "Branch here" in footer
