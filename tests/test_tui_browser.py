"""The session browser and the app-wide keys: open, replay, new, help, quit, themes, keymap."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_tui_fixtures import TASK, screen_text
from tui.app import CudaforgeApp
from tui.messages import SettingChanged
from tui.screens.browser import BrowserScreen
from tui.screens.dialogs import HelpScreen, PromptScreen
from tui.screens.workbench import WorkbenchScreen

pytestmark = pytest.mark.asyncio


async def test_browser_lists_sessions_at_80x24(session_root) -> None:
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, BrowserScreen)
        text = screen_text(app)
        for expected in ("relu-demo", "relu", "branches", "iterations", "2.50x"):
            assert expected in text
        row = app.screen.sessions[0]
        assert (row.branches, row.iterations, row.best_speedup) == (2, 5, 2.5)


async def test_replay_and_open_from_the_browser(session_root) -> None:
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "replay"
        await pilot.press("escape")
        assert isinstance(app.screen, BrowserScreen)
        await pilot.press("enter")  # open: no loop package yet, so the session opens read-only
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen) and app.screen.mode == "view"
        assert "opens read-only" in " ".join(n.message for n in app._notifications)
        app.screen.repo.close()


async def test_n_creates_a_session_from_a_task_file(tui_env) -> None:
    task = tui_env / "gelu.py"
    task.write_text(TASK)
    root = tui_env / "sessions"
    app = CudaforgeApp(sessions_root=root)
    async with app.run_test(size=(120, 40)) as pilot:
        assert "press n to start one" in screen_text(app)
        await pilot.press("n")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*str(task), "enter")
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen)
        assert "no iterations yet" in screen_text(app) and "float16 [8 × 4096]" in screen_text(app)
        app.screen.repo.close()
    assert [p.name.startswith("gelu-") for p in root.iterdir()] == [True]


async def test_help_lists_every_binding_with_its_id(session_root) -> None:
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        for key in ("f1", "question_mark"):
            await pilot.press(key)
            assert isinstance(app.screen, HelpScreen)
            text = screen_text(app)
            assert "browser.replay" in text and "app.quit" in text and "app.help" in text
            await pilot.press("escape")
        await pilot.press("r", "question_mark")
        text = screen_text(app)
        for ident in ("workbench.next", "workbench.play", "workbench.branch", "workbench.diff"):
            assert ident in text
        # only keys that work here: replay cannot edit, step or add rounds; no raw action names
        for absent in ("workbench.edit", "workbench.step", "workbench.add-rounds", "help_quit", "app.focus_next"):
            assert absent not in text, absent


async def test_q_quits_without_asking_when_idle(session_root) -> None:
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0


async def test_theme_from_the_palette_is_remembered(session_root) -> None:
    messages: list = []
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        assert app.theme == "cudaforge-dark"
        await pilot.press("ctrl+p", *"Theme: cudaforge-16")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert app.theme == "cudaforge-16"
    assert ("theme", "cudaforge-16") in {(m.name, m.value) for m in messages if isinstance(m, SettingChanged)}
    again = CudaforgeApp(sessions_root=session_root)
    async with again.run_test(size=(80, 24)):
        assert again.theme == "cudaforge-16"
        assert {"cudaforge-dark", "cudaforge-light", "cudaforge-16"} <= set(again.available_themes)


async def test_palette_offers_every_screen_action(session_root) -> None:
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for title in ("Next iteration (n,right)", "Branch here (b)", "Diff iterations (d)", "Quit (q)"):
            assert title in titles
        await pilot.press("ctrl+p", *"Next iteration")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.index == 1


async def test_keymap_from_config_remaps_by_binding_id(session_root, tui_env: Path) -> None:
    (tui_env / "config.toml").write_text('[ui.keymap]\n"app.quit" = "ctrl+q"\n"browser.replay" = "y"\n')
    app = CudaforgeApp(sessions_root=session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("q")
        assert app.is_running  # q no longer quits
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen)
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert app.return_value == 0
