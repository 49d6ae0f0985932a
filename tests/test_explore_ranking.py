"""An exploration ranks its kernels by their own time when all ran on one kind of device (sessions/ranking.py).

The figures are those the H200 measured for KernelBench level 1 problem 88 (benchmarks/RESULTS.md): the
deepseek kernel at 0.0225 ms scored 5.10x because its worker timed the reference at 0.115 ms; the
o1-preview kernel at 0.0164 ms scored 4.39x against a reference timed at 0.072 ms. The faster kernel
must win; on mixed GPUs (own times not comparable) the speedup decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.bench.results import best_of_branches
from sessions import ranking
from sessions.repo import SessionRepo
from tests.loop_helpers import RELU_KERNEL, new_session


def _eval(speedup: float, kernel_ms: float | None, gpu: str) -> dict[str, Any]:
    timing = None
    if kernel_ms is not None:
        stats = {"n": 100, "median_ms": kernel_ms, "p25_ms": kernel_ms, "p75_ms": kernel_ms, "iqr_ms": 0.0,
                 "min_ms": kernel_ms, "max_ms": kernel_ms, "mean_ms": kernel_ms, "std_ms": 0.0}  # fmt: skip
        reference = {**stats, "median_ms": kernel_ms * speedup}
        timing = {"method": "cuda-events", "candidate": stats, "reference": reference}
    return {"status": "correct", "speedup": speedup, "timing": timing, "env": {"device": "cuda", "gpu": gpu}}


def _two_branches(tmp_path: Path, fast_gpu: str = "NVIDIA H200", fast_ms: float | None = 0.0164) -> SessionRepo:
    session = new_session(tmp_path)
    kernel = RELU_KERNEL.read_text()
    session.record_iteration(kernel_source=kernel, eval_result=_eval(4.97, 0.0224, "NVIDIA H200"), phase="seed")
    for k, (speedup, ms, gpu) in enumerate([(5.10, 0.0225, "NVIDIA H200"), (4.39, fast_ms, fast_gpu)], 1):
        name = session.branch_from(0, f"explore/0-{k}")
        session.record_iteration(kernel_source=kernel + f"\n# {k}\n", eval_result=_eval(speedup, ms, gpu),
                                 branch=name)  # fmt: skip
    return session


def _bests(session: SessionRepo) -> tuple[str, list[ranking.Measured]]:
    found = [ranking.measured(b, it) for b in ("explore/0-1", "explore/0-2") for it in session.history(b)[1:]]
    how = ranking.ranked_by(found)
    return how, sorted(found, key=ranking.sort_key(how))


def test_the_faster_kernel_wins_over_the_higher_speedup_on_one_kind_of_gpu(tmp_path: Path) -> None:
    session = _two_branches(tmp_path)
    how, order = _bests(session)
    assert how == ranking.KERNEL_TIME
    assert [m.branch for m in order] == ["explore/0-2", "explore/0-1"]
    best, branch = best_of_branches(session)  # bench --explore's best, over every branch and the seed
    assert (branch, best.number, best.speedup) == ("explore/0-2", 1, 4.39)
    session.close()


def test_kernels_timed_on_different_gpus_are_ranked_by_speedup(tmp_path: Path) -> None:
    session = _two_branches(tmp_path, fast_gpu="NVIDIA A100")
    how, order = _bests(session)
    assert how == ranking.SPEEDUP
    assert [m.branch for m in order] == ["explore/0-1", "explore/0-2"]
    assert best_of_branches(session)[1] == "explore/0-1"
    session.close()


def test_a_kernel_without_a_time_makes_the_speedup_decide(tmp_path: Path) -> None:
    session = _two_branches(tmp_path, fast_ms=None)
    how, order = _bests(session)
    assert how == ranking.SPEEDUP and order[0].branch == "explore/0-1"
    session.close()


def test_branches_the_timing_cannot_tell_from_the_best_are_named_beside_it(tmp_path: Path) -> None:
    """The H200's figures for level 2 problem 16 (benchmarks/RESULTS.md): three kernels whose time was
    mostly one cuDNN convolution; their interquartile ranges overlap, and alone they came out in
    another order. The summary names them beside the best instead of implying the best is surely faster."""
    from engine.cli.explore import format_summary
    from engine.explore.plan import ExploreSpec
    from engine.explore.runner import BranchSummary, ExploreSummary

    def measured(branch: str, median: float, p25: float, p75: float, how_fast: float = 1.2) -> ranking.Measured:
        return ranking.Measured(branch, 1, how_fast, median, "NVIDIA H200", p25, p75)

    best = measured("explore/0-3", 0.1350, 0.1342, 0.1362)
    others = [
        measured("explore/0-1", 0.2239, 0.2141, 0.2365),  # apart: its range starts above the best's end
        measured("explore/0-2", 0.1423, 0.1292, 0.1578),
        measured("explore/0-4", 0.1451, 0.1331, 0.1636),
        measured("explore/0-5", 0.1370, 0.1363, 0.1380),  # starts just past the best's range: apart
    ]
    tied = ranking.within_spread(best, [best, *others], ranking.KERNEL_TIME)
    assert [m.branch for m in tied] == ["explore/0-2", "explore/0-4"]
    assert ranking.within_spread(best, others, ranking.SPEEDUP) == []  # a speedup has no spread to compare
    no_range = ranking.Measured("explore/0-6", 1, 1.0, 0.1351, "NVIDIA H200")  # an older record: no quartiles
    assert ranking.within_spread(best, [no_range], ranking.KERNEL_TIME) == []

    summary = ExploreSummary(ExploreSpec(start=0, source="main", width=2, rounds=1), ranked_by=ranking.KERNEL_TIME)
    summary.branches = [
        BranchSummary("explore/0-3", "fuse", "done", "", 1, 1.23, 1, 10, 0.0, best_ms=0.1350),
        BranchSummary("explore/0-2", "tile", "done", "", 1, 1.31, 1, 10, 0.0, best_ms=0.1423),
    ]
    summary.best_branch, summary.within_spread = "explore/0-3", ["explore/0-2"]
    text = format_summary(summary, "s")
    assert "best: explore/0-3 iteration 1" in text
    assert "within its timing spread: explore/0-2 (0.1423 ms)" in text
    assert summary.to_dict()["best"]["within_spread"] == ["explore/0-2"]
    summary.within_spread = []
    assert "within its timing spread" not in format_summary(summary, "s")


def test_the_explorations_summary_names_the_branches_within_the_bests_spread(tmp_path: Path) -> None:
    """The same figures committed as three branches' records: the summary (headless, JSON) reads them."""
    from engine.explore.plan import DONE, BranchState, ExplorePlan, ExploreSpec, save_plan
    from engine.explore.runner import Explorer

    session = new_session(tmp_path)
    kernel = RELU_KERNEL.read_text()
    session.record_iteration(kernel_source=kernel, eval_result=_eval(1.0, 0.2, "NVIDIA H200"), phase="seed")
    spec = ExploreSpec(start=0, source="main", width=3, rounds=1)
    branches = []
    for k, (ms, p25, p75) in enumerate([(0.2239, 0.2141, 0.2365), (0.1423, 0.1292, 0.1578), (0.1350, 0.1342, 0.1362)], 1):
        name = session.branch_from(0, f"explore/0-{k}")
        result = _eval(1.2, ms, "NVIDIA H200")
        result["timing"]["candidate"].update(p25_ms=p25, p75_ms=p75, iqr_ms=p75 - p25)
        session.record_iteration(kernel_source=kernel + f"\n# {k}\n", eval_result=result, branch=name)
        branches.append(BranchState(name, {"mode": "optimize", "optimization_method": f"idea {k}"}, state=DONE))
    save_plan(session.path, ExplorePlan(spec=spec, branches=branches, asked=True))
    explorer = Explorer(session, spec, make_loop=lambda *args: None)
    try:
        summary = explorer.summary()
    finally:
        session.release_lock()
    assert summary.ranked_by == ranking.KERNEL_TIME and summary.best_branch == "explore/0-3"
    assert summary.within_spread == ["explore/0-2"]  # 0-1's range lies wholly above the best's
    assert summary.to_dict()["best"]["within_spread"] == ["explore/0-2"]
    session.close()


def test_ranges_that_touch_overlap_and_a_range_wholly_below_the_best_is_apart() -> None:
    def timed(branch: str, p25: float, p75: float) -> ranking.Measured:
        return ranking.Measured(branch, 1, 1.0, (p25 + p75) / 2, "NVIDIA H200", p25, p75)

    best = timed("explore/0-1", 0.134, 0.136)
    touching, below = timed("explore/0-2", 0.136, 0.138), timed("explore/0-3", 0.130, 0.132)
    assert ranking.within_spread(best, [touching, below], ranking.KERNEL_TIME) == [touching]


def test_ties_go_to_the_earlier_iteration_and_a_missing_speedup_ranks_last() -> None:
    later = ranking.Measured("explore/0-1", 2, 2.0, 0.1, "NVIDIA H200")
    earlier = ranking.Measured("explore/0-2", 1, 2.0, 0.1, "NVIDIA H200")
    for how in (ranking.KERNEL_TIME, ranking.SPEEDUP):
        assert sorted([later, earlier], key=ranking.sort_key(how)) == [earlier, later], how
    unknown = ranking.Measured("explore/0-0", 1, None, None, "NVIDIA H200")  # a record without a speedup
    assert sorted([unknown, later], key=ranking.sort_key(ranking.SPEEDUP)) == [later, unknown]


def test_kernels_whose_records_name_no_device_are_ranked_by_speedup(tmp_path: Path) -> None:
    """Records with times but no ``env`` (older ones, or a crashed environment probe): the times may
    come from different GPUs, so the speedup ranks."""
    session = new_session(tmp_path)
    kernel = RELU_KERNEL.read_text()
    session.record_iteration(kernel_source=kernel, eval_result=_eval(1.0, 0.03, "NVIDIA H200"), phase="seed")
    for k, (speedup, ms) in enumerate([(5.10, 0.0225), (4.39, 0.0164)], 1):
        name = session.branch_from(0, f"explore/0-{k}")
        result = {key: value for key, value in _eval(speedup, ms, "").items() if key != "env"}
        session.record_iteration(kernel_source=kernel + f"\n# {k}\n", eval_result=result, branch=name)
    how, order = _bests(session)
    assert {m.device for m in order} == {None} and all(m.kernel_ms is not None for m in order)
    assert how == ranking.SPEEDUP and order[0].branch == "explore/0-1"
    session.close()
