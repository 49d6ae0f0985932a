"""Explore in the workbench (issue 28): the chooser of the Judge's ideas (tui/screens/explore.py), the
exploration's tree in the timeline (``tui.model.exploration_notes``), and ``d`` across its branches
(tui/screens/dialogs.py's DiffScreen, ``tui.model.exploration_diff_base``), on the demo session's real
H200 iterations, with snapshots at 80×24 and 120×40."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.agents.parse import parse_ideas
from engine.explore.plan import DONE, PRUNED, RUNNING, BranchState, ExplorePlan, ExploreSpec, save_plan
from engine.profile.diff import diff_lines, iteration_diff
from sessions.repo import SessionRepo
from tests.test_tui_fixtures import screen_text
from tests.test_tui_snapshots import SIZES
from tui.app import CudaforgeApp
from tui.demo import unpack
from tui.evidence import gather_evidence
from tui.model import exploration_diff_base, unified_diff
from tui.screens.dialogs import DiffScreen
from tui.screens.explore import ExploreChoice, ExploreChooser
from tui.screens.workbench import WorkbenchScreen
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.timeline import Timeline, TimelineItem

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
    evidence = [
        gather_evidence(i, best.number, best.eval_result, best.profile, best.kernel_source) for i in ideas
    ]
    return ExploreChooser(ideas, best.number, "main", rounds=2, evidence=evidence)


@pytest.mark.parametrize("size", SIZES)
def test_the_chooser_shows_the_ideas_beside_their_evidence(
    snap_compare: Any, demo: SessionRepo, size: tuple[int, int]
) -> None:
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
        own = "one block per 64 KiB"  # an idea of the person's own
        await pilot.press("a", *("space" if c == " " else c for c in own), "enter")
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


TAIL = "relu_tail(in, out, n);"  # explore/3-3's round: a launcher that does not exist (it fails to compile)
# What each branch's rounds change in iteration 3's kernel, as its idea says (the diff tests read them).
CHANGES = {
    1: [
        [("(long)sms * 16", "(long)sms * 8")],
        [("(long)sms * 16", "(long)sms * 8"), ("    for (long i", "    #pragma unroll 2\n    for (long i")],
    ],
    2: [[("const int threads = 256;", "const int threads = 512;")]],
    3: [[("if (n > n4 * 4) relu_tail_kernel<<<1, 4, 0, stream>>>(in, out, n4 * 4, n);", TAIL)]],
}


def _explored(repo: SessionRepo) -> None:
    """Three branches from iteration 3 as an exploration leaves them mid-way: one still running after two
    rounds, one pruned by the beam after one, one whose round failed to compile (real commits), each
    round's kernel iteration 3's with the changes its idea makes (``CHANGES``)."""
    best = repo.iteration(3)
    ideas = [idea.to_dict() for idea in parse_ideas(REPLY, "optimize", 3)]
    plan = ExplorePlan(spec=ExploreSpec(start=3, source="main", width=3, rounds=2, beam=1), asked=True)
    rounds = {1: [1.31, 1.42], 2: [1.02], 3: [None]}
    for k, speedups in rounds.items():
        name = f"explore/3-{k}"
        repo.branch_from(3, name=name, branch="main")
        for speedup, changes in zip(speedups, CHANGES[k], strict=True):
            result = (
                {"status": "correct", "speedup": speedup}
                if speedup
                else {"status": "compile_error", "speedup": None}
            )
            source = best.kernel_source
            for before, after in changes:
                assert before in source
                source = source.replace(before, after)
            repo.record_iteration(kernel_source=source, eval_result=result, branch=name, cost_usd=0.0125)
        plan.branches.append(BranchState(name=name, idea=ideas[k - 1]))
    plan.branches[0].state, plan.branches[2].state = RUNNING, DONE
    plan.branches[1].state, plan.branches[1].why = PRUNED, "beam 1 after round 1: best 1.02x"
    save_plan(repo.path, plan)
    repo.switch_branch("main")


def _items(repo: SessionRepo) -> dict[str, list[TimelineItem]]:
    return {
        name: [
            TimelineItem(it.number, it.sha, it.phase, it.status, it.speedup, it.cost_usd)
            for it in repo.history(name)
        ]
        for name in repo.branches()
    }


def test_the_timeline_notes_each_exploration_branch(demo: SessionRepo) -> None:
    _explored(demo)
    from tui.model import exploration_notes

    branches = _items(demo)
    notes = exploration_notes(demo.path, branches)
    assert notes == {
        "explore/3-1": "running · best 1.42x · $0.0250",
        "explore/3-2": "pruned · best 1.02x · $0.0125",
        "explore/3-3": "done · no correct kernel yet · $0.0125",
    }
    (demo.path / "cudaforge-explore-9.json").write_text("{not json")  # a plan being replaced
    assert exploration_notes(demo.path, branches) == notes


@pytest.mark.parametrize("size", SIZES)
def test_the_growing_tree_in_the_timeline(
    snap_compare: Any, demo: SessionRepo, size: tuple[int, int]
) -> None:
    """The exploration's branches under iteration 3, each with its state, best and cost."""
    _explored(demo)
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")

    async def show_timeline(pilot: Any) -> None:
        screen = pilot.app.screen
        if screen.query("#narrow"):
            screen.query_one("#narrow").active = "pane-timeline"
        await pilot.pause()
        assert any(
            "explore/3-1 · running · best 1.42x" in label for label in screen.query_one(Timeline).labels()
        )

    assert snap_compare(app, run_before=show_timeline, terminal_size=size)


async def _select(pilot: Any, branch: str, number: int) -> None:
    """Pick ``branch``'s iteration ``number`` in the timeline, as enter on its node does."""
    await pilot.press("t")
    tree = pilot.app.screen.query_one(Timeline)

    def walk(node: Any) -> Iterator[Any]:
        for child in node.children:
            yield child
            yield from walk(child)

    nodes = [n for n in walk(tree.root) if n.data is not None]
    tree.select_node(next(n for n in nodes if (n.data.branch, n.data.number) == (branch, number)))
    await pilot.pause()


def test_the_diff_starts_from_the_best_of_the_other_branches_else_the_start(demo: SessionRepo) -> None:
    _explored(demo)
    items = _items(demo)
    alone = {name: its for name, its in items.items() if name in ("main", "explore/3-3")}

    def base(
        branch: str, number: int, branches: dict[str, list[TimelineItem]] = items
    ) -> tuple[str, int] | None:
        return exploration_diff_base(demo.path, branch, number, branches)

    assert base("explore/3-1", 5) == ("explore/3-2", 4)
    assert base("explore/3-3", 4) == ("explore/3-1", 5)  # the best of the other branches
    assert base("explore/3-3", 4, alone) == ("main", 3)  # none of the others has a correct kernel: N
    assert base("explore/3-1", 3) is None  # N itself: as on any branch
    assert base("main", 3) is None


@pytest.mark.asyncio
async def test_d_diffs_two_exploration_branches_and_the_old_side_changes_branch(demo: SessionRepo) -> None:
    """A node of explore/3-1 shows like any iteration; ``d`` compares it with the best of the other branches,
    ``{``/``}`` move the old side to another branch's best (its last when none is correct), ``m`` works across."""
    _explored(demo)
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")
    ours = demo.iteration(5, "explore/3-1")
    async with app.run_test(size=(120, 40)) as pilot:
        await _select(pilot, "explore/3-1", 5)
        workbench = app.screen
        assert isinstance(workbench, WorkbenchScreen)
        assert (workbench.branch, workbench.shown.number) == ("explore/3-1", 5)
        pane = workbench.query_one(KernelPane)
        assert pane.label == "iter 5 (explore/3-1)" and pane.source == ours.kernel_source
        assert "replay 6/6 · explore/3-1" in screen_text(app) and "best 1.42x" in screen_text(app)

        await pilot.press("d")
        await pilot.pause()
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert (diff.old_branch, diff.old, diff.new_branch, diff.new) == ("explore/3-2", 4, "explore/3-1", 5)
        text = diff.diff_text()
        assert text.startswith("--- explore/3-2 iter 4\n+++ explore/3-1 iter 5\n")
        assert "-    const int threads = 512;" in text and "+    const int threads = 256;" in text
        assert "+    #pragma unroll 2" in text and "+        if (blocks > (long)sms * 8)" in text
        shown = screen_text(app)
        assert "diff explore/3-2 iter 4 → explore/3-1 iter 5" in shown
        assert "{ } old branch  < > new branch" in shown

        await pilot.press("left_curly_bracket", "left_curly_bracket")  # explore/3-1, then main: its best, #3
        assert (diff.old_branch, diff.old) == ("main", 3)
        start = demo.iteration(3, "main")
        expected = unified_diff(start.kernel_source, ours.kernel_source, "main iter 3", "explore/3-1 iter 5")
        assert diff.diff_text() == expected
        assert "threads = 512" not in diff.diff_text()
        await pilot.press("m")
        await pilot.pause()
        moved = iteration_diff(start.eval_result, start.profile, ours.eval_result, ours.profile)
        assert diff.moved_text() == "\n".join(diff_lines(moved, "main iter 3", "explore/3-1 iter 5"))
        shown = screen_text(app)
        assert "moved main iter 3 → explore/3-1 iter 5" in shown and "speedup: 0.95x → 1.42x" in shown
        await pilot.press("m")

        await pilot.press(*["right_curly_bracket"] * 3)  # explore/3-1, explore/3-2, explore/3-3
        assert (diff.old_branch, diff.old) == ("explore/3-3", 4)  # no correct kernel: its last iteration
        assert "-    relu_tail(in, out, n);" in diff.diff_text()
        await pilot.press("comma", "greater_than_sign")  # the new side back one, then to explore/3-2's best
        assert (diff.new_branch, diff.new) == ("explore/3-2", 4)
        assert "+    const int threads = 512;" in diff.diff_text()
        await pilot.press("left_square_bracket")  # along the old side's branch, into what it shares
        assert (diff.old_branch, diff.old) == ("explore/3-3", 3)
        assert "diff explore/3-3 iter 3 → explore/3-2 iter 4" in screen_text(app)
        await pilot.press("escape")
        assert app.screen is workbench


@pytest.mark.asyncio
async def test_d_off_an_exploration_diffs_with_the_previous_iteration_and_one_branch_has_no_branch_keys(
    demo: SessionRepo,
) -> None:
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n", "n", "n", "d")
        await pilot.pause()
        diff = app.screen
        assert isinstance(diff, DiffScreen) and (diff.old_branch, diff.old, diff.new) == ("main", 2, 3)
        assert "diff iter 2 → iter 3   [ ] old   , . new   m what moved   esc close" in screen_text(app)
        ids = {row[2] for row in app.binding_rows(diff)}
        assert "diff.old-next" in ids and not {"diff.old-branch-prev", "diff.new-branch-next"} & ids
        await pilot.press("left_curly_bracket")
        assert (diff.old_branch, diff.old) == ("main", 2)
    _explored(demo)
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n", "n", "n", "d")  # main's iteration 3, where the exploration starts: as before
        await pilot.pause()
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert (diff.old_branch, diff.old, diff.new_branch, diff.new) == ("main", 2, "main", 3)
        assert "diff iter 2 → iter 3 on main" in screen_text(app)
        rows = {row[2]: row for row in app.binding_rows(diff)}
        assert rows["diff.old-branch-prev"][:2] == ("left_curly_bracket", "Old branch −1")
        assert {"diff.old-branch-next", "diff.new-branch-prev", "diff.new-branch-next"} <= set(rows)


@pytest.mark.parametrize("size", SIZES)
def test_the_diff_across_two_exploration_branches(
    snap_compare: Any, demo: SessionRepo, size: tuple[int, int]
) -> None:
    """``d`` on explore/3-1's best: explore/3-2's kernel against it, both branches named, the branch keys shown."""
    _explored(demo)
    app = CudaforgeApp(sessions_root=Path("sessions"), session=demo, mode="replay")

    async def open_diff(pilot: Any) -> None:
        await _select(pilot, "explore/3-1", 5)
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(pilot.app.screen, DiffScreen)

    assert snap_compare(app, run_before=open_diff, terminal_size=size)
