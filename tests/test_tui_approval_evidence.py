"""The approval shows its evidence and only its own mode's fields; an unpriced call makes the cost unknown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import events as ev
from sessions.repo import SessionRepo
from tests.test_tui_fixtures import PROFILE, eval_dict, kernel
from tests.test_tui_fixtures import screen_text as raw_screen_text
from tui.app import CudaforgeApp
from tui.evidence import gather_evidence, named_lines
from tui.model import suggestion_markdown, suggestion_text
from tui.screens.approval import ApprovalScreen
from tui.widgets.status_line import StatusLine


def screen_text(app: Any) -> str:
    """The screen's text with runs of spaces collapsed (styled spans are exported apart)."""
    return " ".join(raw_screen_text(app).split())


OPTIMIZE = {
    "mode": "optimize",
    "critical_issue": "none found",
    "why_it_matters": "n/a",
    "minimal_fix_hint": "n/a",
    "key_metrics": ["dram__throughput at 71.5% of peak"],
    "bottleneck": "relu_kernel is memory bound",
    "optimization_method": "vectorize with float4",
    "modification_plan": "change line 9 to load float4",
    "parsed": True,
}
REPAIR = {
    "mode": "repair",
    "critical_issue": "`relu_kernel` indexes past n",
    "why_it_matters": "out of bounds writes",
    "minimal_fix_hint": "guard with i < n",
    "bottleneck": "n/a",
    "parsed": True,
}


def test_optimize_mode_lists_no_repair_fields_and_repair_no_optimize_fields() -> None:
    shown = suggestion_markdown(OPTIMIZE)
    assert "Critical issue" not in shown and "n/a" not in shown and "none found" not in shown
    assert "Bottleneck" in shown and "Key metrics" in shown
    assert "critical_issue" not in suggestion_text(OPTIMIZE)
    repair = suggestion_markdown(REPAIR)
    assert "Critical issue" in repair and "Bottleneck" not in repair


def test_evidence_names_the_verdict_the_cited_metric_and_the_kernel_lines() -> None:
    source = kernel(2)
    evidence = gather_evidence(OPTIMIZE, 2, eval_dict("correct", 1.8), PROFILE, source)
    assert evidence.headline() == "iter 2 · correct · 1.80x"
    assert [m.name for m in evidence.metrics] == ["dram__throughput"] and evidence.metrics_cited
    assert evidence.metrics[0].value == 71.5 and evidence.metrics[0].unit == "%"
    numbers = [line.number for line in evidence.lines]
    assert evidence.lines_named and 9 in numbers  # "line 9"
    assert any("__global__ void relu_kernel" in line.text for line in evidence.lines)  # relu_kernel


def test_repair_evidence_shows_the_failure_not_metrics() -> None:
    failed = eval_dict("compile_error", None)
    failed["messages"] = ["the extension failed to build: error: x undeclared"]
    evidence = gather_evidence(REPAIR, 0, failed, PROFILE, kernel(0))
    assert evidence.headline() == "iter 0 · compile error · stage build"
    assert evidence.problem.startswith("the extension failed to build") and evidence.metrics == []
    assert any("relu_kernel" in line.text for line in evidence.lines)  # backticked name


def test_a_suggestion_naming_nothing_shows_the_entry_points() -> None:
    evidence = gather_evidence({"mode": "optimize", "bottleneck": "it is slow"}, 1, None, None, kernel(1))
    assert not evidence.lines_named
    assert [line.number for line in evidence.lines] == [7, 15]  # __global__ and def forward
    assert named_lines(kernel(1), "see lines 2-3") == named_lines(kernel(1), "line 2, line 3")


@pytest.mark.asyncio
async def test_the_live_approval_carries_the_latest_iterations_evidence(session_root: Path) -> None:
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        workbench: Any = app.screen
        workbench.approvals.ask(ev.AwaitingApproval(suggestion=OPTIMIZE))
        await pilot.pause()
        assert isinstance(app.screen, ApprovalScreen)
        text = screen_text(app)
        # the branch's latest (iter 3, incorrect) beside the suggestion, both visible at 120 columns
        assert "on iter 3 · incorrect" in text and "Evidence · iter 3" in text
        assert "relu_kernel is memory bound" in text and "Critical issue" not in text
        await pilot.press("v")  # no toggle needed (nor offered) side by side
        assert "relu_kernel is memory bound" in screen_text(app)
    repo.close()


@pytest.mark.asyncio
async def test_at_80_columns_the_evidence_is_one_key_away(session_root: Path) -> None:
    repo = SessionRepo.open("relu-demo", session_root)
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        item = app.screen.history[2]  # type: ignore[attr-defined]
        evidence = gather_evidence(OPTIMIZE, 2, item.eval_result, item.profile, item.kernel_source)
        app.push_screen(ApprovalScreen(OPTIMIZE, evidence=evidence))
        await pilot.pause()
        text = screen_text(app)
        assert "on iter 2 · correct · 1.80x" in text and "Evidence" not in text and "v evidence" in text
        await pilot.press("v")
        text = screen_text(app)
        assert "Metrics the Judge cited" in text and "dram__throughput 71.5 %" in text
        assert "9 │" in text and "Bottleneck" not in text
        await pilot.press("v")
        assert "Bottleneck" in screen_text(app)
        await pilot.press("a")
        await pilot.pause()
        assert not isinstance(app.screen, ApprovalScreen)
    repo.close()


@pytest.mark.asyncio
async def test_status_line_says_cost_unknown_after_an_unpriced_call(session_root: Path) -> None:
    repo = SessionRepo.open("relu-demo", session_root)
    repo.record_iteration(
        kernel_source=kernel(5), eval_result=eval_dict("correct", 1.2), tokens=14000, cost_usd=None
    )
    app = CudaforgeApp(sessions_root=session_root, session=repo, mode="replay")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        status = app.screen.query_one(StatusLine)
        assert "$0.0300" in status.text()  # iteration 0 of the replay: priced
        await pilot.press("n", "n", "n", "n")  # up to the unpriced iteration
        assert "cost unknown" in status.text() and "$" not in status.text()
        await pilot.press("p")
        assert "$0.1200" in status.text()
        status.add_cost(None)  # a live call to an unpriced model
        assert "cost unknown" in status.text()
    repo.close()
