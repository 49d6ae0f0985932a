"""Screenshots of the TUI compared with accepted SVGs (pytest-textual-snapshot), at 80×24 and 120×40.

Regenerate after an intended change with ``pytest tests/test_tui_snapshots.py --snapshot-update``
and look at the SVGs in ``tests/__snapshots__/test_tui_snapshots/`` before committing them.

Nothing machine- or run-specific may reach a screenshot: the session is made with a fixed clock in
UTC (the browser shows its creation time), the browser is given a relative sessions root (its title
shows the root), and settings and state live in the test's folder.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions.repo import SessionRepo
from tests.test_tui_fixtures import SUGGESTION, make_session
from tui.app import CudaforgeApp
from tui.screens.approval import ApprovalScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]
CREATED = 1796040000.0  # 2026-11-30 12:00 UTC


@pytest.fixture
def fixed_root(tui_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``sessions`` (relative) under the test's folder, holding the fixture session made at CREATED."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.chdir(tui_env)
    with monkeypatch.context() as clock:
        clock.setattr(time, "time", lambda: CREATED)  # the commits' timestamps, nothing else
        make_session(Path("sessions"))
    yield Path("sessions")
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def replay_app(fixed_root: Path) -> Iterator[CudaforgeApp]:
    repo = SessionRepo.open("relu-demo", fixed_root)
    yield CudaforgeApp(sessions_root=fixed_root, session=repo, mode="replay")
    repo.close()


@pytest.mark.parametrize("size", SIZES)
def test_session_browser(snap_compare: Any, fixed_root: Path, size: tuple[int, int]) -> None:
    assert snap_compare(CudaforgeApp(sessions_root=fixed_root), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_workbench_replaying_a_session(
    snap_compare: Any, replay_app: CudaforgeApp, size: tuple[int, int]
) -> None:
    """Iteration 2 of main (the best, 1.80x): task, kernel, build log, chat, timeline, status, keys."""
    assert snap_compare(replay_app, press=["n", "n"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_approval_modal_over_the_workbench(
    snap_compare: Any, replay_app: CudaforgeApp, size: tuple[int, int]
) -> None:
    """The Judge's suggestion as the workbench shows it when the loop waits for a decision, flagged."""

    def ask(pilot: Any) -> None:
        workbench = pilot.app.screen
        evidence = workbench.approval_evidence(SUGGESTION)  # the branch's latest: iter 3, incorrect
        pilot.app.push_screen(ApprovalScreen(SUGGESTION, flagged=True, evidence=evidence))

    assert snap_compare(replay_app, run_before=ask, terminal_size=size)


# An optimize suggestion about iteration 2 (1.80x) that names a kernel line and a cited metric; its
# repair fields ("none found") must not be shown.
OPTIMIZE = {
    "mode": "optimize",
    "critical_issue": "none found",
    "why_it_matters": "n/a",
    "key_metrics": ["dram__throughput 71.5% of peak", "sm__warps_active 40%"],
    "bottleneck": "relu_kernel reads one float per thread: memory bound at 71.5% of DRAM peak",
    "optimization_method": "vectorize loads with float4",
    "modification_plan": "in relu_kernel, load and store float4 (line 9), n/4 threads",
    "text": "",
    "parsed": True,
}


@pytest.mark.parametrize("size", SIZES)
def test_approval_beside_its_evidence(
    snap_compare: Any, replay_app: CudaforgeApp, size: tuple[int, int]
) -> None:
    """Iteration 2's verdict, the cited metric's measured value and the named kernel lines beside the
    suggestion (at 80×24: the suggestion, with the evidence one key away, ``v``)."""

    def ask(pilot: Any) -> None:
        from tui.evidence import gather_evidence

        item = pilot.app.screen.history[2]
        evidence = gather_evidence(OPTIMIZE, item.number, item.eval_result, item.profile, item.kernel_source)
        pilot.app.push_screen(ApprovalScreen(OPTIMIZE, evidence=evidence))

    assert snap_compare(replay_app, run_before=ask, terminal_size=size)


def test_approval_evidence_one_key_away_at_80x24(snap_compare: Any, replay_app: CudaforgeApp) -> None:
    """At 80×24, ``v`` swaps the suggestion for its evidence."""

    def ask(pilot: Any) -> None:
        from tui.evidence import gather_evidence

        item = pilot.app.screen.history[2]
        evidence = gather_evidence(OPTIMIZE, item.number, item.eval_result, item.profile, item.kernel_source)
        pilot.app.push_screen(ApprovalScreen(OPTIMIZE, evidence=evidence))

    assert snap_compare(replay_app, run_before=ask, press=["v"], terminal_size=(80, 24))


@pytest.mark.parametrize("size", SIZES)
def test_an_exploration_branchs_gate_names_the_branch(
    snap_compare: Any, replay_app: CudaforgeApp, size: tuple[int, int]
) -> None:
    """An exploration stepped from the chooser (``s``): a branch's suggestion in the approval view, the
    branch in the title, and ``g`` (every branch on, unasked) in place of ``esc`` later."""

    def ask(pilot: Any) -> None:
        from tui.evidence import gather_evidence

        item = pilot.app.screen.history[2]
        evidence = gather_evidence(OPTIMIZE, item.number, item.eval_result, item.profile, item.kernel_source)
        pilot.app.push_screen(ApprovalScreen(OPTIMIZE, evidence=evidence, branch="explore/2-1"))

    assert snap_compare(replay_app, run_before=ask, terminal_size=size)
