"""One noise-aware rule names "best" everywhere (sessions/ranking.py, ARCHITECTURE.md §5 "Best").

Records are committed to a real session repo and read back through SessionRepo, as the TUI, the report,
export, the headless summary and bench read them.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from engine.bench.results import best_of_branches
from engine.eval.bootstrap import median_interval, ratio_interval
from engine.eval.result import TimingStats
from sessions import ranking
from sessions.repo import SessionRepo
from tests.loop_helpers import RELU_KERNEL, new_session


def _eval(ms: float, p25: float, p75: float, gpu: str = "NVIDIA H200", ref_ms: float = 0.2,
          interval: tuple[float, float] | None = None) -> dict[str, Any]:  # fmt: skip
    stats = {"n": 100, "median_ms": ms, "p25_ms": p25, "p75_ms": p75, "iqr_ms": p75 - p25,
             "min_ms": p25, "max_ms": p75, "mean_ms": ms, "std_ms": 0.0}  # fmt: skip
    reference = {**stats, "median_ms": ref_ms, "p25_ms": ref_ms, "p75_ms": ref_ms}
    timing: dict[str, Any] = {"method": "cuda-events", "candidate": stats, "reference": reference}
    if interval is not None:
        timing["speedup_interval"] = list(interval)
    return {
        "status": "correct",
        "speedup": ref_ms / ms,
        "timing": timing,
        "env": {"device": "cuda", "gpu": gpu},
    }


def _record(session: SessionRepo, k: int, result: dict[str, Any], branch: str | None = None) -> None:
    session.record_iteration(kernel_source=RELU_KERNEL.read_text() + f"\n# {k}\n", eval_result=result,
                             phase="seed" if k == 0 else "optimize", branch=branch)  # fmt: skip


def test_equal_kernels_and_a_slower_one_never_move_best_and_a_clear_win_does(tmp_path: Path) -> None:
    """Iteration 1 is the same kernel measured 8% faster within its spread; iteration 2 is 20% slower;
    neither is named best. Iteration 3 is faster beyond both spreads and takes the lead."""
    session = new_session(tmp_path)
    _record(session, 0, _eval(0.100, 0.095, 0.105))
    _record(session, 1, _eval(0.092, 0.087, 0.098))  # overlaps 0's range: a tie, the earlier stays
    _record(session, 2, _eval(0.120, 0.115, 0.125))
    assert session.best().number == 0
    assert session.session_best()[0].number == 0 and best_of_branches(session)[0].number == 0
    _record(session, 3, _eval(0.070, 0.068, 0.072))
    assert session.best().number == 3 and best_of_branches(session) == (session.best(), "main")
    session.close()


def test_a_faster_point_estimate_inside_the_spread_is_a_tie_by_speedup_too(tmp_path: Path) -> None:
    """Kernels timed on different GPUs rank by speedup; its bootstrap interval is the spread."""
    session = new_session(tmp_path)
    _record(session, 0, _eval(0.100, 0.095, 0.105, interval=(1.90, 2.10)))
    _record(session, 1, _eval(0.090, 0.085, 0.095, gpu="NVIDIA A100", interval=(2.05, 2.40)))  # overlaps
    assert session.best().number == 0
    _record(session, 2, _eval(0.080, 0.078, 0.082, gpu="NVIDIA A100", interval=(2.20, 2.80)))  # above 2.10
    assert session.best().number == 2
    session.close()


def test_the_session_best_spans_branches_and_the_branch_best_stays_per_branch(tmp_path: Path) -> None:
    session = new_session(tmp_path)
    _record(session, 0, _eval(0.100, 0.095, 0.105))
    side = session.branch_from(0, "side")
    _record(session, 1, _eval(0.060, 0.058, 0.062), branch=side)
    _record(session, 1, _eval(0.098, 0.093, 0.103), branch="main")
    assert session.best("main").number == 0 and session.best(side).number == 1
    best, branch = session.session_best()
    assert (best.number, branch) == (1, side)
    session.close()


def _m(
    number: int, ms: float, spread: float, sha: str = "", duel: ranking.Duel | None = None
) -> ranking.Measured:
    return ranking.Measured(
        "main", number, 0.2 / ms, ms, "NVIDIA H200", ms - spread, ms + spread, sha=sha, duel=duel
    )


def test_a_duel_against_the_incumbent_decides_and_only_against_that_kernel() -> None:
    incumbent, other = _m(0, 0.100, 0.004, sha="a" * 40), _m(5, 0.100, 0.004, sha="b" * 40)
    won = ranking.Duel("a" * 40, 0, 1.04, 1.02, 1.06)
    challenger = _m(1, 0.097, 0.004, sha="c" * 40, duel=won)  # within the spread, but it won the duel
    assert ranking.leader([incumbent, challenger]) is challenger
    assert ranking.leader([other, challenger]) is other  # its duel was against another kernel
    tied = ranking.Duel("a" * 40, 0, 1.01, 0.99, 1.03)
    lost = _m(1, 0.080, 0.002, sha="c" * 40, duel=tied)  # beyond the spread, yet re-timed beside it: a tie
    assert ranking.leader([incumbent, lost]) is incumbent
    assert (won.verdict, tied.verdict, ranking.Duel("a", 0, 0.9, 0.85, 0.95).verdict) == (
        "faster",
        "tie",
        "slower",
    )


def test_spread_edges_and_close_calls() -> None:
    incumbent = _m(0, 0.100, 0.004)
    touching = _m(1, 0.092, 0.004)  # its high end is exactly the incumbent's low end: not beyond
    assert not ranking.beats(touching, incumbent, ranking.KERNEL_TIME)
    assert ranking.beats(_m(1, 0.0919, 0.004), incumbent, ranking.KERNEL_TIME)
    assert not ranking.beats(incumbent, _m(1, 0.0919, 0.004), ranking.KERNEL_TIME)  # slower never beats
    near, far = _m(1, 0.0960, 0.0), _m(1, 0.094, 0.0)
    assert ranking.close_call(near, incumbent) and not ranking.close_call(far, incumbent)
    assert ranking.interval_label(1.42, 1.40, 1.45) == "1.42× ±0.03"
    assert ranking.interval_label(1.42, None, None) == "1.42×" and ranking.interval_label(None, 1, 2) == "—"


def test_bootstrap_intervals_hold_the_estimate_widen_with_noise_and_repeat() -> None:
    rng = random.Random(7)
    quiet = [1.0 + rng.gauss(0, 0.01) for _ in range(100)]
    noisy = [1.0 + rng.gauss(0, 0.10) for _ in range(100)]
    reference = [2.0 + rng.gauss(0, 0.02) for _ in range(100)]
    q_low, q_high = median_interval(quiet)
    n_low, n_high = median_interval(noisy)
    stats = TimingStats.from_samples(quiet)
    assert q_low <= stats.median_ms <= q_high and stats.median_interval_ms == [q_low, q_high]
    assert n_high - n_low > 3 * (q_high - q_low)
    low, high = ratio_interval(reference, quiet)
    point = TimingStats.from_samples(reference).median_ms / stats.median_ms
    assert low <= point <= high and high - low < 0.1
    assert ratio_interval(reference, quiet) == (low, high)  # seeded by the samples: a re-read never moves
