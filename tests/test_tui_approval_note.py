"""The evidence view returns to the open approval, the person's note intact (issue 46.4).

At 80 columns ``v`` swaps the suggestion for its evidence; Escape there used to close the approval
(and the note typed for the rejection with it). Now it goes back to the suggestion, the approval still
open. Side by side (120 columns) the evidence needs no key, and Escape closes the view undecided: the
note typed so far is there again when ``a`` reopens it. The real loop (scripted agents) receives the
rejection with the note.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from sessions.repo import SessionRepo
from tests.test_tui_fixtures import SIZES, screen_text, until
from tests.test_tui_workbench_live import configure
from tui.app import CudaforgeApp
from tui.screens.approval import ApprovalScreen
from tui.screens.workbench import WorkbenchScreen

pytestmark = pytest.mark.asyncio




def flat(app: CudaforgeApp) -> str:
    return " ".join(screen_text(app).split())


@pytest.mark.parametrize("size", SIZES)
async def test_closing_the_evidence_returns_to_the_approval_with_the_note_intact(
    session_root: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    configure(tui_env, rounds=4)
    narrow = size[0] < 110
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        workbench = app.screen
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        approval = app.screen
        await pilot.press("r", *"too risky", "escape")  # a note begun, then back to look at the evidence
        await pilot.press("v")
        await pilot.pause()
        assert "Evidence · iter 3" in flat(app)
        await pilot.press("escape")  # close the evidence
        await pilot.pause()
        if narrow:  # the evidence was a view of its own: back to the suggestion, the approval open
            assert app.screen is approval and "FIRST IDEA" in flat(app)
        else:  # side by side there is no evidence view to close: the approval closes undecided
            assert app.screen is workbench
            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("r")
        await pilot.pause()
        assert app.screen.query_one(Input).value == "too risky" and "too risky" in flat(app)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, WorkbenchScreen) and not workbench.adapter.busy)
        assert [r["note"] for r in workbench.adapter.loop.pending.rejections] == ["too risky"]
    repo.close()
