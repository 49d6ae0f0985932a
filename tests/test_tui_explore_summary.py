"""When an exploration ends the workbench shows its summary, as ``cudaforge explore`` prints it (issue 46.7).

The message is the one ``tui.explore_run.ExploreRun`` posts when ``Explorer.run`` returns, carrying a
real ``ExploreSummary``; the whole path from ``X`` (real loops, builds) is asserted in
tests/test_tui_real_loop.py, which is slow. Here the workbench is the real one over the demo session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.explore.plan import ExploreSpec
from engine.explore.runner import BranchSummary, ExploreSummary
from sessions.repo import SessionRepo
from tests.test_tui_fixtures import screen_text
from tui.app import CudaforgeApp
from tui.explore_run import ExploreFinished
from tui.screens.dialogs import SummaryScreen
from tui.screens.workbench import WorkbenchScreen

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]

pytestmark = pytest.mark.asyncio


def summary(outcome: str = "finished") -> ExploreSummary:
    spec = ExploreSpec(start=2, source="main", width=2, rounds=2)
    return ExploreSummary(
        spec=spec,
        branches=[
            BranchSummary("explore/2-1", "vectorize loads", "done", "", 2, 2.4, 4, 900, 0.02, 0.25),
            BranchSummary(
                "explore/2-2", "fuse the epilogue", "failed", "no correct kernel", 2, None, None, 800, 0.01
            ),
        ],
        start_speedup=1.8,
        outcome=outcome,
        ranked_by="kernel time",
        best_branch="explore/2-1",
    )


@pytest.mark.parametrize("size", SIZES)
async def test_the_summary_of_a_finished_exploration_is_shown_until_closed(
    session_root: Path, size: tuple[int, int]
) -> None:
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        workbench = app.screen
        workbench.post_message(ExploreFinished(summary()))
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, SummaryScreen)
        text = " ".join(screen_text(app).split())
        assert "exploration done: best explore/2-1 #4 2.40x" in text
        assert "explore/2-1 done 2" in text and "explore/2-2 failed 2" in text
        assert (
            "export: cudaforge export relu-demo --branch explore/2-1 --iteration 4 -o kernel.py"
            in dialog.text
        )
        await pilot.press("escape")
        assert app.screen is workbench and isinstance(workbench, WorkbenchScreen)
    repo.close()


async def test_a_stopped_exploration_says_how_to_resume(session_root: Path) -> None:
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.screen.post_message(ExploreFinished(summary("paused")))
        await pilot.pause()
        assert isinstance(app.screen, SummaryScreen)
        assert "exploration stopped: X at the same iteration resumes it" in " ".join(screen_text(app).split())
    repo.close()
