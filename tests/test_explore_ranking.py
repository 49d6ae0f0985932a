"""An exploration ranks its kernels by their own time when all ran on one kind of device (engine/explore/ranking.py).

The figures are those the H200 measured for KernelBench level 1 problem 88 (benchmarks/RESULTS.md): the
deepseek kernel at 0.0225 ms scored 5.10x because its worker timed the reference at 0.115 ms; the
o1-preview kernel at 0.0164 ms scored 4.39x against a reference timed at 0.072 ms. The faster kernel
must win; on mixed GPUs (own times not comparable) the speedup decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.bench.results import best_of_branches
from engine.explore import ranking
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
