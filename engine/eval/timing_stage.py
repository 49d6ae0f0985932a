"""The worker's timing stage (ARCHITECTURE.md §3): rotation, verified warm-up, sampled check, probe.

In order: ``replay.SETS`` new input sets; both models timed over them in turn (engine.eval.timing), each
timed call preceded by the L2 flush and, on CUDA, the persisting-L2 reset (engine.eval.l2), the warm-up's
one call per set verified before any call is timed; the timed calls' kept outputs checked against their
sets' answers; the replay probe (a call on a timing set per new set, then the first call on each new set),
confirmed on more new sets when it names a replay by time (engine.eval.replay), decided by the
candidate's own launches where its binary tells them; the task's lower bounds; the two clocks compared
(``timing-disagreement``). Any refusal ends the stage with the verdict already recorded.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from engine.eval.result import INCORRECT, Timing

Evaluation = Any  # engine.eval.worker.Evaluation, which imports this module (no import back: no cycle)


def _expected_calls(plan: Any) -> int:
    """About how many calls of each model the timing makes (where the random sample is drawn)."""
    blocks = max(1, -(-plan.min_trials // plan.block))
    return plan.warmup_calls + blocks * plan.block


def _refused(ev: Evaluation, verdict: Any, when: str = "") -> bool:
    """Record a replay verdict: its rule (refused unless relaxed) or an incorrect answer."""
    if verdict.rule:
        return ev.guard(verdict.rule, verdict.message)
    if verdict.incorrect:
        ev.finish(INCORRECT, f"{when}: {verdict.message}" if when else verdict.message)
        return True
    return False


def _probe(
    ev: Evaluation, task: Any, reference: Any, candidate: Any, answers: Any, timer: Any, compare: Any, parts: dict[str, float]
) -> Any:
    """The replay probe after timing, confirmed on other new sets when it names a replay by time; what its
    new inputs and its calls took goes into ``parts`` (milliseconds)."""
    from engine.eval import launches, replay
    from engine.eval.values import clone

    new = candidate.fn
    copies = clone if ev.reference_mutates else None
    seen = (candidate, None if ev.reference_mutates else answers.first_outputs())
    seeds = ev.job.seed + 2000
    started = time.monotonic()
    sets = [ev.make_inputs(task, seeds + i) for i in range(replay.PROBE_SETS)]
    ev.sync()
    parts["inputs"] = _ms_since(started)
    clock = timer.busy_time_once  # on CPU, the work done, not the wall time
    started = time.monotonic()
    timed_ms = ev.result.timing.candidate.median_ms  # set by the timing just before (time_stage)
    probed, verdict = replay.probe(new, reference, sets, clock, compare, *seen, copies, launches.own_launches(ev), timed_ms)
    parts["probe"] = _ms_since(started)
    figures = {**probed.figures(), **verdict.figures}  # the seen call's own launches, where looked at
    if verdict.deferred:  # the ablation stage calls it again on the fastest seen call's tensors, its kernels off
        ev.replay_suspect = verdict.suspect
    if verdict.by_time:  # named from times alone: it must show again on sets never seen
        others = [ev.make_inputs(task, seeds + 1000 + i) for i in range(replay.PROBE_SETS)]
        again, verdict = replay.probe(new, reference, others, clock, compare, *seen, copies)
        figures["confirmation"] = again.figures()
        figures["confirmed"] = verdict.by_time
    verdict.figures = figures
    return verdict


def hidden_work(timing: Timing) -> str | None:
    """``timing-disagreement``'s message when the candidate's calls took the host clock far longer than
    their events and the flush saw (engine.guard.runtime.timing_disagreement), else None: the median gaps
    of both models over every timed call, the reference's allowed. It is decided on the timed calls
    themselves: session 22's separate host-clock calls were few (four), so another process's work on the
    GPU decided their median, and a candidate could tell them from timed calls (no flush queued before
    them) and behave there; a second timing to confirm a disagreement was tried and dropped (session 24's
    review): it came after the probe's new inputs and alternated the models call by call, so a candidate
    could tell it apart too, and hide its work only in the first."""
    from engine.guard.runtime import timing_disagreement

    candidate, reference = timing.candidate, timing.reference
    return timing_disagreement(candidate.median_ms, candidate.gap_median_ms, reference.gap_median_ms)


def _ms_since(started: float) -> float:
    return round((time.monotonic() - started) * 1e3, 3)


def _segments(ev: Evaluation) -> int | None:
    """How many memory segments the CUDA caching allocator has asked the driver for so far (each a
    cudaMalloc, milliseconds where a small kernel's call takes microseconds); None on CPU."""
    import torch

    if ev.device.type != "cuda":
        return None
    return int(torch.cuda.memory_stats(ev.device).get("segment.all.allocated", 0))


def time_stage(ev: Evaluation, task: Any, reference: Any, new: Any) -> bool:
    """Time both models as the module docstring says; False when the candidate was refused."""
    import torch

    from engine.eval import floor, replay
    from engine.eval.compare import compare_outputs
    from engine.eval.timing import TimingPlan, make_timer, time_models

    ev.stage("time")
    plan = ev.job.timing or TimingPlan()
    plan = dataclasses.replace(plan, warmup_calls=max(plan.warmup_calls, replay.SETS))  # one call per set at least
    timer = make_timer(ev.device, ev.l2)

    def compare(expected: Any, got: Any) -> Any:
        return compare_outputs(expected, got, ev.job.tolerances, quick=True)  # its verdict only: one sync

    with torch.no_grad():
        sets = [ev.make_inputs(task, ev.job.seed + 1000 + i) for i in range(replay.SETS)]
    calls = _expected_calls(plan)
    candidate = replay.Rotation(new, sets, calls, seed=ev.job.seed)
    answers = replay.Rotation(reference, sets, calls)
    parts: dict[str, float] = {}  # what each part of the replay defence took (settings.replay.parts_ms)

    def verified() -> bool:
        """Between warm-up and timing: the sets verified, and the timed call whose output is kept drawn
        now, among the calls still to come (the warm-up's length varies; a candidate cannot know it)."""
        started = time.monotonic()
        candidate.sample_from_here()
        verdict = replay.Verdict() if ev.reference_mutates else replay.check_warmup(candidate, answers, compare)
        ev.add_seconds("replay", started)
        parts["warmup_check"] = _ms_since(started)
        return not _refused(ev, verdict, "before timing")  # a relaxed rule does not stop the timing

    with torch.no_grad():
        timing = time_models(candidate, answers, ev.device, plan, timer, after_warmup=verified)
    if timing is None:
        return False
    ev.result.timing = timing
    ev.result.hardware_floor = floor.measure(reference, sets[0])
    started, segments = time.monotonic(), _segments(ev)
    with torch.no_grad():
        sampled = replay.Verdict(message="the reference changes its inputs: the timed outputs were not re-checked")
        if not ev.reference_mutates:
            sampled = replay.check_samples(candidate, answers.first_outputs(), compare)
        parts["samples"] = _ms_since(started)
        probed = None if (sampled.rule or sampled.incorrect) else _probe(ev, task, reference, candidate, answers, timer, compare, parts)
        ev.sync()
    ev.add_seconds("replay", started)
    ev.result.settings["replay"] = {
        "sets": len(sets),
        "timed_calls_checked": 0 if ev.reference_mutates else len(candidate.samples()),
        **(probed.figures if probed is not None else {}),
        "parts_ms": parts,
        "new_segments": None if segments is None else (_segments(ev) or 0) - segments,  # cudaMallocs meanwhile
    }
    if _refused(ev, sampled, "after timing") or (probed is not None and _refused(ev, probed, "after timing")):
        return False
    if ev.l2 is not None:
        ev.result.settings["l2"] = ev.l2.record()
    l2 = ev.l2.message() if ev.l2 is not None else None
    if l2 and ev.guard("l2-persisting", l2):
        return False
    message = ev.device.type == "cuda" and hidden_work(timing)
    if message and ev.guard("timing-disagreement", message):
        return False
    if timing.candidate.median_ms > 0:
        ev.result.speedup = timing.reference.median_ms / timing.candidate.median_ms
    return True
