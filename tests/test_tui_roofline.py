"""The roofline in the NCU tab (tui/model.py ``roofline_lines``): each profiled kernel's limiting roof
and the percentage reached, the same numbers the Judge reads; on the demo session's real H200 profile,
with snapshots at 80×24 and 120×40. Without Nsight Compute it says what is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions.repo import SessionRepo
from tests.test_tui_snapshots import SIZES
from tui.app import CudaforgeApp
from tui.demo import unpack
from tui.model import roofline_lines
from tui.widgets.output_pane import OutputPane


@pytest.fixture
def demo_app(tui_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CudaforgeApp]:
    monkeypatch.chdir(tui_env)
    root = Path("sessions")
    root.mkdir()
    path = unpack(root)
    repo = SessionRepo.open(path)
    yield CudaforgeApp(sessions_root=root, session=repo, mode="replay")
    repo.close()


def _show_ncu(pilot: Any) -> None:
    screen = pilot.app.screen
    if screen.query("#narrow"):
        screen.query_one("#narrow").active = "pane-output"
    screen.query_one(OutputPane).active = "tab-ncu"


@pytest.mark.parametrize("size", SIZES)
def test_roofline_in_the_ncu_tab(snap_compare: Any, demo_app: CudaforgeApp, size: tuple[int, int]) -> None:
    """The demo's best ReLU (real H200 counters): no FLOPs, so the memory roof, at its share of peak."""
    assert snap_compare(demo_app, press=["n", "n", "n"], run_before=_show_ncu, terminal_size=size)


def test_the_roofline_lines_say_what_the_judge_reads(tui_env: Path) -> None:
    with SessionRepo.open(unpack(tui_env / "sessions")) as repo:
        profile = repo.best().profile
    [kernel] = profile["summary"]["data"]["kernels"]
    [line] = roofline_lines(profile, [kernel["name"]])
    percent = f"{kernel['dram_pct_of_peak']:.0f}"
    assert line.startswith("roofline K1: ") and f" {percent}% of the memory roof" in line
    assert f"= {percent}% of" in profile["summary"]["text"]  # the DRAM share the Judge was given


def test_without_counters_it_says_what_is_missing() -> None:
    fallback = {
        "kind": "torch-profiler",
        "unavailable": {"reason": "permission"},
        "summary": {"text": "PyTorch profiler: 1 kernel\\nRoofline estimate: 61% of peak DRAM bandwidth", "data": {}},
    }
    lines = roofline_lines(fallback)
    assert lines[0] == "roofline: no Nsight Compute counters (permission); per-kernel positions are missing"
    assert roofline_lines(None) == []
