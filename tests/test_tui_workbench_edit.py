"""A human kernel edit in the live workbench: what the round's decisions keep, and the check on save.

* issue 46.2: a suggestion rejected with a note, then a kernel edit: the note stays in the round and
  reaches the human iteration's record (``suggestion.json``), hence the history table the agents read.
* issue 46.5: ctrl+s runs the static check ``cudaforge check`` runs; its problems are shown before the
  edit goes to the loop, a failing edit is kept, and the person decides (hand it over, or edit on).

Real loop (scripted agents), real session repo, real static guard. The fixture's kernel never calls
its compiled extension, which the guard refuses, so an evaluation commits without a build.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.loop.history import render, rows_from_iterations
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES
from tests.test_tui_fixtures import SIZES, screen_text, until
from tests.test_tui_workbench_live import configure
from tui.app import CudaforgeApp
from tui.screens.approval import ApprovalScreen
from tui.screens.dialogs import ConfirmScreen
from tui.screens.workbench import WorkbenchScreen
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.output_pane import OutputPane
from tui.widgets.status_line import StatusLine

KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()


pytestmark = pytest.mark.asyncio




def status(app: CudaforgeApp) -> str:
    return app.screen.query_one(StatusLine).text()


@pytest.mark.parametrize("size", SIZES)
async def test_a_rejection_note_survives_a_kernel_edit_into_the_record(
    session_root: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("r", *"too risky", "enter")
        await until(pilot, lambda: status(app).startswith("your turn: press s to run the Judge on #3"))
        workbench = app.screen
        assert isinstance(workbench, WorkbenchScreen)
        await pilot.press("e", *"# mine", "ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))  # the check refuses it
        await pilot.press("y")  # hand it over all the same
        await until(pilot, lambda: "evaluate your edit" in status(app))
        loop = workbench.adapter.loop
        assert [r["note"] for r in loop.pending.rejections] == ["too risky"]
        await pilot.press("s")
        await until(pilot, lambda: len(repo.history()) == 5)
        await until(pilot, lambda: not workbench.adapter.busy)
    human = repo.history()[-1]
    assert human.phase == "human" and human.kernel_source.startswith("# mineimport torch")
    assert [r["note"] for r in human.suggestion["rejected"]] == ["too risky"]
    table = render(rows_from_iterations(repo.history()))  # what the agents' history table says
    assert "rejected (human) | too risky" in table
    repo.close()


@pytest.mark.parametrize("size", SIZES)
async def test_saving_an_edit_runs_the_check_shows_its_problems_and_keeps_the_edit(
    session_root: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        workbench = app.screen
        loop = workbench.adapter.loop
        await pilot.press("e", *"# mine", "ctrl+s")  # the fixture never calls its extension
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "The check says your edit REFUSED" in text and "[kernel-not-called]" in text
        log = workbench.query_one(OutputPane).build_text()
        assert "check: edited kernel (guard default, " in log and "[kernel-not-called] (refuse)" in log
        assert loop.stage == "judge"  # nothing went to the loop yet
        await pilot.press("n")  # edit on: the editor again, the edit as it was
        await until(pilot, lambda: app.screen is workbench)
        pane = workbench.query_one(KernelPane)
        assert pane.editing and pane.text_area.text.startswith("# mineimport torch")
        assert loop.stage == "judge"
        pane.text_area.text = KERNEL  # the person fixes it: a kernel the guard lets build
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "evaluate your edit" in status(app))
        assert app.screen is workbench  # nothing to ask
        assert "check: would build" in " ".join(n.message for n in app._notifications)
        assert loop.pending.phase == "human" and loop.pending.kernel == KERNEL
    repo.close()


async def test_a_failing_check_handed_over_anyway_goes_to_the_loop(session_root: Path, tui_env: Path) -> None:
    configure(tui_env, rounds=4)
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("e", *"# mine", "ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: "evaluate your edit" in status(app))
        loop = app.screen.adapter.loop
        assert loop.pending.phase == "human" and loop.pending.kernel.startswith("# mineimport torch")
    repo.close()
