"""What the workbench's fast first frame relies on: one-widget footer, tabs built when shown, shared
highlight queries, modules imported only when used — and the start-up benchmark itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.test_tui_fixtures import screen_text, unique
from tui import highlight
from tui.app import CudaforgeApp
from tui.messages import IterationShown
from tui.widgets.footer import KeyFooter
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.output_pane import OutputPane

REPO = Path(__file__).resolve().parents[1]


def _text(app: CudaforgeApp) -> str:
    """The screen's text with runs of spaces collapsed (a key and its description are two spans)."""
    return " ".join(screen_text(app).split())


def _app(root: Path) -> tuple[CudaforgeApp, SessionRepo]:
    repo = SessionRepo.open("relu-demo", root)
    return CudaforgeApp(sessions_root=root, session=repo, mode="replay"), repo


@pytest.mark.asyncio
async def test_footer_draws_the_keys_in_the_first_frame_and_repaints_only_on_change(session_root) -> None:
    app, repo = _app(session_root)
    async with app.run_test(size=(200, 40)) as pilot:  # wide enough for every key
        await pilot.pause()
        footer = app.screen.query_one(KeyFooter)
        footer_text = _text(app)
        assert "n Next iteration" in footer_text and "d Diff iterations" in footer_text
        assert "^p palette" in footer_text  # the command palette key, at the right
        assert "s Step one stage" not in footer_text  # live-only keys are hidden in replay
        assert footer.repaints == 0  # the start-up binding signals changed nothing it draws
        await pilot.press("n")
        await pilot.pause()
        assert footer.repaints == 0  # stepping does not change the keys either
        app.set_keymap({"workbench.next": "j"})  # a remapped key is a real change
        await pilot.pause()
        assert footer.repaints == 1 and "j Next iteration" in _text(app)
        assert "n Next iteration" not in _text(app)
    repo.close()


@pytest.mark.asyncio
async def test_clicking_a_footer_key_presses_it(session_root) -> None:
    app, repo = _app(session_root)
    messages: list = []
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await pilot.pause()
        await pilot.click(KeyFooter, offset=(2, 0))  # on " n Next iteration "
        await pilot.pause()
        assert [m.number for m in unique(messages, IterationShown)] == [0, 1]
    repo.close()


@pytest.mark.asyncio
async def test_hidden_output_tabs_are_built_when_first_shown_and_then_follow_the_iteration(
    session_root,
) -> None:
    app, repo = _app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        output = app.screen.query_one(OutputPane)
        for selector in ("#checks-table", "#ncu-table", "#speedup-chart"):
            assert not app.screen.query(selector)  # not built for the first frame
        await pilot.press("n")  # iteration 1 (repair, 1.10x) while the tables do not exist yet
        await pilot.pause()
        output.active = "tab-checks"
        await pilot.pause()
        checks = screen_text(app)
        assert "verdict" in checks and "1.10x" in checks and "trial 1" in checks
        await pilot.press("n")  # iteration 2: the built table follows
        await pilot.pause()
        assert "1.80x" in screen_text(app)
        output.active = "tab-chart"
        await pilot.pause()
        assert "1.80x correct ★" in screen_text(app)
        output.active = "tab-ncu"
        await pilot.pause()
        assert "dram__throughput" in screen_text(app)
    repo.close()


@pytest.mark.asyncio
async def test_text_areas_share_one_compiled_highlight_query_per_grammar(session_root) -> None:
    from textual._tree_sitter import get_language

    def compiled(language: str) -> int:
        grammar = get_language(language)
        return sum(1 for key in highlight._PREPARED if key[0] == grammar)

    app, repo = _app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        task_area = app.screen.query_one("#task-source")
        kernel_area = app.screen.query_one("#kernel-source")
        assert task_area.language == kernel_area.language == "python"
        assert compiled("python") == 1  # task and kernel panes: one compile between them
        await pilot.press("n", "p", "n")  # every shown iteration loads a new document
        await pilot.pause()
        assert compiled("python") == 1
        app.screen.query_one(KernelPane).toggle_view()
        app.screen.query_one(KernelPane).toggle_view()
        app.screen.query_one(KernelPane).toggle_view()
        await pilot.pause()
        if kernel_area.language == "cuda":  # the CUDA grammar is optional
            cuda_keys = [key for key in highlight._PREPARED if key[0] != get_language("python")]
            assert len(cuda_keys) == 1  # toggled back and forth: still one compile
    repo.close()


def test_importing_the_workbench_leaves_unused_screens_and_heavy_modules_unimported() -> None:
    code = (
        "import sys, tui.app, tui.screens.workbench;"
        "print(sorted(m for m in ('torch', 'engine.loop', 'engine.eval.evaluate', 'tui.screens.approval',"
        " 'tui.screens.dialogs', 'tui.screens.browser', 'textual.widgets._markdown',"
        " 'textual.widgets._data_table') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_startup_benchmark_measures_a_complete_first_frame(tmp_path: Path) -> None:
    """The benchmark runs and checks that the frame it timed showed every pane (the time itself is
    recorded in benchmarks/RESULTS.md: under a loaded test run it says little)."""
    done = subprocess.run(
        [sys.executable, "benchmarks/tui_startup.py", "--runs", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: over budget on this machine now
    assert "to first full screen (torch imported: False)" in done.stdout
    assert "median" in done.stdout


@pytest.mark.asyncio
async def test_pane_tabs_switch_by_click_and_by_arrows_when_focused(session_root) -> None:
    from tui.widgets.tabs import PaneTabs, TabStrip

    app, repo = _app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        output = app.screen.query_one(OutputPane)
        strip = output.query_one(TabStrip)
        assert output.active == "tab-build" and "ninja: build compile_error" in _text(app)
        checks = next(start for start, _, tab in strip.spans() if tab == "tab-checks")
        await pilot.click(TabStrip, offset=(checks + 1, 0))  # on " Checks "
        await pilot.pause()
        assert output.active == "tab-checks" and "verdict" in _text(app)
        strip.focus()
        await pilot.press("right")  # the strip's own arrows, not the workbench's next/previous
        await pilot.pause()
        assert output.active == "tab-ncu" and "dram__throughput" not in _text(app)  # iteration 0: none
        assert "not profiled" in _text(app)
        await pilot.press("left", "left", "left")  # wraps round: ncu → checks → build → roofline
        await pilot.pause()
        assert output.active == "tab-roofline" and "not profiled" in _text(app)
        await pilot.press("left")
        await pilot.pause()
        assert output.active == "tab-chart" and "#0" in _text(app)
        with pytest.raises(ValueError):
            output.query_one(PaneTabs).active = "tab-nope"
        assert output.active == "tab-chart"  # refused, not half-applied
    repo.close()
