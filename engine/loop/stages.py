"""The loop's stage bodies (ARCHITECTURE.md §2): the Coder's turn and what its reply becomes, the
evaluation with its re-timing of a close call, the profile, the commit. ``engine.loop.machine.Loop`` keeps
the order of the stages, the journal and the human's controls; each body here takes the loop it runs in.
"""

from __future__ import annotations

import json
from typing import Any

from engine.agents.roles import CoderTurn
from engine.agents.suggestion import Suggestion
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalEvent
from engine.eval.result import EvalResult
from engine.events import (
    BuildLog,
    EvalFinished,
    IterationCommitted,
    LoopError,
    LoopNotice,
    ProfileFinished,
    StageStarted,
)
from engine.loop import duel, duplicates, feedback
from engine.loop.holds import hold
from engine.loop.state import (
    COMMIT,
    ERROR,
    EVALUATE,
    PROFILE,
    clear_journal,
    derive,
    save_journal,
)
from sessions import ranking
from sessions.errors import SessionError
from sessions.records import Iteration, IterationRecord

Loop = Any  # engine.loop.machine.Loop, which imports this module (no import back: no cycle)


def code(loop: Loop) -> None:
    loop._warm_worker()  # its evaluation's worker imports torch while the Coder writes
    base = loop._base_iteration()
    approved = Suggestion.from_dict(loop.pending.approved or {"mode": loop.pending.phase})
    context, guard = loop._context()
    if loop.pending.phase == "repair":
        turn = loop.coder.repair(
            loop.reference,
            base.kernel_source,
            approved,
            failure=feedback.error_log(base.eval_result),
            guard_policy=guard,
            context=context,
            on_token=loop._token("coder"),
            cancel=loop._cancel,
        )
    else:
        turn = loop.coder.optimize(
            loop.reference,
            base.kernel_source,
            approved,
            timing=feedback.timing_text(base.eval_result),
            guard_policy=guard,
            context=context,
            on_token=loop._token("coder"),
            cancel=loop._cancel,
        )
    take_code(loop, turn)


def take_code(loop: Loop, turn: CoderTurn) -> None:
    """Keep the Coder's kernel; on a reply with no code, ask again with a note, then give up. A kernel
    that repeats an earlier iteration's is pointed out once, then committed as that iteration's again
    without a build or a timing (engine.loop.duplicates)."""
    loop._reply_event("coder", turn.record)
    loop.pending.transcript.append(turn.record)
    while True:
        turn = until_code(loop, turn)
        repeat = repeat_of(loop, turn.code) if turn.code is not None else None
        if repeat is None or loop.pending.repeat_asks >= loop.options.max_repeat_asks:
            break
        loop.pending.repeat_asks += 1
        note = f"the Coder's kernel was iteration {repeat.number}'s again; told so and asked again"
        loop.pending.notes.append(note)
        save_journal(loop.session, loop.pending)
        turn = loop.coder.point_out_repeat(turn, repeat.number, _measured(repeat), on_token=loop._token("coder"),
                                           cancel=loop._cancel)  # fmt: skip
        loop._reply_event("coder", turn.record)
        loop.pending.transcript.append(turn.record)
    if turn.code is not None:
        loop.pending.kernel = turn.code
        loop.pending.stage = EVALUATE
        if repeat is not None:
            take_repeat(loop, repeat)
        return
    note = turn.extraction.note or "no ModelNew file found"
    loop.pending.notes.append(f"the Coder's reply had no code ({note}); committed as a compile error")
    loop.pending.kernel = turn.reply.text or "# (empty reply)\n"
    result = EvalResult(
        status="compile_error",
        stage="extract",
        device=loop.options.eval_options.device,
        messages=[f"the Coder's reply contained no ModelNew file: {note}"],
    )
    loop._emit(EvalFinished(result=result.to_dict()))
    loop.pending.eval_result = result.to_dict()
    loop.pending.stage = COMMIT


def until_code(loop: Loop, turn: CoderTurn) -> CoderTurn:
    """``turn``, or the Coder's answer to being asked again (at most ``max_no_code_retries`` times)
    while its reply holds no kernel."""
    while turn.code is None and loop.pending.no_code_replies < loop.options.max_no_code_retries:
        loop.pending.no_code_replies += 1
        note = turn.extraction.note or "no ModelNew file found"
        loop.pending.notes.append(f"the Coder's reply had no code ({note}); asked again")
        save_journal(loop.session, loop.pending)
        turn = loop.coder.ask_for_code(turn, on_token=loop._token("coder"), cancel=loop._cancel)
        loop._reply_event("coder", turn.record)
        loop.pending.transcript.append(turn.record)
    return turn


def repeat_of(loop: Loop, kernel: str) -> Iteration | None:
    """The branch's earliest iteration whose kernel ``kernel`` repeats (comments and spacing aside)."""
    history = loop.session.history(loop.branch)
    number = duplicates.same_as(kernel, ((it.number, it.kernel_source) for it in history))
    return next((it for it in history if it.number == number), None)


def take_repeat(loop: Loop, repeat: Iteration) -> None:
    """Commit the round's kernel with ``repeat``'s result, marked ``same_as``: nothing built or timed."""
    try:
        result = dict(repeat.eval_result)
    except (SessionError, ValueError):
        return  # no readable result to reuse: the kernel is evaluated as any other
    result["same_as"] = repeat.number
    result["messages"] = [
        f"the same kernel as iteration {repeat.number} (comments and spacing aside): not built or timed "
        f"again; this is iteration {repeat.number}'s result, and it does not compete for best",
        *(result.get("messages") or []),
    ]
    result.pop("ranking", None)  # a re-timing against another kernel was that iteration's, not this one's
    loop.pending.notes.append(f"same as iteration {repeat.number}: its result is reused")
    loop.pending.eval_result = result
    loop._emit(EvalFinished(result=result))
    loop.pending.stage = COMMIT


def evaluate_kernel(loop: Loop) -> str | None:
    """Evaluate the round's kernel; ERROR (nothing committed, the stage kept) on a task error."""
    assert loop.pending.kernel is not None

    def on_eval(event: EvalEvent) -> None:
        if event.kind == "stage":
            loop._emit(StageStarted(stage=event.stage, round=loop.next_iteration, detail="evaluate"))
            hold(event.stage, loop.next_iteration)
        elif event.kind == "log":
            loop._emit(BuildLog(line=event.text))

    def run() -> EvalResult:
        return (loop.options.evaluator or evaluate)(
            loop.reference,
            loop.pending.kernel or "",
            loop.options.eval_options,
            on_event=on_eval,
            task_name=loop.session.task_name,
        )

    prepare = getattr(loop.profiler, "prepare", None)
    if prepare is not None:  # the profile's process starts while the kernel is evaluated
        prepare(loop.reference, loop.pending.kernel or "")
    result = run()
    if not result.ok and loop.profiler is not None and hasattr(loop.profiler, "cancel"):
        loop.profiler.cancel()  # nothing to profile: the waiting profile goes without touching the GPU
    if result.harness_failed:  # cudaforge's own fault: once more, then stop without a verdict
        loop._emit(LoopError(stage="evaluate", message=f"{result.messages[-1]}; evaluating again", recoverable=True))
        result = run()
    if result.harness_failed:  # never committed, never the Judge's to repair: the stage stays to redo
        loop.harness_problem = result.messages[-1]
        loop._emit(LoopError(stage="evaluate", message=loop.harness_problem, recoverable=True))
        return ERROR
    if result.task_error:  # the reference failed (a flaky task): not the kernel's fault, not committed
        loop.task_problem = result.messages[-1] if result.messages else "the task's reference failed"
        loop._emit(LoopError(stage="task", message=loop.task_problem, recoverable=False))
        return ERROR
    record = result.to_dict()
    duel_record = retime_if_close(loop, result) if result.ok and result.speedup is not None else None
    if duel_record is not None:
        record["ranking"] = {"duel": duel_record}
    loop.pending.eval_result = record
    loop._emit(EvalFinished(result=loop.pending.eval_result))
    loop.pending.stage = PROFILE if result.ok and loop.profiler is not None else COMMIT
    return None


def retime_if_close(loop: Loop, result: EvalResult) -> dict[str, Any] | None:
    """When ``result``'s speedup is within ``retime_within`` of the branch's best, the two kernels timed
    again back to back; ``eval.json``'s ``ranking.duel`` (None: not close, or no verdict)."""
    if loop.options.evaluator is not None:
        # an exploration's shared evaluator schedules each check and timing on its GPUs; a re-timing
        # outside its plan would time beside another branch, so there the spreads decide alone
        return None
    best = loop.session.best(loop.branch)
    within = loop.options.retime_within
    if best is None or not best.speedup or not within or result.speedup is None:
        return None
    if abs(result.speedup / best.speedup - 1.0) > within:
        return None
    loop._emit(LoopNotice(message=(
        f"{result.speedup:.2f}x is within {within:.0%} of the best, iteration {best.number} "
        f"({best.speedup:.2f}x): timing the two again, back to back"
    )))  # fmt: skip
    again = duel.retime(loop.options.evaluator or evaluate, loop.reference, loop.pending.kernel or "",
                        best.kernel_source, loop.options.eval_options, loop.session.task_name,
                        best.eval_result)  # fmt: skip
    found = duel.duel_record(again, best.sha, best.number)
    if found is None:
        why = again.messages[-1] if again.messages else again.status
        loop._emit(LoopNotice(message=f"the re-timing gave no verdict ({why}): the timings' spreads decide"))
        return None
    verdict = ranking.Duel(**found).verdict
    loop._emit(LoopNotice(message=(
        f"re-timed beside iteration {best.number}: {found['ratio']:.3f}x its speed "
        f"(95% interval {found['low']:.3f}-{found['high']:.3f}): {verdict}"
    )))  # fmt: skip
    return found


def profile(loop: Loop) -> None:
    assert loop.pending.kernel is not None and loop.pending.eval_result is not None
    result = EvalResult.from_dict(loop.pending.eval_result)
    profile = loop.profiler(loop.reference, loop.pending.kernel, result) if loop.profiler else None
    if profile is not None:
        loop.pending.profile = dict(profile)
        loop._emit(ProfileFinished(profile=loop.pending.profile))
    loop.pending.stage = COMMIT


def commit(loop: Loop) -> None:
    p = loop.pending
    assert p.kernel is not None and p.eval_result is not None  # checked by journal_problem first
    tokens, cost = feedback.usage_totals(p.transcript)
    suggestion = None
    if p.approved is not None or p.rejections:
        suggestion = {
            "proposed": p.suggestion,
            "approved": p.approved,
            "approved_by": p.approved_by,
            "edited": p.edited,
            "rejected": p.rejections,
        }
    loop_info = {
        "stage_seconds": p.stage_seconds,
        "no_code_replies": p.no_code_replies,
        "rejections": len(p.rejections),
        "approved_by": p.approved_by,
        "notes": p.notes,
    }
    number = loop.session.record_iteration(
        IterationRecord(
            kernel_source=p.kernel,
            eval_result=p.eval_result,
            phase=p.phase,
            profile=p.profile,
            suggestion=suggestion,
            transcript=p.transcript,
            coder=loop.coder.provider.name,
            judge="" if p.phase in ("seed", "human") and not p.suggestion else loop.judge.provider.name,
            tokens=tokens,
            cost_usd=cost,
            settings=loop.options.settings,
            extra_files={"loop.json": json.dumps(loop_info, indent=2) + "\n"},
            note="\n".join(p.notes),
        ),
        branch=p.branch,
    )
    clear_journal(loop.session, p.branch)
    item = loop.session.iteration(number, p.branch)
    loop._emit(
        IterationCommitted(
            iteration=number, commit=item.sha, phase=p.phase, status=item.status, speedup=item.speedup
        )
    )
    loop.pending = derive(loop.session, loop.options.rounds, p.branch)
    loop._next_no = loop._compute_next_iteration()


def _measured(iteration: Iteration) -> str:
    """``status, 1.42x`` for the Coder's note about a repeated kernel."""
    speedup = f", {iteration.speedup:.2f}x" if iteration.speedup is not None else ""
    return f"{iteration.status.replace('_', ' ')}{speedup}"
