"""Issue 46, "120×40 is cramped": the workbench's defects a new user met in tmux, each at 120×40 and 80×24.

The kernel editor takes the whole width and scrolls sideways; a cut text ends in "…" and is one key
(``i``) away in full; the Judge's structured reply shows as its fields; the speedup chart's y-axis
reads in "×"; the output pane's tabs have keys (``1``–``5``). Real session repos, the real loop with
scripted agents where a loop is needed, the real app driven by Textual's pilot; the screen is read
back from Textual's own SVG export (ARCHITECTURE.md §8).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessions.repo import SessionRepo
from tests.test_tui_fixtures import eval_dict, kernel, screen_rows
from tui.app import CudaforgeApp

pytestmark = pytest.mark.asyncio

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]
SCRIPTED = Path(__file__).parent / "fixtures" / "scripted" / "reject"


async def until(pilot: Any, condition: Callable[[], bool], seconds: float = 15.0) -> None:
    """Wait until ``condition`` holds (a pane paints a frame or two later, later on a loaded machine)."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out waiting")


def on_screen(app: Any, needle: str) -> bool:
    return any(needle in row for row in screen_rows(app))


# ------------------------------------------------------------------ 1. the kernel editor

LONG_LINE = (
    "    if (i < n) y[i] = x[i] > 0.0f ? x[i] * scale_factor_for_positive_values : x[i] * "
    "negative_slope_for_leaky_relu_variant;  // END-OF-LONG-LINE"
)


@pytest.mark.parametrize("size", SIZES)
async def test_editing_the_kernel_takes_the_full_width_and_does_not_soft_wrap(
    session_root: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    from tui.widgets.kernel_pane import KernelPane
    from tui.widgets.output_pane import OutputPane

    (tui_env / "config.toml").write_text(
        f'[models]\ncoder = "scripted/{SCRIPTED}/coder"\njudge = "scripted/{SCRIPTED}/judge"\n'
        '[loop]\nrounds = 9\n[eval]\ndevice = "cpu"\n'
    )
    long_kernel = kernel(7).replace("    if (i < n) y[i] = x[i] > 0 ? x[i] : 0;  // version 7", LONG_LINE)
    assert LONG_LINE in long_kernel
    with SessionRepo.open("relu-demo", session_root) as repo:
        repo.record_iteration(
            kernel_source=long_kernel, eval_result=eval_dict("correct", 1.2), phase="optimize"
        )
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="live")
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: on_screen(app, "if (i < n)"))
        await pilot.press("e")
        pane = app.screen.query_one(KernelPane)
        await until(pilot, lambda: pane.editing and pane.text_area.region.width >= size[0] - 1)
        rows = screen_rows(app)
        head = next(k for k, row in enumerate(rows) if "if (i < n) y[i] = x[i] > 0.0f" in row)
        # one line, scrolled sideways: its end is off screen, not wrapped onto the next row
        assert "END-OF-LONG-LINE" not in "".join(rows)
        assert "}" in rows[head + 1], rows[head + 1]  # the next row is the kernel's next line
        await pilot.press("escape")  # cancelling leaves the editor as before: the panes come back
        await until(pilot, lambda: not pane.editing)
        if size[0] >= 110:
            await until(pilot, lambda: app.screen.query_one(OutputPane).region.width > 0)
        await pilot.press("q")
    repo.close()
