"""The loop end to end on CPU: scripted Coder/Judge, real evaluations, a real session repo.

Every kernel the scripted Coder writes reuses the example's C++ source (or the one broken
variant), so builds come from the shared cache and each test costs a few worker processes.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from engine.eval.result import EvalResult
from engine.events import (
    AwaitingApproval,
    BuildLog,
    EvalFinished,
    IterationCommitted,
    LLMReply,
    LLMToken,
    LoopFinished,
    ProfileFinished,
    StageStarted,
    SuggestionReady,
)
from engine.loop.machine import AWAITING, FINISHED, PAUSED, LoopStateError
from engine.loop.state import CODER, GATE, journal_path
from sessions.records import REQUIRED_FILES
from tests.loop_helpers import RELU_KERNEL, SCRIPTED, make_loop, new_session

pytestmark = pytest.mark.slow


def test_seed_fails_to_compile_then_repair_then_optimize(tmp_path: Path, ext_cache: Path) -> None:
    events: list = []
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "repair_flow", events=events, rounds=2)
    assert loop.run() == FINISHED
    history = session.history()
    assert [(it.number, it.phase, it.status) for it in history] == [
        (0, "seed", "compile_error"),
        (1, "repair", "correct"),
        (2, "optimize", "correct"),
    ]
    for item in history:
        assert set(REQUIRED_FILES) <= set(item.files())
    # the compiler's complaint streamed as build-log events and reached the Judge's repair prompt
    assert any("undeclared_thing_42" in e.line for e in events if isinstance(e, BuildLog))
    judge_call = history[1].transcript[0]
    assert judge_call["role"] == "judge" and judge_call["kind"] == "repair"
    assert "undeclared_thing_42" in judge_call["messages"][0]["content"]
    # the approved suggestion is recorded with who approved it
    suggestion = history[1].suggestion
    assert (
        suggestion["approved_by"] == "policy:auto"
        and "undeclared_thing_42" in suggestion["approved"]["critical_issue"]
    )
    assert history[2].suggestion["proposed"]["bottleneck"] == "the element loop is scalar"
    assert history[2].judge.startswith("scripted/") and history[0].judge == ""
    # stages, tokens, replies and results all reach the front end
    stages = [e.stage for e in events if isinstance(e, StageStarted) and e.detail != "evaluate"]
    assert stages == [
        "reference",  # the task check: the reference runs on its own inputs before the first LLM call
        "seed",
        "evaluate",
        "judge",
        "gate",
        "coder",
        "evaluate",
        "judge",
        "gate",
        "coder",
        "evaluate",
    ]
    assert {"build", "check"} <= {e.stage for e in events if isinstance(e, StageStarted)}
    assert any(isinstance(e, LLMToken) and e.role == "coder" for e in events)
    assert [e.role for e in events if isinstance(e, LLMReply)] == [
        "coder",
        "judge",
        "coder",
        "judge",
        "coder",
    ]
    assert [e.result["status"] for e in events if isinstance(e, EvalFinished)] == [
        "compile_error",
        "correct",
        "correct",
    ]
    committed = [e for e in events if isinstance(e, IterationCommitted)]
    assert [(e.iteration, e.phase) for e in committed] == [(0, "seed"), (1, "repair"), (2, "optimize")]
    assert committed[1].commit == history[1].sha
    finished = events[-1]
    assert isinstance(finished, LoopFinished) and finished.reason == "rounds"
    best = session.best()
    assert finished.best_iteration == best.number and best.number in (1, 2)
    # stage seconds per iteration are kept for the summary table
    assert history[1].read_json("loop.json")["stage_seconds"]["evaluate"] > 0
    assert not journal_path(session).exists()
    session.close()


def _coder_dir(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "coder"
    folder.mkdir()
    for i, name in enumerate(names):
        shutil.copy(SCRIPTED / "no_code" / "coder" / name, folder / f"{i:02d}.md")
    return folder


def test_a_reply_without_code_is_asked_again_with_a_note(tmp_path: Path, ext_cache: Path) -> None:
    coder_dir = _coder_dir(tmp_path, ["01_seed.md", "02_prose.md", "04_code.md"])
    session = new_session(tmp_path)
    loop = make_loop(
        session, ext_cache, coder_dir=coder_dir, judge_dir=SCRIPTED / "no_code" / "judge", rounds=1
    )
    assert loop.run() == FINISHED
    last = session.history()[-1]
    assert (last.number, last.status) == (1, "correct")
    calls = [c for c in last.transcript if c["role"] == "coder"]
    assert [c["outcome"] for c in calls] == ["no_code", "ok"]
    retry = calls[1]["messages"]
    assert retry[-2]["role"] == "assistant" and "SIMD" in retry[-2]["content"]
    assert "no usable kernel file" in retry[-1]["content"]
    assert "asked again" in last.read_json("loop.json")["notes"][0]
    session.close()


def test_two_replies_without_code_commit_a_compile_error_and_the_loop_repairs(
    tmp_path: Path, ext_cache: Path
) -> None:
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "no_code", rounds=2)
    assert loop.run() == FINISHED
    history = session.history()
    assert [(it.phase, it.status) for it in history] == [
        ("seed", "correct"),
        ("optimize", "compile_error"),
        ("repair", "correct"),
    ]
    failed = history[1]
    assert failed.eval_result["stage"] == "extract"
    assert "no ModelNew file" in failed.eval_result["messages"][0]
    assert "pip install" in failed.kernel_source  # the reply as given
    assert [c["outcome"] for c in failed.transcript if c["role"] == "coder"] == ["no_code", "no_code"]
    assert history[2].transcript[0]["kind"] == "repair"  # the Judge repaired it like any failure
    session.close()


def test_rejected_suggestion_sends_the_note_to_the_judge(tmp_path: Path, ext_cache: Path) -> None:
    events: list = []
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "reject", approval="ask", rounds=1, events=events)
    assert loop.run() == AWAITING
    assert loop.awaiting and loop.stage == GATE
    awaiting = [e for e in events if isinstance(e, AwaitingApproval)]
    assert "FIRST IDEA" in awaiting[-1].suggestion["bottleneck"]
    loop.reject("too risky: no assembly, please")
    assert loop.run() == AWAITING
    assert "SECOND IDEA" in [e for e in events if isinstance(e, SuggestionReady)][-1].suggestion["bottleneck"]
    loop.approve()
    assert loop.run() == FINISHED
    last = session.history()[-1]
    judge_calls = [c for c in last.transcript if c["role"] == "judge"]
    assert len(judge_calls) == 2
    second = judge_calls[1]["messages"]
    assert "FIRST IDEA" in second[-2]["content"] and "too risky: no assembly" in second[-1]["content"]
    suggestion = last.suggestion
    assert suggestion["rejected"][0]["note"] == "too risky: no assembly, please"
    assert suggestion["approved_by"] == "human" and suggestion["edited"] is False
    assert "SECOND IDEA" in suggestion["approved"]["bottleneck"]
    session.close()


def test_approving_an_edited_suggestion_reaches_the_coder(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "reject", approval="ask", rounds=1)
    with pytest.raises(LoopStateError):
        loop.approve()  # nothing awaits approval before the Judge has spoken
    assert loop.run() == AWAITING
    loop.approve("Use a blocked loop of 64 elements; HUMAN EDIT")
    assert loop.run() == FINISHED
    last = session.history()[-1]
    assert last.suggestion["edited"] is True
    coder_call = [c for c in last.transcript if c["role"] == "coder"][0]
    assert "HUMAN EDIT" in coder_call["messages"][0]["content"]
    session.close()


def test_human_kernel_edit_is_evaluated_and_committed_as_human(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", approval="ask", rounds=1)
    assert loop.run() == AWAITING
    human = RELU_KERNEL.read_text().replace("class ModelNew(", "# written by a human\nclass ModelNew(")
    loop.edit_kernel(human)
    assert loop.run() == FINISHED
    last = session.history()[-1]
    assert (last.number, last.phase, last.status) == (1, "human", "correct")
    assert last.kernel_source == human
    assert last.suggestion is None
    # the Judge call made before the edit is kept in the human commit's transcript
    assert [c["role"] for c in last.transcript] == ["judge"]
    session.close()


def test_pause_then_resume_with_a_new_loop(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    holder: dict = {}

    def on_event(event) -> None:
        if isinstance(event, IterationCommitted) and event.iteration == 1:
            holder["loop"].pause()

    holder["loop"] = make_loop(session, ext_cache, "steady", rounds=3, on_event=on_event)
    assert holder["loop"].run() == PAUSED
    assert [it.number for it in session.history()] == [0, 1]
    session.close()
    resumed_session = type(session).open(session.path)
    events: list = []
    loop = make_loop(resumed_session, ext_cache, "steady", rounds=3, events=events)
    assert loop.stage == "judge" and loop.next_iteration == 2
    assert loop.run() == FINISHED
    assert [(it.number, it.status) for it in resumed_session.history()] == [(i, "correct") for i in range(4)]
    resumed_session.close()


def test_crash_after_the_judge_redoes_only_the_interrupted_stage(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=1)
    while loop.stage != CODER:
        assert loop.step() is None
    # the process "dies" here: nothing of round 1 is committed, the journal holds the Judge's work
    assert [it.number for it in session.history()] == [0]
    session.close()
    reopened = type(session).open(session.path)
    events: list = []
    again = make_loop(reopened, ext_cache, "steady", rounds=1, events=events)
    assert again.stage == CODER
    assert again.run() == FINISHED
    assert again.judge.provider.calls == 0  # the Judge was not asked again
    last = reopened.history()[-1]
    # the new process's scripted Coder starts its replies over, so its first is the seed's kernel again:
    # it is told so once (engine.loop.duplicates), and its next, new kernel is the one evaluated
    assert [c["role"] for c in last.transcript] == ["judge", "coder", "coder"]
    assert "same as iteration 0" in last.transcript[-1]["messages"][-1]["content"]
    assert last.eval_result.get("same_as") is None
    assert last.suggestion["approved"]["bottleneck"] == "scalar loop"
    reopened.close()


def test_stop_cancels_an_llm_call_in_flight(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    holder: dict = {}
    started = threading.Event()

    def on_event(event) -> None:
        if (
            isinstance(event, LLMToken)
            and event.role == "coder"
            and event.iteration == 1
            and not started.is_set()
        ):
            started.set()
            holder["loop"].stop()

    holder["loop"] = make_loop(session, ext_cache, "steady", rounds=1, on_event=on_event, chunk_delay_s=0.01)
    assert holder["loop"].run() == PAUSED
    assert started.is_set()
    assert [it.number for it in session.history()] == [0]
    assert holder["loop"].stage == CODER  # redone on the next run
    assert holder["loop"].run() == FINISHED
    assert [it.number for it in session.history()] == [0, 1]
    session.close()


def test_profiler_feedback_is_committed_and_shown_to_the_judge(tmp_path: Path, ext_cache: Path) -> None:
    seen: list[EvalResult] = []

    def profiler(task: str, kernel: str, result: EvalResult) -> dict:
        seen.append(result)
        return {
            "kind": "torch-profiler",
            "judge_block": f"cf_relu_cpu kernel: PROFILE-MARK {len(kernel)} bytes",
        }

    events: list = []
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=1, events=events, profiler=profiler)
    assert loop.run() == FINISHED
    first, second = session.history()
    assert first.profile["kind"] == "torch-profiler" and seen[0].ok
    assert any(isinstance(e, ProfileFinished) for e in events)
    judge_prompt = second.transcript[0]["messages"][0]["content"]
    assert "PROFILE-MARK" in judge_prompt and "torch.profiler" in judge_prompt
    assert second.read_json("loop.json")["stage_seconds"].get("profile") is not None
    session.close()


def test_without_profiler_the_judge_gets_no_hardware_feedback(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=1, profiler=lambda *a: None)
    assert loop.run() == FINISHED
    first, second = session.history()
    assert first.profile is None
    assert "no profiler data" in second.transcript[0]["messages"][0]["content"]
    session.close()


def test_branch_from_continues_on_a_new_branch(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=2)
    assert loop.run() == FINISHED
    main = [it.sha for it in session.history("main")]
    name = loop.branch_from(0)
    assert name == "from-iter-0" and loop.branch == name and session.current_branch == name
    assert loop.stage == "judge" and loop.next_iteration == 1
    assert loop.run() == FINISHED
    assert [it.sha for it in session.history("main")] == main
    branch = session.history(name)
    assert [it.number for it in branch] == [0, 1, 2] and branch[0].sha == main[0]
    assert branch[1].sha != main[1]
    session.close()
