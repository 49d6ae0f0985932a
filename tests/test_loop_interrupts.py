"""The loop under concurrent callers, stops and broken journals: a real loop, real CPU evaluations.

A stage is held at a named boundary by ``engine.loop.holds`` (the environment a test sets), so a
second caller or a stop lands exactly while it runs. Nothing is mocked: scripted agents, the
evaluator's worker, the session repository.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engine.eval.result import EvalResult
from engine.events import IterationCommitted, LoopNotice
from engine.loop.machine import FINISHED, PAUSED, LoopStateError
from engine.loop.state import BAD_JOURNAL_NAME, COMMIT, journal_path
from sessions.repo import SessionRepo
from tests.conftest import until
from tests.interrupt_harness import wait_for_hold
from tests.loop_helpers import make_loop, new_session

pytestmark = pytest.mark.slow

STEADY_HISTORY = [(0, "seed", "correct"), (1, "optimize", "correct")]


@pytest.fixture
def hold_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``hold_at("build@0")``: the loop of this test waits at that boundary; returns the hold file."""

    def arm(*boundaries: str) -> Path:
        path = tmp_path / f"hold-{'-'.join(boundaries)}"
        monkeypatch.setenv("CUDAFORGE_TEST_HOLD", ",".join(boundaries))
        monkeypatch.setenv("CUDAFORGE_TEST_HOLD_FILE", str(path))
        return path

    return arm


def in_thread(function) -> tuple[threading.Thread, list]:
    out: list = []

    def work() -> None:
        try:
            out.append(function())
        except BaseException as error:  # kept for the assertion, not printed by the thread
            out.append(error)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, out


def test_a_second_step_while_one_runs_is_refused_and_nothing_breaks(
    tmp_path: Path, ext_cache: Path, hold_at
) -> None:
    """Issue #23, defect 1: a second ``step()`` while the seed was being evaluated ran the evaluation
    again; the first finished and committed, the second's result landed on the next round and saved
    a journal at ``commit`` with no kernel, which every later run asserted on."""
    hold = hold_at("build@0")
    session = new_session(tmp_path)
    events: list = []
    loop = make_loop(session, ext_cache, "steady", rounds=1, events=events)
    assert loop.step() is None  # the seed's Coder
    first, first_out = in_thread(loop.step)  # the evaluation, held in its build
    wait_for_hold(hold, "build@0", first.is_alive)
    second, second_out = in_thread(loop.step)
    second.join(timeout=300)
    hold.unlink()
    first.join(timeout=300)
    assert first_out == [None], first_out
    assert len(second_out) == 1 and isinstance(second_out[0], LoopStateError), second_out
    assert "a stage is already running (the build of iteration 0)" in str(second_out[0])
    assert [e.iteration for e in events if isinstance(e, IterationCommitted)] == [0]
    assert loop.run() == FINISHED
    assert [(it.number, it.phase, it.status) for it in session.history()] == STEADY_HISTORY
    session.close()


def _bricked(session: SessionRepo, transcript: list) -> dict:
    """The journal the race of defect 1 left: at ``commit``, an evaluation, no kernel."""
    tip = session.history()[-1]
    result = EvalResult(status="correct", stage="time", device="cpu", speedup=0.97).to_dict()
    return {
        "branch": "main",
        "base": tip.sha,
        "stage": COMMIT,
        "phase": "optimize",
        "eval_result": result,
        "transcript": transcript,
    }


def test_a_journal_that_can_never_commit_is_repaired_and_the_session_goes_on(
    tmp_path: Path, ext_cache: Path
) -> None:
    session = new_session(tmp_path)
    assert make_loop(session, ext_cache, "steady", rounds=0).run() == FINISHED  # the seed only
    call = {"role": "judge", "kind": "optimize", "reply": "KEPT CALL", "cost_usd": 0.0}
    journal_path(session).write_text(json.dumps(_bricked(session, [call])))
    session.close()

    reopened = SessionRepo.open(session.path)
    loop = make_loop(reopened, ext_cache, "steady", rounds=1)
    assert loop.stage == "judge"  # the latest stage the round's own contents support
    assert any("it is at 'commit' but holds no kernel" in n for n in loop.notices), loop.notices
    assert loop.run() == FINISHED
    assert [(it.number, it.phase, it.status) for it in reopened.history()] == STEADY_HISTORY
    last = reopened.history()[-1]
    assert last.transcript[0]["reply"] == "KEPT CALL"  # the LLM call it had is kept (its cost too)
    assert "holds no kernel" in last.read_json("loop.json")["notes"][0]
    reopened.close()


def test_a_round_that_cannot_go_on_mid_run_is_repaired_with_a_notice_not_an_assertion(
    tmp_path: Path, ext_cache: Path
) -> None:
    """The same state reached inside a running loop (how the race reached it) is repaired too."""
    session = new_session(tmp_path)
    events: list = []
    loop = make_loop(session, ext_cache, "steady", rounds=1, events=events)
    while not session.history():
        assert loop.step() is None
    loop.pending.stage, loop.pending.kernel = COMMIT, None
    loop.pending.eval_result = EvalResult(status="correct", stage="time", device="cpu").to_dict()
    assert loop.step() is None  # the repair, then the stage it led to (the Judge)
    notices = [e.message for e in events if isinstance(e, LoopNotice)]
    assert notices and "holds no kernel" in notices[0]
    assert loop.run() == FINISHED
    assert [(it.number, it.phase, it.status) for it in session.history()] == STEADY_HISTORY
    session.close()


def test_an_unreadable_journal_is_set_aside_with_a_notice(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    journal_path(session).write_text('{"branch": "main", "stage": ')  # cut by a full disk
    loop = make_loop(session, ext_cache, "steady", rounds=0)
    assert any(f"moved to {BAD_JOURNAL_NAME}" in n for n in loop.notices), loop.notices
    assert (session.path / BAD_JOURNAL_NAME).exists() and not journal_path(session).exists()
    assert loop.stage == "seed" and loop.run() == FINISHED
    session.close()


def test_a_stop_while_evaluating_still_profiles_and_commits_the_iteration(
    tmp_path: Path, ext_cache: Path, hold_at
) -> None:
    """Stopping honours the next boundary at which nothing evaluated is left uncommitted."""
    hold = hold_at("build@0", "profile@0")
    profiled: list = []

    def profiler(task: str, kernel: str, result: EvalResult) -> dict:
        profiled.append(result.status)
        return {"kind": "torch-profiler", "judge_block": "PROFILED"}

    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=2, profiler=profiler)
    runner, out = in_thread(loop.run)
    wait_for_hold(hold, "build@0", runner.is_alive)
    loop.stop()  # Ctrl-C during the build
    hold.unlink()
    wait_for_hold(hold, "profile@0", runner.is_alive)  # it goes on to the profile …
    hold.unlink()
    runner.join(timeout=300)
    assert out == [PAUSED]
    (item,) = session.history()  # … and commits the evaluated seed with it
    assert item.profile["judge_block"] == "PROFILED" and profiled == ["correct"]
    assert not journal_path(session).exists()
    session.close()


def test_close_waits_for_the_stage_then_gives_the_lock_back(tmp_path: Path, ext_cache: Path, hold_at) -> None:
    hold = hold_at("build@0")
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=1)
    assert loop.step() is None
    stepper, out = in_thread(loop.step)
    wait_for_hold(hold, "build@0", stepper.is_alive)
    closer, _ = in_thread(loop.close)
    assert until(loop._cancel.is_set)  # close has asked the stage to stop ...
    assert closer.is_alive() and not loop._closed  # ... and waits for it: the build is not cut short
    hold.unlink()
    closer.join(timeout=300)
    assert out == [None] and [it.number for it in session.history()] == [0]
    with SessionRepo.open(session.path) as other:
        other.acquire_lock()  # free again: the lock went back with the loop
    with pytest.raises(LoopStateError, match="closed"):
        loop.step()
    session.close()
