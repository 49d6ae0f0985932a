"""Issue 46, "120×40 is cramped": the workbench's defects a new user met in tmux, each at 120×40 and 80×24.

The kernel editor takes the whole width and scrolls sideways; a cut text ends in "…" and is one key
(``i``) away in full; the Judge's structured reply shows as its fields; the speedup chart's y-axis
reads in "×"; the output pane's tabs have keys (``1``–``5``). Real session repos, the real loop with
scripted agents where a loop is needed, the real app driven by Textual's pilot; the screen is read
back from Textual's own SVG export (ARCHITECTURE.md §8).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions.repo import SessionRepo
from tests.test_tui_fixtures import SIZES, TASK, eval_dict, kernel, region_text, screen_rows, until
from tui.app import CudaforgeApp

pytestmark = pytest.mark.asyncio

SCRIPTED = Path(__file__).parent / "fixtures" / "scripted" / "reject"




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


# ------------------------------------------------------------------ 2. cut only with "…", in full on i

LONG_BRANCH = "explore/1-vectorised-float4-loads-and-a-grid-stride-loop-over-all-SMs"


def pane_rows(app: Any, widget: Any) -> list[str]:
    """The widget's own columns of each of its screen rows, right-stripped."""
    region = widget.region
    rows = screen_rows(app)[region.y : region.y + region.height]
    return [row[region.x : region.right].rstrip() for row in rows]


async def full_text_shown(pilot: Any) -> str:
    """Press ``i`` and return the full-text dialog's body."""
    from tui.screens.full_text import FullTextScreen

    await pilot.press("i")
    await until(pilot, lambda: isinstance(pilot.app.screen, FullTextScreen))
    return str(pilot.app.screen.query_one("#full-text-body").render())


@pytest.mark.parametrize("size", SIZES)
async def test_the_status_line_and_the_timeline_end_cut_text_with_an_ellipsis_and_i_shows_it_in_full(
    session_root: Path, size: tuple[int, int]
) -> None:
    from tui.widgets.status_line import StatusLine
    from tui.widgets.timeline import Timeline

    with SessionRepo.open("relu-demo", session_root) as repo:
        repo.branch_from(1, name=LONG_BRANCH, switch=True)
        repo.record_iteration(
            kernel_source=kernel(5), eval_result=eval_dict("correct", 1.4), phase="optimize"
        )
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n")  # #2, the long branch's own iteration
        status = app.screen.query_one(StatusLine)
        await until(pilot, lambda: LONG_BRANCH[:20] in "".join(pane_rows(app, status)))
        (line,) = pane_rows(app, status)
        assert line.endswith("…"), line  # cut, and says so
        body = await full_text_shown(pilot)  # nothing focused: the status line, every field of it
        assert LONG_BRANCH in body and "740 tok" in body and status.text().split(" │ ")[-1] in body
        await pilot.press("escape")
        await pilot.press("t", "up")  # the timeline, on the shown iteration's branch
        timeline = app.screen.query_one(Timeline)
        await until(pilot, lambda: any("explore/1-" in row for row in pane_rows(app, timeline)))
        title = next(row for row in pane_rows(app, timeline) if "explore/1-" in row)
        assert title.rstrip("│▎ ").endswith("…"), title
        body = await full_text_shown(pilot)
        assert f"{LONG_BRANCH} (from #1) · current" in body
        await pilot.press("escape")
    repo.close()


@pytest.mark.parametrize("size", SIZES)
async def test_ncu_metric_names_end_with_an_ellipsis_and_i_shows_the_highlighted_row_in_full(
    tmp_path: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    """The bundled H200 session's profiled iteration: long metric names in a 45- or 80-column pane."""
    from tui.demo import unpack
    from tui.widgets.output_pane import NCU, OutputPane

    name = "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
    repo = SessionRepo.open(unpack(tmp_path))
    app = CudaforgeApp(sessions_root=tmp_path, session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n")
        if size[0] < 110:
            app.screen.query_one("#narrow").active = "pane-output"
        output = app.screen.query_one(OutputPane)
        output.active = NCU
        await until(pilot, lambda: any(row.startswith(" 1.679%") for row in pane_rows(app, output)))
        row = next(row for row in pane_rows(app, output) if row.startswith(" 1.679%"))  # the FMA pipe's row
        assert "sm__inst_executed_pi" in row and row.endswith("…") and name not in row, row
        table = output.query_one("#ncu-table")
        table.focus()  # as Tab or a click does
        metrics = [metric for _, metric, _ in output._ncu.rows]
        await pilot.press(*["down"] * metrics.index(name))
        body = await full_text_shown(pilot)
        assert name in body and "1.679%" in body and "relu_vec4_kernel" in body and "paper #" in body
    repo.close()


# ------------------------------------------------------------------ 3. the Judge's reply as its fields


def make_judged(root: Path, reply: str) -> None:
    with SessionRepo.create(root, task_source=TASK, task_name="relu", name="judged") as repo:
        repo.record_iteration(kernel_source=kernel(0), eval_result=eval_dict("correct", 1.1), phase="seed")
        repo.record_iteration(
            kernel_source=kernel(1),
            eval_result=eval_dict("correct", 1.3),
            phase="optimize",
            transcript=[
                {"role": "judge", "kind": "optimize", "model": "m/judge", "reply": reply, "usage": {}}
            ],
        )


JUDGE_REPLY = (
    '```json\n{"key_metrics": ["dram__throughput 71.5% of peak"], "bottleneck": "memory bound at 71.5% of DRAM '
    'peak", "optimization_method": "vectorize loads with float4", "modification_plan": "load float4, n/4 '
    'threads", "rationale": "fewer, wider transactions"}\n```'
)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(
    ("reply", "shown", "hidden"),
    [
        pytest.param(
            JUDGE_REPLY,
            ["Mode: optimize", "Bottleneck: memory bound", "Optimization method: vectorize loads with float4",
             "Key metrics: dram__throughput 71.5% of peak", "Rationale: fewer, wider transactions"],
            ['"bottleneck"', "{"],
            id="json",
        ),
        pytest.param(
            '{"bottleneck": "memory bound, cut off by the token lim',  # no JSON parses: the raw text
            ['{"bottleneck": "memory bound, cut off by the token lim'],
            ["Mode:"],
            id="raw-fallback",
        ),
    ],
)  # fmt: skip
async def test_the_judges_reply_shows_as_its_fields_with_the_raw_text_as_fallback(
    tui_env: Path, size: tuple[int, int], reply: str, shown: list[str], hidden: list[str]
) -> None:
    from tui.widgets.conversation import ConversationPane

    make_judged(tui_env / "sessions", reply)
    repo = SessionRepo.open("judged", tui_env / "sessions")
    app = CudaforgeApp(sessions_root=tui_env / "sessions", session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n")
        if size[0] < 110:
            app.screen.query_one("#narrow").active = "pane-chat"
        chat = app.screen.query_one(ConversationPane)
        await until(pilot, lambda: "Judge · m/judge" in region_text(app, chat))
        text = region_text(app, chat)
        for words in shown:
            assert words in text, (words, text)
        for words in hidden:
            assert words not in text, (words, text)
    repo.close()


# ------------------------------------------------------------------ 4. the chart's y-axis in "×"


@pytest.mark.parametrize("size", SIZES)
async def test_the_speedup_charts_y_axis_is_labelled_in_speedups(
    tmp_path: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    """The bundled H200 session (0.66x, 0.95x: the 0–1 axis of the report): 0×, 0.5×, 1.0× marks."""
    from tui.demo import unpack
    from tui.widgets.output_pane import CHART, OutputPane

    repo = SessionRepo.open(unpack(tmp_path))
    app = CudaforgeApp(sessions_root=tmp_path, session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n", "n")
        if size[0] < 110:
            app.screen.query_one("#narrow").active = "pane-output"
        output = app.screen.query_one(OutputPane)
        output.active = CHART
        await until(pilot, lambda: bool(output.query("#speedup-plot")))
        plot = output.query_one("#speedup-plot")
        await until(pilot, lambda: any("1.0× ┫" in row for row in pane_rows(app, plot)))
        ticks = [row.split("┫")[0].strip() for row in pane_rows(app, plot) if "┫" in row]
        assert ticks == ["1.0×", "0.5×", "0×"], ticks  # two rows apart at least, top to bottom
    repo.close()


# ------------------------------------------------------------------ 5. the output tabs' keys


@pytest.mark.parametrize("size", SIZES)
async def test_keys_1_to_5_show_each_output_tab_and_the_strip_names_them(
    session_root: Path, size: tuple[int, int]
) -> None:
    from tui.widgets.output_pane import BUILD, CHART, CHECKS, NCU, ROOF, OutputPane
    from tui.widgets.tabs import TabStrip

    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n")
        output = app.screen.query_one(OutputPane)
        for key, tab in (("4", CHART), ("3", NCU), ("2", CHECKS), ("5", ROOF), ("1", BUILD)):
            await pilot.press(key)
            await until(pilot, lambda tab=tab: output.active == tab and output.region.width > 0)
        await pilot.press("4")
        await until(
            pilot, lambda: any("1.0×" in row for row in pane_rows(app, output))
        )  # the chart, on screen
        strip = output.query_one(TabStrip)
        assert pane_rows(app, strip)[0].split() == [
            "1",
            "Build",
            "2",
            "Checks",
            "3",
            "NCU",
            "4",
            "Chart",
            "5",
            "Roofline",
        ]
        rows = {description for _, description, _ in app.binding_rows()}
        assert {
            "Output tab: Build",
            "Output tab: Roofline",
            "Full text of what is cut (…)",
        } <= rows  # in help
    repo.close()
