"""A close call is re-timed back to back before best can move (engine/loop/duel.py, ARCHITECTURE.md §5).

Real evaluations on CPU (real C++ extensions from the shared build cache), a real loop and session repo.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from engine.events import IterationCommitted, LoopNotice
from engine.loop import duel
from engine.loop.machine import FINISHED
from sessions import ranking
from tests.loop_helpers import EXAMPLES, RELU_KERNEL, RELU_TASK, fast_eval, make_loop, new_session

TWIN = RELU_KERNEL.read_text().replace("import torch\n", "import torch\nTWIN = True\n", 1)


def test_the_best_kernel_takes_the_references_seat_and_the_ratio_carries_its_interval(
    ext_cache: Path,
) -> None:
    task = duel.best_as_reference(RELU_TASK.read_text(), RELU_KERNEL.read_text())
    assert "class Model" in task and task.rstrip().endswith("Model = _cudaforge_best.ModelNew")
    options = fast_eval(ext_cache)
    # the best kernel's own evaluation, as the loop has it on record: its library is then loaded, not rebuilt
    best = evaluate(RELU_TASK.read_text(), RELU_KERNEL.read_text(), options, task_name="relu").to_dict()
    result = duel.retime(evaluate, RELU_TASK.read_text(), TWIN, RELU_KERNEL.read_text(), options, "relu", best)
    assert result.ok, result.messages
    assert [e.cached for e in result.build.reference_extensions] == [True]
    low, high = result.timing.speedup_interval
    assert low <= result.speedup <= high
    record = duel.duel_record(result, "a" * 40, 0)
    assert record == {"against_sha": "a" * 40, "against": 0, "ratio": round(result.speedup, 6),
                      "low": round(low, 6), "high": round(high, 6)}  # fmt: skip
    assert duel.retiming_options(options).guards is False and duel.retiming_options(options).trials == 1
    broken = duel.retime(
        evaluate, RELU_TASK.read_text(), "this is not python(", RELU_KERNEL.read_text(), options, "relu", best
    )
    assert not broken.ok and duel.duel_record(broken, "a" * 40, 0) is None  # no ratio, no verdict


def test_a_close_call_is_retimed_and_best_follows_the_duels_verdict(tmp_path: Path, ext_cache: Path) -> None:
    events: list = []
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=1, events=events)
    loop.options.retime_within = 100.0  # every correct kernel is a close call here
    assert loop.run() == FINISHED
    seed, first = session.history()
    duel_found = first.eval_result["ranking"]["duel"]
    assert duel_found["against_sha"] == seed.sha and duel_found["against"] == 0
    assert "ranking" not in seed.eval_result  # the seed had nothing to be compared with
    verdict = ranking.Duel(**duel_found).verdict
    assert seed.eval_result["build"]["extensions"][0]["digest"]  # sealed, so the re-timing loaded it
    assert session.best().number == (1 if verdict == "faster" else 0)
    said = [e.message for e in events if isinstance(e, LoopNotice)]
    asked = next(i for i, m in enumerate(said) if "timing the two again, back to back" in m)
    assert "re-timed beside iteration 0" in said[asked + 1] and verdict in said[asked + 1]
    committed = [e for e in events if isinstance(e, IterationCommitted)]
    assert events.index(committed[-1]) > max(i for i, e in enumerate(events) if isinstance(e, LoopNotice))
    session.close()


def test_a_kernel_far_from_the_best_is_not_retimed(tmp_path: Path, ext_cache: Path) -> None:
    events: list = []
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=1, events=events)
    loop.options.retime_within = 0.0  # off
    assert loop.run() == FINISHED
    assert "ranking" not in session.history()[1].eval_result
    assert not any(isinstance(e, LoopNotice) and "back to back" in e.message for e in events)
    session.close()


@pytest.mark.gpu
def test_on_the_gpu_a_cuda_kernel_retimed_against_its_twin_gets_an_interval_around_its_ratio(
    ext_cache: Path,
) -> None:
    """The duel's own path on CUDA: the best kernel in the reference's seat, timed in interleaved blocks."""
    kernel = EXAMPLES / "kernels" / "relu_cuda.py"
    twin = kernel.read_text().replace("import torch\n", "import torch\nTWIN = True\n", 1)
    task = (EXAMPLES / "tasks" / "relu_large.py").read_text()
    options = EvalOptions(device="cuda", cache_root=ext_cache, timing=TimingPlan(min_trials=30))
    best = evaluate(task, kernel.read_text(), options, task_name="relu_large")
    assert best.status == "correct", best.messages
    result = duel.retime(evaluate, task, twin, kernel.read_text(), options, "relu_large", best.to_dict())
    assert result.ok, result.messages
    # the best kernel's library, as its evaluation sealed it, loaded from the cache in the reference's seat
    assert [e.build_dir for e in result.build.reference_extensions] == [e.build_dir for e in best.build.extensions]
    low, high = result.timing.speedup_interval
    assert low <= result.speedup <= high
    assert 0.5 < result.speedup < 2.0  # one kernel against itself: no seat is worth a factor of two
