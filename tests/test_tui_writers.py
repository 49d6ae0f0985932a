"""One writer per session, and it is this app (tui/writers.py): the real loop, its real writer lock.

The workbench's loop is the real ``engine.loop.machine.Loop`` (scripted agents, CPU evaluations),
so the lock it takes is the real ``sessions.lock`` flock; the other writer of the last test is a
real process.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from sessions.lock import LOCK_FILENAME, read_lock_pid
from sessions.repo import SessionRepo
from tests.conftest_sessions import spawn_python, wait_for_line
from tests.interrupt_harness import wait_for_hold
from tests.loop_helpers import RELU_TASK, make_loop
from tui.app import CudaforgeApp
from tui.screens.browser import BrowserScreen
from tui.screens.workbench import WorkbenchScreen

pytestmark = pytest.mark.asyncio

HOLDER = """
import sys, time
from sessions.repo import SessionRepo
repo = SessionRepo.open(sys.argv[1])
repo.acquire_lock()
print("locked", flush=True)
time.sleep(120)
"""


def _app(root: Path, cache: Path) -> CudaforgeApp:
    def factory(repo: SessionRepo, on_event: Any) -> Any:
        return make_loop(repo, cache, "steady", rounds=1, on_event=on_event)

    return CudaforgeApp(sessions_root=root, loop_factory=factory)


def _notices(app: CudaforgeApp) -> str:
    return " ".join(n.message for n in app._notifications)


async def _until(pilot: Any, condition: Any, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.1)


@pytest.fixture
def root(tui_env: Path) -> Path:
    sessions = tui_env / "sessions"
    SessionRepo.create(sessions, RELU_TASK, name="relu").close()
    return sessions


async def test_leaving_a_session_gives_its_lock_back_and_reopening_takes_it_again(
    root: Path, ext_cache: Path
) -> None:
    """Open with o, Esc back, o again: live both times, never "being written by pid N" (this app)."""
    lock = root / "relu" / LOCK_FILENAME
    app = _app(root, ext_cache)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "live"
        assert read_lock_pid(lock) is not None  # the loop is the writer
        await pilot.press("escape", "y")  # live: leave, not stay
        await pilot.pause()
        assert isinstance(app.screen, BrowserScreen)
        assert not lock.exists()  # handed back: another process may write the session now
        with SessionRepo.open(root / "relu") as other:
            other.acquire_lock()
        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "live"
        assert "being written" not in _notices(app)


async def test_reopening_while_the_left_loop_finishes_its_build_continues_that_loop(
    root: Path, ext_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = root.parent / "hold"
    monkeypatch.setenv("CUDAFORGE_TEST_HOLD", "build@0")
    monkeypatch.setenv("CUDAFORGE_TEST_HOLD_FILE", str(hold))
    app = _app(root, ext_cache)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("o")
        await pilot.pause()
        first = app.screen.adapter
        await pilot.press("s")  # the seed
        await _until(pilot, lambda: not first.busy)
        await pilot.press("s")  # its evaluation, held in the build
        await asyncio.to_thread(wait_for_hold, hold, "build@0", lambda: True)
        await pilot.press("escape", "y")  # left while building: the loop finishes the build, then pauses
        await pilot.pause()
        assert (root / "relu" / LOCK_FILENAME).exists()  # still the writer: its build is not done
        await pilot.press("o")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WorkbenchScreen) and screen.mode == "live"
        assert screen.adapter is first and "being written" not in _notices(app)
        hold.unlink()
        await _until(pilot, lambda: bool(screen.history))  # its commit reaches the reopened screen
        assert [it.number for it in screen.history] == [0]


async def test_a_session_another_process_writes_opens_read_only_and_says_who(
    root: Path, ext_cache: Path
) -> None:
    holder = spawn_python(HOLDER, str(root / "relu"))
    try:
        wait_for_line(holder, "locked")
        app = _app(root, ext_cache)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("o")
            await pilot.pause()
            assert isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "view"
            text = _notices(app)
            assert f"being written by pid {holder.pid} on host {socket.gethostname()} since 20" in text
            assert "opens read-only" in text
    finally:
        holder.kill()
        holder.wait(timeout=30)
