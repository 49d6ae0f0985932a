"""Escape in the live workbench asks before leaving the session; replay leaves at once (issue 46.3).

The live workbench runs the real loop (scripted agents, nothing is stepped) over the real demo
session, opened from the real browser, so leaving means the browser comes back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_tui_fixtures import SIZES, screen_text, until
from tests.test_tui_workbench_live import configure
from tui.app import CudaforgeApp
from tui.screens.browser import BrowserScreen
from tui.screens.dialogs import ConfirmScreen
from tui.screens.workbench import WorkbenchScreen
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.tabs import TabStrip

pytestmark = pytest.mark.asyncio




@pytest.mark.parametrize("size", SIZES)
async def test_escape_in_a_live_session_asks_leave_or_stay_even_from_the_tabs(
    session_root: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    configure(tui_env, rounds=4)
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=size) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, WorkbenchScreen))
        workbench = app.screen
        assert workbench.mode == "live"
        workbench.query(TabStrip).first().focus()  # the narrow panes' tabs, or the output's
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "Leave the live session relu" in text and "y leave n / esc stay" in text
        await pilot.press("escape")  # a second escape stays
        await until(pilot, lambda: app.screen is workbench)
        assert workbench.adapter.loop is not None and not workbench.hold.released
        await pilot.press("e", *"x = 1", "escape")  # escape while editing still cancels the edit
        await pilot.pause()
        assert app.screen is workbench and not workbench.query_one(KernelPane).editing
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, BrowserScreen))
        assert workbench.hold.released


@pytest.mark.parametrize("size", SIZES)
async def test_escape_in_replay_leaves_at_once(session_root: Path, size: tuple[int, int]) -> None:
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=size) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, WorkbenchScreen))
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, BrowserScreen))
