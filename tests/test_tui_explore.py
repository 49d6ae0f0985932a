"""Explore in the workbench (issue 28): the chooser of the Judge's ideas (tui/screens/explore.py) and the
exploration's tree in the timeline (``tui.model.exploration_notes``), on the demo session's real H200
iterations, with snapshots at 80×24 and 120×40."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.agents.parse import parse_ideas
from engine.explore.plan import DONE, PRUNED, RUNNING, BranchState, ExplorePlan, ExploreSpec, save_plan
from sessions.repo import SessionRepo
from tests.test_tui_snapshots import SIZES
from tui.app import CudaforgeApp
from tui.demo import unpack
from tui.evidence import gather_evidence
from tui.screens.explore import ExploreChoice, ExploreChooser
from tui.widgets.timeline import Timeline

# Three ideas as a Judge gives them about the demo's best ReLU (its metrics are in that iteration's profile).
REPLY = """```json
[
 {"rank": 1, "key_metrics": ["dram__throughput.avg.pct_of_peak_sustained_elapsed"],
  "bottleneck": "DRAM bandwidth: 77% of the memory roof at 16 blocks per SM",
  "optimization_method": "two float4 loads in flight per thread",
  "modification_plan": "unroll the grid-stride loop by two in relu_vec4_kernel"},
 {"rank": 2, "key_metrics": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
  "bottleneck": "warps idle behind the loads",
  "optimization_method": "a larger block",
  "modification_plan": "launch 512 threads per block instead of 256"},
 {"rank": 3, "key_metrics": ["launch__registers_per_thread"],
  "bottleneck": "the tail kernel's second launch",
  "optimization_method": "fold the tail into the main kernel",
  "modification_plan": "handle the last n % 4 floats in relu_vec4_kernel's last block"}
]
```"""


@pytest.fixture
def demo(tui_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionRepo]:
    monkeypatch.chdir(tui_env)
    root = Path("sessions")
    root.mkdir()
    repo = SessionRepo.open(unpack(root))
    yield repo
    repo.close()


def _chooser(repo: SessionRepo) -> ExploreChooser:
    ideas = [idea.to_dict() for idea in parse_ideas(REPLY, "optimize", 3)]
    best = repo.best()
    evidence = [gather_evidence(i, best.number, best.eval_result, best.profile, best.kernel_source) for i in ideas]
    return ExploreChooser(ideas, best.number, "main", rounds=2, evidence=evidence)


@pytest.mark.parametrize("size", SIZES)
def test_the_chooser_shows_the_ideas_beside_their_evidence(snap_compare: Any, demo: SessionRepo, size: tuple[int, int]) -> None:
    """Three ideas ticked; the first one's fields, and the metrics it cites as measured in iteration 3."""
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")

    async def open_chooser(pilot: Any) -> None:
        await pilot.app.push_screen(_chooser(demo))
        await pilot.pause()

    assert snap_compare(app, run_before=open_chooser, terminal_size=size)


@pytest.mark.asyncio
async def test_ticking_changing_and_adding_give_the_choices_in_list_order(demo: SessionRepo) -> None:
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")
    chosen: list[ExploreChoice | None] = []
    async with app.run_test(size=(120, 40)) as pilot:
        chooser = _chooser(demo)
        ideas = [dict(i.idea) for i in chooser.ideas]
        await app.push_screen(chooser, chosen.append)
        await pilot.pause()
        await pilot.press("down", "space")  # untick idea 2
        await pilot.press("up", "e")  # change idea 1
        await pilot.pause()
        chooser.query_one("#explore-edit").text = "unroll by four, not two"
        await pilot.press("ctrl+s")
        await pilot.press("a", *("space" if c == " " else c for c in "one block per 64 KiB"), "enter")  # an idea of the person's own
        await pilot.press("plus", "plus", "minus")
        title = str(chooser.query_one("#explore-title").render())
        assert "3 of 4 idea(s) ticked" in title and "3 round(s) each" in title
        await pilot.press("r")
        await pilot.pause()
    [choice] = chosen
    assert choice is not None and choice.rounds == 3
    first, third, own = choice.choices
    assert first.suggested == ideas[0] and first.idea["text"] == "unroll by four, not two"
    assert third.suggested is None and third.idea == ideas[2]  # the Judge's idea as given
    assert own.suggested == {} and own.idea["text"] == "one block per 64 KiB"


@pytest.mark.asyncio
async def test_nothing_ticked_runs_nothing_and_escape_cancels(demo: SessionRepo) -> None:
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")
    chosen: list[ExploreChoice | None] = []
    async with app.run_test(size=(80, 24)) as pilot:
        chooser = _chooser(demo)
        await app.push_screen(chooser, chosen.append)
        await pilot.pause()
        for _ in range(3):
            await pilot.press("space", "down")
        await pilot.press("r")
        await pilot.pause()
        assert chosen == [] and app.screen is chooser  # said so, and still choosing
        await pilot.press("escape")
        await pilot.pause()
    assert chosen == [None]


def _explored(repo: SessionRepo) -> None:
    """Three branches from iteration 3 as an exploration leaves them mid-way: one still running after two
    rounds, one pruned by the beam after one, one whose round failed to compile (real commits)."""
    best = repo.iteration(3)
    ideas = [idea.to_dict() for idea in parse_ideas(REPLY, "optimize", 3)]
    plan = ExplorePlan(spec=ExploreSpec(start=3, source="main", width=3, rounds=2, beam=1), asked=True)
    rounds = {1: [1.31, 1.42], 2: [1.02], 3: [None]}
    for k, speedups in rounds.items():
        name = f"explore/3-{k}"
        repo.branch_from(3, name=name, branch="main")
        for speedup in speedups:
            result = {"status": "correct", "speedup": speedup} if speedup else {"status": "compile_error", "speedup": None}
            repo.record_iteration(kernel_source=best.kernel_source, eval_result=result, branch=name, cost_usd=0.0125)
        plan.branches.append(BranchState(name=name, idea=ideas[k - 1]))
    plan.branches[0].state, plan.branches[2].state = RUNNING, DONE
    plan.branches[1].state, plan.branches[1].why = PRUNED, "beam 1 after round 1: best 1.02x"
    save_plan(repo.path, plan)
    repo.switch_branch("main")


def test_the_timeline_notes_each_exploration_branch(demo: SessionRepo) -> None:
    _explored(demo)
    from tui.model import exploration_notes
    from tui.widgets.timeline import TimelineItem

    branches = {
        name: [TimelineItem(it.number, it.sha, it.phase, it.status, it.speedup, it.cost_usd) for it in demo.history(name)]
        for name in demo.branches()
    }
    notes = exploration_notes(demo.path, branches)
    assert notes == {
        "explore/3-1": "running · best 1.42x · $0.0250",
        "explore/3-2": "pruned · best 1.02x · $0.0125",
        "explore/3-3": "done · no correct kernel yet · $0.0125",
    }
    (demo.path / "cudaforge-explore-9.json").write_text("{not json")  # a plan being replaced
    assert exploration_notes(demo.path, branches) == notes


@pytest.mark.parametrize("size", SIZES)
def test_the_growing_tree_in_the_timeline(snap_compare: Any, demo: SessionRepo, size: tuple[int, int]) -> None:
    """The exploration's branches under iteration 3, each with its state, best and cost."""
    _explored(demo)
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")

    async def show_timeline(pilot: Any) -> None:
        screen = pilot.app.screen
        if screen.query("#narrow"):
            screen.query_one("#narrow").active = "pane-timeline"
        await pilot.pause()
        assert any("explore/3-1 · running · best 1.42x" in label for label in screen.query_one(Timeline).labels())

    assert snap_compare(app, run_before=show_timeline, terminal_size=size)
