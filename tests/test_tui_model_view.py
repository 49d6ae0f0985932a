"""The model view (``cudaforge new OUT``): a model folder written by hand (manifest, profile, task files, one
task's session), shown at 80×24 and 120×40; a faster kernel on another branch moves the end-to-end line
after ``r``; ``enter`` on a task without a session creates ``OUT/sessions/<task>`` and opens the workbench;
a broken folder is refused in one line with exit 2. No model, no GPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sessions.paths import is_session_dir
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, REPO, python_path
from tests.test_tui_fixtures import kernel, screen_rows, screen_text
from tui.app import CudaforgeApp
from tui.screens import model as model_screen
from tui.screens.dialogs import HelpScreen
from tui.screens.model import ModelScreen
from tui.screens.workbench import WorkbenchScreen

SIZES = [(80, 24), (120, 40)]
TASK_TEXT = (EXAMPLES / "tasks" / "relu.py").read_text()
INPUT = [{"t": "tensor", "shape": [8, 64], "dtype": "float16"}]


def module(
    path: str, kind: str, total: float, own: float, leaf: bool = False, headroom: float | None = None
) -> dict[str, Any]:
    ms = 2.0 * total
    floor = {"floor_ms": ms / headroom, "bound": "memory"} if headroom else None
    return {
        "path": path, "type": kind, "calls": 2 if path.startswith("blocks") else 1,
        "share": {"self": own, "total": total}, "self_ms": 2.0 * own, "total_ms": ms,
        "args": INPUT, "floor": floor, "headroom": headroom, "leaf": leaf,
    }  # fmt: skip


PROFILE = {
    "model": "toy.TinyNet", "dtype": "float16", "device": "cuda", "gpu": "NVIDIA H200", "gpu_spec": "h200",
    "latency": {"median_ms": 2.5, "q1_ms": 2.4, "q3_ms": 2.6, "runs": 20}, "device_ms": 2.0,
    "modules": [
        module("", "toy.TinyNet", 1.0, 0.0),
        module("blocks.0", "toy.Block", 0.32, 0.0),
        module("blocks.0.fc", "torch.nn.modules.linear.Linear", 0.22, 0.22, leaf=True, headroom=3.5),
        module("blocks.0.act", "torch.nn.modules.activation.GELU", 0.1, 0.1, leaf=True),
        module("blocks.1", "toy.Block", 0.32, 0.0),
        module("blocks.1.fc", "torch.nn.modules.linear.Linear", 0.22, 0.22, leaf=True, headroom=3.5),
        module("blocks.1.act", "torch.nn.modules.activation.GELU", 0.1, 0.1, leaf=True),
        module("head", "torch.nn.modules.linear.Linear", 0.3, 0.3, leaf=True, headroom=1.2),
        module("norm", "torch.nn.modules.normalization.LayerNorm", 0.004, 0.004, leaf=True),
    ],
}  # fmt: skip
MANIFEST = {
    "model": "toy.TinyNet", "spec": {"dtype": "float16"}, "device": "cuda", "gpu": "NVIDIA H200",
    "tasks": [
        {"name": "block", "paths": ["blocks.0", "blocks.1"], "share": 0.64, "file": "tasks/block.py"},
        {"name": "head", "paths": ["head"], "share": 0.3, "file": "tasks/head.py"},
    ],
    "skipped": [],
}  # fmt: skip
# block at 1.5x: 1 / (1 - 0.64 + 0.64 / 1.5) = 1.27x; at 3.0x on a branch: 1 / (0.36 + 0.2133) = 1.74x
BAR = re.compile(r"([\w.]+ \(\w+\)) ([█▏▎▍▌▋▊▉]+) ([\d.]+%)$")
FIRST, FASTER = "estimated end to end 1.27x", "estimated end to end 1.74x"


def correct(speedup: float) -> dict[str, Any]:
    return {"status": "correct", "speedup": speedup, "stage": "time"}


@pytest.fixture
def model_out(tui_env: Path) -> Path:
    """A model folder as ``cudaforge extract`` writes it, with a session for ``block`` (1.5x on main)."""
    out = tui_env / "out"
    (out / "tasks").mkdir(parents=True)
    for name in ("block", "head"):
        (out / "tasks" / f"{name}.py").write_text(TASK_TEXT)
    (out / "manifest.json").write_text(json.dumps(MANIFEST))
    (out / "profile.json").write_text(json.dumps(PROFILE))
    with SessionRepo.create(out / "sessions", out / "tasks" / "block.py", name="block") as repo:
        repo.record_iteration(kernel_source=kernel(0), eval_result=correct(1.5), phase="seed")
    return out


def flat(app: CudaforgeApp) -> str:
    return " ".join(screen_text(app).split())


def rows(app: CudaforgeApp) -> list[str]:
    """The screen's rows, each with its runs of spaces made one."""
    return [" ".join(row.split()) for row in screen_rows(app)]


async def settled(app: CudaforgeApp, pilot: Any, after: int = 0) -> ModelScreen:
    """The model view once the last read of the folder asked for is shown (the worker's message handled),
    and it is a read past the first ``after`` (a screen shown again asks for its read in a message of its
    own, which may not have been handled yet when the screen is back)."""
    screen = app.screen
    assert isinstance(screen, ModelScreen)
    for _ in range(200):
        if screen.reads > after and not screen.reading:
            break
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert screen.reads > after and not screen.reading
    await pilot.pause()  # the tables lay out the rows they were given
    return screen


def no_loop(repo: Any, on_event: Any) -> None:
    return None  # the workbench opens read-only: nothing here runs a loop


def model_app(out: Path) -> CudaforgeApp:
    return CudaforgeApp(sessions_root=out / "sessions", model_folder=out, loop_factory=no_loop)


@pytest.fixture(autouse=True)
def no_timer_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the reads a test asks for (the screen's timer would read the folder again every few seconds)."""
    monkeypatch.setattr(model_screen, "RELOAD_S", 3600.0)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_header_profile_tree_tasks_chart_and_estimate(model_out: Path, size: tuple[int, int]) -> None:
    app = model_app(model_out)
    async with app.run_test(size=size) as pilot:
        await settled(app, pilot)
        text = flat(app)
        assert "toy.TinyNet · float16 · NVIDIA H200 · eager forward 2.500 ms" in text
        assert "device time 2.000 ms per forward" in text
        assert FIRST in text and "from 1 task(s)' best (64% of the device time)" in text
        lines = rows(app)
        assert any("block 2 64.0% 1 iteration 1.50x · main #0" in line for line in lines), lines
        assert any("head 1 30.0% none —" in line for line in lines), lines
        # a task's own module marked with its name, the modules inside it with the name in parentheses
        # "blocks" (a ModuleList, never called) is not shown: its children are named from the model
        assert any(line.startswith("blocks.0 Block 2 32.0% 0.0% 0.640 – block") for line in lines), lines
        assert any("fc Linear 2 22.0% 22.0% 0.440 3.5 (block)" in line for line in lines), lines
        assert any("head Linear 1 30.0% 30.0% 0.600 1.2 head" in line for line in lines), lines
        assert "(1 more modules under 1% of the device time)" in text
        if size[0] < model_screen.NARROW_WIDTH:  # the chart is the second tab
            assert "heaviest modules" not in text
            await pilot.press("right_square_bracket")
            await pilot.pause()
            text, lines = flat(app), rows(app)
        assert "share of the device time, heaviest modules" in text
        # each bar labelled, the heaviest full width, a 10% one a third of it (scaled to the heaviest)
        bars = {m.group(1): (len(m.group(2)), m.group(3)) for m in map(BAR.search, lines) if m}
        assert bars["head (Linear)"][1] == "30.0%" and bars["blocks.0.act (GELU)"][1] == "10.0%", bars
        assert abs(bars["blocks.0.act (GELU)"][0] - bars["head (Linear)"][0] / 3) <= 1, bars


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_help_lists_the_model_keys_by_id(model_out: Path, size: tuple[int, int]) -> None:
    app = model_app(model_out)
    async with app.run_test(size=size) as pilot:
        await settled(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = flat(app)
        for ident in ("model.open", "model.refresh", "model.back", "app.quit"):
            assert ident in text, ident
        # the panes are tabs only when narrow: [ and ] are listed only there
        assert ("model.pane-next" in text) == (size[0] < model_screen.NARROW_WIDTH)


@pytest.mark.asyncio
async def test_r_reads_the_folder_again_and_a_faster_branch_moves_the_estimate(model_out: Path) -> None:
    app = model_app(model_out)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await settled(app, pilot)
        assert FIRST in flat(app)
        with SessionRepo.open(model_out / "sessions" / "block") as repo:
            branch = repo.branch_from(0)
            repo.record_iteration(
                kernel_source=kernel(1), eval_result=correct(3.0), phase="optimize", branch=branch
            )
        reads = screen.reads
        await pilot.press("r")
        await settled(app, pilot)
        assert screen.reads == reads + 1
        text = flat(app)
        assert FASTER in text and FIRST not in text
        assert any(f"block 2 64.0% 2 iterations 3.00x · {branch} #1" in line for line in rows(app)), rows(app)


@pytest.mark.asyncio
async def test_the_timer_reads_the_folder_again_while_the_view_is_shown(
    model_out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view sets an interval timer of RELOAD_S; its tick (fired here as the timer would, so nothing waits
    on the clock) reads the folder again and shows a session's new best."""
    timers: list[tuple[float, Any]] = []
    original = ModelScreen.set_interval

    def recording(self: ModelScreen, interval: float, callback: Any = None, **kwargs: Any) -> Any:
        timers.append((interval, callback))
        return original(self, 3600.0, callback, **kwargs)  # registered, but never ticking by itself here

    monkeypatch.setattr(ModelScreen, "set_interval", recording)
    app = model_app(model_out)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await settled(app, pilot)
        # Textual sets timers of its own on a screen: the view's is the one that ticks _tick
        [(interval, tick)] = [(i, cb) for i, cb in timers if getattr(cb, "__name__", "") == "_tick"]
        assert interval == model_screen.RELOAD_S
        reads = screen.reads
        with SessionRepo.open(model_out / "sessions" / "block") as repo:
            repo.record_iteration(kernel_source=kernel(1), eval_result=correct(3.0), phase="optimize")
        assert FASTER not in flat(app)
        tick()
        await settled(app, pilot)
        assert FASTER in flat(app) and screen.reads > reads


@pytest.mark.asyncio
async def test_enter_on_a_task_without_a_session_creates_it_and_opens_the_workbench(model_out: Path) -> None:
    session = model_out / "sessions" / "head"
    assert not session.exists()
    app = model_app(model_out)
    async with app.run_test(size=(80, 24)) as pilot:
        model = await settled(app, pilot)
        reads = model.reads
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen)
        assert app.screen.repo.path == session.resolve()
        assert is_session_dir(session)
        with SessionRepo.open(session) as repo:
            assert repo.task_source == TASK_TEXT and repo.task_name == "head"
            assert repo.settings()["settings"]["models"]["coder"] == app.config.models.coder
        await pilot.press("escape", "y")  # leave: back to the model view, which reads the folder again
        assert isinstance(app.screen, ModelScreen)
        await settled(app, pilot, after=reads)
        assert any("head 1 30.0% 0 iterations —" in line for line in rows(app)), rows(app)


@pytest.mark.asyncio
async def test_o_on_a_task_with_a_session_opens_that_session(model_out: Path) -> None:
    app = model_app(model_out)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(app, pilot)
        await pilot.press("o")
        await pilot.pause()
        assert isinstance(app.screen, WorkbenchScreen)
        assert app.screen.repo.path == (model_out / "sessions" / "block").resolve()
        assert sorted(p.name for p in (model_out / "sessions").iterdir()) == ["block"]


def cudaforge_new(folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": python_path()}
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "new", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )


def test_new_with_a_broken_model_folder_exits_2_with_one_line(tui_env: Path) -> None:
    unreadable = tui_env / "unreadable"
    (unreadable / "tasks").mkdir(parents=True)
    (unreadable / "manifest.json").write_text("{not json")
    done = cudaforge_new(unreadable)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "no readable manifest.json" in done.stderr
    assert not (unreadable / "sessions").exists()

    bad_task = tui_env / "bad-task"
    (bad_task / "tasks").mkdir(parents=True)
    (bad_task / "manifest.json").write_text(json.dumps({"tasks": [{"name": "block"}]}))  # no paths
    done = cudaforge_new(bad_task)
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.strip().count("\n") == 0 and "not a model folder cudaforge extract wrote" in done.stderr
    )
