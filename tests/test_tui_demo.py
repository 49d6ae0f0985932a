"""``cudaforge demo``: the bundled session unpacks anywhere and replays, saying it is scripted."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.test_tui_fixtures import screen_text
from tui.app import CudaforgeApp
from tui.demo import NOTICE, unpack
from tui.screens.workbench import WorkbenchScreen


def test_bundle_unpacks_into_a_session_recorded_on_the_gpu(tmp_path: Path) -> None:
    repo = SessionRepo.open(unpack(tmp_path))
    history = repo.history()
    assert [it.phase for it in history] == ["seed", "repair", "optimize", "optimize"]
    assert history[0].status == "compile_error" and all(it.status == "correct" for it in history[1:])
    assert "H200" in repo.read_file(1, "eval.json")
    assert '"kind": "ncu"' in repo.read_file(2, "profile.json")
    repo.close()


@pytest.mark.asyncio
async def test_demo_replays_and_says_it_is_scripted(tmp_path: Path) -> None:
    repo = SessionRepo.open(unpack(tmp_path))
    app = CudaforgeApp(sessions_root=tmp_path, session=repo, mode="replay", notice=NOTICE)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "replay"
        assert "cudaforge · scripted demo" in screen_text(app)  # the title bar says so on every screen
        before = app.screen.index
        await pilot.press("n")
        await pilot.pause()
        assert app.screen.index == before + 1
    repo.close()
