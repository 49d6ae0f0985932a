"""The evalset's planning from what ``OUT`` holds, in-process and without running an evaluation.

Stored documents decide what runs: a current final result is kept, a current correct check goes
to timing (or, with timing off, becomes the verdict), and anything from other file contents or
another device is judged again.
"""

from __future__ import annotations

import io
from pathlib import Path

from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.evalset import store
from engine.evalset.pairs import discover
from engine.evalset.scheduler import Evalset, EvalsetOptions

PAIRS = Path(__file__).resolve().parent / "fixtures" / "evalset" / "pairs"


def evalset(out: Path, **eval_overrides) -> Evalset:
    pairs = discover([PAIRS / "ok"]).pairs
    options = EvalsetOptions(
        out=out,
        eval_options=EvalOptions(device="cpu", **eval_overrides),
        progress="lines",
        stream=io.StringIO(),
    )
    return Evalset(pairs, options)


def test_stored_documents_decide_what_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner = evalset(out)
    (state,) = runner.states()
    assert state.final is None and state.check is None
    store.write(store.check_path(out, "ok"), EvalResult(status="correct", device="cpu"), state.ident)
    (state,) = runner.states()
    assert state.check is not None and state.final is None  # checked, not timed: phase 2 only
    store.write(store.result_path(out, "ok"), EvalResult(status="correct", device="cpu"), state.ident)
    (state,) = runner.states()
    assert state.final is not None
    stats = runner.run()  # nothing left to do: no evaluation runs
    assert stats.already_done == 1 and stats.phase1_evaluations == stats.phase2_evaluations == 0
    other_device = {**state.ident}
    store.write(store.result_path(out, "ok"), EvalResult(status="correct", device="cuda"), other_device)
    assert runner.states()[0].final is None  # judged on another device: redone here
    edited = {**state.ident, "kernel_sha256": "0" * 64}
    store.write(store.result_path(out, "ok"), EvalResult(status="correct", device="cpu"), edited)
    assert runner.states()[0].final is None  # another version of the kernel
    redo = evalset(out)
    redo.options.redo = True
    store.write(store.result_path(out, "ok"), EvalResult(status="correct", device="cpu"), state.ident)
    assert redo.states()[0].final is None and redo.states()[0].check is None


def test_without_timing_a_stored_correct_check_becomes_the_verdict(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner = evalset(out, do_timing=False)
    (state,) = runner.states()
    store.write(
        store.check_path(out, "ok"),
        EvalResult(status="correct", device="cpu"),
        {**state.ident, "phase1_seconds": 3.0},
    )
    stats = runner.run()
    assert stats.already_done == 1 and stats.phase1_evaluations == 0 and stats.phase2_evaluations == 0
    final = store.read(store.result_path(out, "ok"))
    assert final is not None and final["status"] == "correct" and final["evalset"]["phase1_seconds"] == 3.0
