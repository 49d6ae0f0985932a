"""``d`` then ``m`` in the workbench: what moved between two iterations, read from their records
(engine/profile/diff.py through tui/screens/dialogs.py's DiffScreen), with real H200 captures as the
two iterations' profiles. Snapshots at 80×24 and 120×40."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.profile.diff import diff_lines, iteration_diff
from sessions.repo import SessionRepo
from tests.test_profile_diff import _profile, _result
from tests.test_tui_fixtures import TASK, kernel, screen_text
from tui.app import CudaforgeApp
from tui.screens.dialogs import DiffScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]
CREATED = 1796040000.0  # 2026-11-30 12:00 UTC
OLD = ("h200_relu_default_raw.csv", [1.0, 1.1, 0.9], 0.91)
NEW = ("h200_relu_large_raw.csv", [0.5, 0.55, 0.45], 0.97)


@pytest.fixture
def moved_root(tui_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A session of two correct iterations, each with a real capture as its profile."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.chdir(tui_env)
    root = Path("sessions")
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: CREATED)
        with SessionRepo.create(root, task_source=TASK, task_name="relu", name="moved") as repo:
            for version, (csv, samples, share) in enumerate((OLD, NEW)):
                repo.record_iteration(
                    kernel_source=kernel(version),
                    eval_result=_result(samples, share),
                    phase="seed" if version == 0 else "optimize",
                    profile=_profile(csv),
                    tokens=10,
                    cost_usd=0.01,
                )
    yield root
    monkeypatch.undo()
    time.tzset()


def _app(root: Path) -> tuple[CudaforgeApp, SessionRepo]:
    repo = SessionRepo.open("moved", root)
    return CudaforgeApp(sessions_root=root, session=repo, mode="replay"), repo


@pytest.mark.asyncio
async def test_m_shows_what_moved_between_the_two_iterations_from_their_records(moved_root: Path) -> None:
    app, repo = _app(moved_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n", "d")
        await pilot.pause()
        diff = app.screen
        assert isinstance(diff, DiffScreen) and (diff.old, diff.new) == (0, 1)
        await pilot.press("m")
        await pilot.pause()
        first, second = repo.history()
        expected = diff_lines(
            iteration_diff(first.eval_result, first.profile, second.eval_result, second.profile), "iter 0", "iter 1"
        )
        assert diff.moved_text() == "\n".join(expected)
        assert max(len(line) for line in expected) <= 114  # the diff's width at 120 columns: no wrapping
        shown = screen_text(app)
        assert "moved iter 0 → iter 1" in shown and "own-kernel share: 91% → 97%  (+6 points)" in shown
        assert "kernel relu_kernel(const float *, float *, long)" in shown
        await pilot.press("m")
        assert "diff iter 0 → iter 1" in screen_text(app)
    repo.close()


@pytest.mark.parametrize("size", SIZES)
def test_what_moved_view(snap_compare: Any, moved_root: Path, size: tuple[int, int]) -> None:
    """The timing and share changes, then the kernel's metrics, largest relative change first."""
    repo = SessionRepo.open("moved", moved_root)
    try:
        app = CudaforgeApp(sessions_root=moved_root, session=repo, mode="replay")
        assert snap_compare(app, press=["n", "d", "m"], terminal_size=size)
    finally:
        repo.close()
