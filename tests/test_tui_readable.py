"""Readable at 120×40 and 80×24 (issue #23.7–8): what a user must read is on screen without a click.

Real sessions (the fixture's and the bundled H200 demo's), real widgets; the screen is read back
from Textual's own SVG export.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.eval.result import BuildInfo, EvalResult
from sessions.repo import SessionRepo
from tests.test_tui_fixtures import TASK, kernel, region_text, screen_text
from tui.app import CudaforgeApp
from tui.demo import NOTICE, unpack
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.output_pane import NCU, OutputPane
from tui.widgets.status_line import StatusLine

pytestmark = pytest.mark.asyncio

SIZES = [(120, 40), (80, 24)]
# A g++ error line longer than any pane, after the command lines that push it out of a short log.
ERROR = (
    "main.cpp:12:5: error: 'undeclared_thing_42' was not declared in this scope; "
    "did you mean 'undeclared_thing_41'? (the first error the Coder must fix)"
)
COMMAND = "[1/2] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=cf_relu_cpu -DTORCH_API_INCLUDE_EXTENSION_H " * 2
CODE_REPLY = (
    "Here is the kernel.\n\n```python\next = load_inline(\n    name=\"cf_relu_cpu\",\n"
    "    cpp_sources=cpp_source,\n    functions=[\"relu\"],\n)\n```\n"
)


def flat(app: CudaforgeApp) -> str:
    return " ".join(screen_text(app).split())


async def shown(pilot: Any, read: Callable[[], str], needle: str, seconds: float = 15.0) -> str:
    """What ``read`` returns once it holds ``needle`` (the pane paints a frame or two later, later
    still on a loaded machine); its last text when the time is up."""
    text = read()
    for _ in range(int(seconds / 0.1)):
        if needle in text:
            break
        await pilot.pause(0.1)
        text = read()
    return text


def make_failed_build(root: Path) -> None:
    log = "\n".join([COMMAND] * 30 + ["FAILED: main.o", ERROR, "ninja: build stopped: subcommand failed."])
    result = EvalResult(status="compile_error", stage="build", task="relu", build=BuildInfo(log=log))
    with SessionRepo.create(root, task_source=TASK, task_name="relu", name="broken") as repo:
        repo.record_iteration(
            kernel_source=kernel(0),
            eval_result=result.to_dict(),
            phase="seed",
            transcript=[{"role": "coder", "model": "openai/o3", "reply": CODE_REPLY, "usage": {}}],
        )


@pytest.mark.parametrize("size", SIZES)
async def test_the_first_compiler_error_is_pinned_in_full_and_chat_code_wraps_on_words(
    tui_env: Path, size: tuple[int, int]
) -> None:
    make_failed_build(tui_env / "sessions")
    repo = SessionRepo.open("broken", tui_env / "sessions")
    app = CudaforgeApp(sessions_root=tui_env / "sessions", session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if size[0] < 110:
            app.screen.query_one("#narrow").active = "pane-output"
            await pilot.pause()
        output = app.screen.query_one(OutputPane)
        pinned = output.query_one("#build-error")
        # wrapped on words, every word of it on screen, above the log
        assert await shown(pilot, lambda: region_text(app, pinned), ERROR) == f"first error: {ERROR}"
        assert output.build_text().endswith("subcommand failed.")
        if size[0] < 110:
            app.screen.query_one("#narrow").active = "pane-chat"
            await pilot.pause()
        from tui.widgets.conversation import ConversationPane

        chat = await shown(pilot, lambda: region_text(app, app.screen.query_one(ConversationPane)), "cpp_sources")
        assert "cpp_sources=cpp_source," in chat.split()  # a code line is never broken inside a word
    repo.close()


@pytest.mark.parametrize("size", SIZES)
async def test_the_ncu_tab_shows_the_metric_table_of_the_profiled_kernel(
    tmp_path: Path, tui_env: Path, size: tuple[int, int]
) -> None:
    """The bundled H200 session: the values and the paper's metric names, no click, no scrolling."""
    repo = SessionRepo.open(unpack(tmp_path))
    app = CudaforgeApp(sessions_root=tmp_path, session=repo, mode="replay")
    async with app.run_test(size=size) as pilot:
        await pilot.press("n", "n")  # iteration 2: correct and profiled by ncu
        if size[0] < 110:
            app.screen.query_one("#narrow").active = "pane-output"
        app.screen.query_one(OutputPane).active = NCU
        legend = "K1 = relu_vec4_kernel(const float4 *, float4 *, long)"
        text = await shown(pilot, lambda: region_text(app, app.screen.query_one(OutputPane)), legend)
        assert legend in text
        assert "118,752 cycle sm__cycles_active" in text  # paper #1: the value first, then the name
        assert "81.87% sm__warps_active" in text
    repo.close()


async def test_notices_fade_and_never_cover_the_status_line(tmp_path: Path, tui_env: Path) -> None:
    repo = SessionRepo.open(unpack(tmp_path))
    app = CudaforgeApp(sessions_root=tmp_path, session=repo, mode="replay", notice=NOTICE)
    async with app.run_test(size=(60, 20), notifications=True) as pilot:
        for _ in range(100):  # under load the first frame takes a while
            if app._notifications:
                break
            await pilot.pause(0.1)
        (notice,) = app._notifications
        assert notice.timeout <= 10  # it goes away; the status line keeps saying it is a demo
        assert app.screen.query_one(StatusLine).text().startswith("scripted demo · n/p step")
        from textual.widgets._toast import ToastRack

        rack = app.screen.query_one(ToastRack)
        status = app.screen.query_one(StatusLine)
        assert rack.region.bottom <= status.region.y, (rack.region, status.region)
    repo.close()


async def test_an_empty_session_says_no_kernel_yet_not_no_cuda_source(tui_env: Path) -> None:
    task = tui_env / "relu.py"
    task.write_text(TASK)
    repo = SessionRepo.create(tui_env / "sessions", task)
    app = CudaforgeApp(sessions_root=tui_env / "sessions", session=repo, mode="replay")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        pane = app.screen.query_one(KernelPane)
        assert pane.text_area.text.startswith("# no kernel yet")
        await pilot.press("c")
        assert "no CUDA source" not in pane.text_area.text
    repo.close()


async def test_the_browser_title_counts_the_sessions_after_one_is_made(tui_env: Path) -> None:
    from tests.test_tui_fixtures import make_session

    root = tui_env / "sessions"
    app = CudaforgeApp(sessions_root=root)
    async with app.run_test(size=(80, 24)) as pilot:
        assert "no sessions yet" in flat(app)
        make_session(root)
        await pilot.press("g")
        await pilot.pause()
        assert "no sessions yet" not in flat(app) and "1 session in" in flat(app)
