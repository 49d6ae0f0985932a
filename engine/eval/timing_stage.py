"""The worker's timing stage (ARCHITECTURE.md §3): probe, timed rotation, sampled check, clocks compared.

In order: a warm-up on the check's inputs; the replay probe on ``replay.SETS`` new input sets, which
verifies each of them (engine.eval.replay); both models timed over those sets in turn, each timed call
preceded by the L2 flush and, on CUDA, the persisting-L2 reset (engine.eval.l2); the timed calls' kept
outputs checked against their sets' answers; the task's lower bounds measured; the two clocks compared
(``timing-disagreement``). Any refusal ends the stage with the verdict already recorded.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from engine.eval.result import INCORRECT

Evaluation = Any  # engine.eval.worker.Evaluation, which imports this module (no import back: no cycle)

WARMUP_CALLS = 1  # per model, on the check's inputs, before the probe's first encounters are timed


def _expected_calls(plan: Any) -> int:
    """About how many calls of each model the timing makes (where the random sample is drawn)."""
    blocks = max(1, -(-plan.min_trials // plan.block))
    return plan.warmup_calls + blocks * (plan.block + plan.host_per_block)


def _refused(ev: Evaluation, verdict: Any, when: str) -> bool:
    if verdict.rule:
        return ev.guard(verdict.rule, verdict.message)
    if verdict.incorrect:
        ev.finish(INCORRECT, f"{when}: {verdict.message}" if when else verdict.message)
        return True
    return False


def time_stage(ev: Evaluation, task: Any, reference: Any, new: Any) -> bool:
    """Time both models as the module docstring says; False when the candidate was refused."""
    import torch

    from engine.eval import floor, replay
    from engine.eval.compare import compare_outputs
    from engine.eval.timing import TimingPlan, make_timer, time_models
    from engine.guard.runtime import timing_disagreement

    ev.stage("time")
    plan = ev.job.timing or TimingPlan()
    timer = make_timer(ev.device, ev.l2)

    def compare(expected: Any, got: Any) -> Any:
        return compare_outputs(expected, got, ev.job.tolerances)

    started = time.monotonic()
    with torch.no_grad():
        warm = ev.make_inputs(task, ev.job.seed)
        for _ in range(WARMUP_CALLS):
            new(*warm)
            reference(*warm)
        del warm
        sets = [ev.make_inputs(task, ev.job.seed + 1000 + i) for i in range(replay.SETS)]
        ev.sync()
        probed, verdict = replay.probe(new, reference, sets, timer.time_once, compare)
        if verdict.by_time:  # named from times alone: it must show again on sets never seen
            others = [ev.make_inputs(task, ev.job.seed + 2000 + i) for i in range(replay.SETS)]
            again, verdict = replay.probe(new, reference, others, timer.time_once, compare)
            verdict.figures["confirmed_on_new_sets"] = verdict.by_time
            if not verdict.by_time:
                verdict.figures.update(probed.figures())
        ev.sync()
    ev.add_seconds("replay", started)
    ev.result.settings["replay"] = verdict.figures
    if _refused(ev, verdict, ""):
        return False
    # the probe's calls warmed both models on these very sets: the timer's own warm-up need not repeat it
    plan = dataclasses.replace(plan, warmup_calls=1)
    calls = _expected_calls(plan)
    candidate = replay.Rotation(new, sets, calls, seed=ev.job.seed)
    with torch.no_grad():
        timing = time_models(candidate, replay.Rotation(reference, sets, calls), ev.device, plan, timer)
    ev.result.timing = timing
    ev.result.hardware_floor = floor.measure(reference, sets[0])
    started = time.monotonic()
    with torch.no_grad():
        sampled = replay.check_samples(candidate, probed.expected, compare)
        ev.sync()
    ev.add_seconds("replay", started)
    ev.result.settings["replay"]["timed_calls_checked"] = len(candidate.samples())
    if _refused(ev, sampled, "after timing"):
        return False
    l2 = ev.l2.message() if ev.l2 is not None else None
    if l2 and ev.guard("l2-persisting", l2):
        return False
    message = ev.device.type == "cuda" and timing_disagreement(
        timing.candidate.median_ms,
        timing.candidate.host_median_ms,
        timing.reference.median_ms,
        timing.reference.host_median_ms,
    )
    if message and ev.guard("timing-disagreement", message):
        return False
    if timing.candidate.median_ms > 0:
        ev.result.speedup = timing.reference.median_ms / timing.candidate.median_ms
    return True
