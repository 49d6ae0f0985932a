"""The Chart tab: the branch's speedup per iteration drawn by textual-plot (ARCHITECTURE.md §8), the
other branches faint, correct and incorrect kernels marked, the best starred; snapshots at 80×24 and
120×40, and a check that it draws what the records say."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_tui_snapshots import SIZES, fixed_root, replay_app  # noqa: F401 - fixtures
from tui.widgets.output_pane import OutputPane


def _show_chart(pilot: Any) -> None:
    screen = pilot.app.screen
    if screen.query("#narrow"):  # 80 columns: the panes are tabs; show the output pane's
        screen.query_one("#narrow").active = "pane-output"
    screen.query_one(OutputPane).active = "tab-chart"


@pytest.mark.parametrize("size", SIZES)
def test_speedup_chart_tab(snap_compare: Any, replay_app: Any, size: tuple[int, int]) -> None:  # noqa: F811
    """Iteration 2 of main: 1.10x then 1.80x (best), #0 and #3 not correct; from-iter-1's 2.5x faint."""
    assert snap_compare(replay_app, press=["n", "n"], run_before=_show_chart, terminal_size=size)


@pytest.mark.asyncio
async def test_the_plot_draws_the_records(replay_app: Any) -> None:  # noqa: F811
    async with replay_app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n", "n")
        output = pilot.app.screen.query_one(OutputPane)
        output.active = "tab-chart"
        await pilot.pause()
        plot = output.query_one("#speedup-plot")
        repo = replay_app.screen.repo
        main = [(it.number, it.speedup) for it in repo.history("main") if it.correct]
        other = [(it.number, it.speedup) for it in repo.history("from-iter-1") if it.correct]
        drawn = [(list(d.x), list(d.y)) for d in plot._datasets]
        pairs = [[x, y] for x, y in drawn]
        assert [list(v) for v in zip(*main, strict=True)] in pairs  # the branch's line (and its markers)
        assert [list(v) for v in zip(*other, strict=True)] in pairs  # the other branch, faint
        failed = [it.number for it in repo.history("main") if not it.correct]
        assert [failed, [0.0] * len(failed)] in pairs
        best = repo.best("main")
        assert [[best.number], [best.speedup]] in pairs
