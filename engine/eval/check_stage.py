"""The worker's check stage (ARCHITECTURE.md §3): trials of fresh seeded inputs, each output compared and
every runtime check made, weak outputs judged by their spread and, where that fails, by the float64 arbiter.

Moved out of engine.eval.worker so that ``Evaluation`` holds the order of the stages and this module the
check's own rules, as engine.eval.timing_stage holds the timing's.
"""

from __future__ import annotations

import time
from typing import Any

from engine.eval import blame, faults
from engine.eval.pipe import TRIAL
from engine.eval.result import INCORRECT, RUNTIME_ERROR, TrialResult, error_info
from engine.eval.values import clone as _clone

Evaluation = Any  # engine.eval.worker.Evaluation, which imports this module (no import back: no cycle)


def call_candidate(ev: Evaluation, new: Any, inputs: list[Any], index: int, seed: int
) -> tuple[Any, list[Any]] | None:
    """One candidate call on a private copy of the inputs, on NaN-filled free memory, its flags
    verified after; None (and a verdict) when it raised or changed a flag."""
    arguments = _clone(inputs)
    ev.poison()
    try:
        output = new(*arguments)
        ev.sync()
    except BaseException as error:
        if faults.is_oom(error):
            shared = blame.out_of_memory(ev, error)
            if shared:
                ev.harness(
                    faults.OOM_CONTENTION,
                    "ModelNew.forward ran out of GPU memory while other processes held most of it "
                    f"({faults.describe_memory(shared)})",
                    error,
                )
                return None
        ev.result.error = error_info(error)
        message = f"{type(error).__name__}: {error}"[:1000]
        ev.result.trials.append(TrialResult(index=index, seed=seed, passed=False, message=message))
        ev.finish(
            RUNTIME_ERROR, f"ModelNew.forward raised {type(error).__name__}: {str(error).strip()[:500]}"
        )
        return None
    if ev.precision_changed(f"ModelNew.forward (trial {index})"):
        return None
    return output, arguments


def check(ev: Evaluation, task: Any, reference: Any, new: Any) -> bool:
    """``trials`` rounds of fresh seeded inputs; the candidate runs before and after the reference,
    each time on NaN-filled free memory; weak outputs get the spread check (engine.eval.degenerate)."""
    import torch

    from engine.eval.degenerate import SpreadCheck

    base = ev.job.seed
    spread = SpreadCheck.for_weak(ev.result.weak_outputs)
    earlier: list[Any] = []  # the previous trial's outputs, kept alive so their memory cannot be reused
    for index in range(ev.job.trials):
        seed = base + 1 + index
        with torch.no_grad():
            inputs = ev.make_inputs(task, seed)
            before = call_candidate(ev, new, inputs, index, seed)
            if before is None:
                return False
            reference_inputs = _clone(inputs)
            expected = reference(*reference_inputs)
            ev.sync()
            after = call_candidate(ev, new, inputs, index, seed)
            if after is None:
                return False
            (got, arguments), (got_again, _) = before, after
            if runtime_guards(ev, inputs, reference_inputs, arguments, got, got_again, earlier):
                return False
            outcome = compare_both(ev, expected, got, got_again)
            if outcome.passed and degenerate_refused(ev, expected, [got, got_again], inputs, reference):
                return False
            spread.add(expected, got, inputs, seed)
            spread.add(expected, got_again, inputs, seed)
        earlier = [got, got_again]
        if not record_trial(ev, index, seed, outcome):
            return False
    return not spread_refused(ev, spread, task, reference)


def compare_both(ev: Evaluation, expected: Any, got: Any, got_again: Any) -> Any:
    """The first call's comparison, or the second's when only that one fails."""
    from engine.eval.compare import compare_outputs

    outcome = compare_outputs(expected, got, ev.job.tolerances)
    if outcome.passed:
        second = compare_outputs(expected, got_again, ev.job.tolerances)
        if not second.passed:
            second.message = f"on the call after the reference: {second.message}"
            outcome = second
    if not outcome.passed and "non-finite" in outcome.message:
        outcome.message += (
            "; free memory is filled with NaN before every candidate call, so a kernel that reads "
            "or returns memory it never wrote fails here"
        )
    return outcome


def record_trial(ev: Evaluation, index: int, seed: int, outcome: Any) -> bool:
    trial = TrialResult(
        index=index,
        seed=seed,
        passed=outcome.passed,
        max_abs_error=outcome.max_abs_error,
        max_rel_error=outcome.max_rel_error,
        message=outcome.message,
    )
    ev.result.trials.append(trial)
    ev.channel.send(TRIAL, trial=trial.__dict__)
    if not outcome.passed:
        ev.finish(INCORRECT, f"trial {index} (seed {seed}): {outcome.message}")
        return False
    return True


def degenerate_refused(ev: Evaluation, expected: Any, outputs: list[Any], inputs: list[Any], reference: Any) -> bool:
    """A weak output the candidate answered degenerately (zeros, a constant, an input): refused, unless
    the float64 arbiter finds the exact answer constant to rounding and the answer within rounding
    of it (then it is the right answer: engine.eval.arbiter)."""
    from engine.eval.degenerate import first_degenerate

    found = None
    for record in ev.result.weak_outputs:
        found = first_degenerate([record], expected, outputs, inputs)
        if found and not rescued(ev, reference, expected, outputs, inputs, [found[0]], degenerate=True):
            break
        found = None
    if found is None:
        return False
    where, kind = found
    what = {"zeros": "all zeros", "constant": "one constant"}.get(kind, f"{kind} returned unchanged")
    return ev.guard(
        "output-degenerate",
        f"{where} is {what} where the reference's is not; the task is weak there (a "
        "degenerate answer passes its tolerance), so this is not accepted as correct",
    )


def spread_refused(ev: Evaluation, spread: Any, task: Any, reference: Any) -> bool:
    """The weak outputs' error against the reference's spread over every trial; True when failed.

    A failed output goes to the float64 arbiter first (engine.eval.arbiter): the candidate passes
    there when its error to the float64 reference is at the level of the float32 reference's own."""
    from engine.eval.degenerate import SPREAD_LIMIT

    failures = spread.failures()
    if not failures:
        return False
    arbitration = arbitrate_spread(ev, spread, failures, task, reference)
    remaining = [
        f for f in failures if not arbitration.accepts(f["output"], degenerate=f["constant_across_trials"])
    ]
    rulings = {r.output: r for r in arbitration.rulings}
    for where in dict.fromkeys(f["output"] for f in failures):
        if where in rulings and where not in {f["output"] for f in remaining}:
            ev.result.messages.append(rulings[where].message())
    for failure in remaining:
        where, error = failure["output"], failure["relative_error"]
        baseline = "spread" if failure["check"] == "spread" else f"distance from {failure['check']}"
        if where in rulings:
            note = f"; {rulings[where].message()}"
        else:
            note = f"; the float64 arbiter could not judge it, so the spread rule decides: {arbitration.unavailable}"
        if failure["constant_across_trials"]:
            return ev.guard(
                "output-degenerate",
                f"{where} is the same for every trial's inputs while the reference's changes with them{note}",
            )
        ev.finish(
            INCORRECT,
            f"{where} passes the tolerance only because the task is weak there: its error is "
            f"{error:.3g} of the reference's {baseline} (at most {SPREAD_LIMIT:g} passes){note}",
        )
        return True
    return False


def float64_reference(ev: Evaluation, reference: Any) -> Any:
    """The reference cast to float64, made once per evaluation at its first use."""
    from engine.eval.arbiter import Float64Reference

    if ev.float64 is None:
        ev.float64 = Float64Reference(reference, ev.sync)
    return ev.float64


def arbitrate_spread(ev: Evaluation, spread: Any, failures: list[dict[str, Any]], task: Any, reference: Any) -> Any:
    """The float64 arbiter over every trial of the failed weak outputs: each trial's inputs drawn
    again from its seed, the float32 reference run again (it must give the kept output) and the
    float64 one beside it. Only here, where a weak output's check failed, is the price paid."""
    import torch

    from engine.eval.arbiter import judge_spread

    started = time.monotonic()
    float64 = float64_reference(ev, reference)

    def rerun(seed: int) -> tuple[Any, Any] | None:
        try:
            inputs = ev.make_inputs(task, seed)
            with torch.no_grad():
                expected = reference(*_clone(inputs))
            ev.sync()
        except Exception as error:  # noqa: BLE001 - the arbiter is unavailable, the spread rule decides
            float64.unavailable = f"the reference failed when run again: {type(error).__name__}: {error}"[:400]
            return None
        truth = float64(_clone(inputs))
        return None if truth is None else (expected, truth)

    paths = list(dict.fromkeys(f["output"] for f in failures))
    arbitration = judge_spread(spread, paths, rerun, float64)
    record_arbitration(ev, arbitration)
    ev.add_seconds("float64_arbiter", started)
    return arbitration


def rescued(ev: Evaluation, reference: Any, expected: Any, outputs: list[Any], inputs: list[Any], paths: list[str], degenerate: bool
) -> bool:
    """Whether the float64 arbiter accepts the candidate's ``outputs`` to one call at ``paths``
    (``degenerate``: only where the exact answer is constant to rounding)."""
    from engine.eval.arbiter import Arbitration, judge_call

    started = time.monotonic()
    float64 = float64_reference(ev, reference)
    truth = float64(_clone(inputs))
    arbitration = (
        Arbitration([], float64.unavailable)
        if truth is None
        else judge_call(paths, expected, outputs, truth, float64)
    )
    record_arbitration(ev, arbitration)
    ev.add_seconds("float64_arbiter", started)
    return bool(paths) and all(arbitration.accepts(where, degenerate) for where in paths)


def record_arbitration(ev: Evaluation, arbitration: Any) -> None:
    """The arbiter's rulings kept on the result (``EvalResult.arbiter``), over every call judged."""
    found = arbitration.record()
    record = ev.result.arbiter or {"outputs": [], "constant_to_rounding": False, "unavailable": None}
    record["outputs"].extend(found["outputs"])
    record["constant_to_rounding"] = record["constant_to_rounding"] or found["constant_to_rounding"]
    record["unavailable"] = record["unavailable"] or found["unavailable"]
    ev.result.arbiter = record


def runtime_guards(ev: Evaluation, inputs: list[Any],
    reference_inputs: list[Any],
    arguments: list[Any],
    got: Any,
    got_again: Any,
    earlier: list[Any],
) -> bool:
    """The per-trial runtime checks; True when one refused the kernel."""
    from engine.guard import runtime as rg

    posing = rg.non_tensor_outputs([got, got_again])
    if posing and ev.guard(
        "output-not-tensor",
        f"outputs of type {', '.join(sorted(set(posing)))}; exact torch.Tensor required",
    ):
        return True
    aliased = rg.aliased_outputs(got, arguments)
    if aliased and ev.guard("output-aliases-input", f"output(s) {aliased} share storage with an input"):
        return True
    theirs = set(rg.mutated_inputs(inputs, reference_inputs))
    ev.reference_mutates = ev.reference_mutates or bool(theirs)
    changed = set(rg.mutated_inputs(inputs, arguments)) - theirs
    if changed and ev.guard(
        "input-mutated",
        f"forward modified input(s) {sorted(changed)}, which the reference leaves unchanged",
    ):
        return True
    reused = rg.reused_outputs(got_again, [got]) or rg.reused_outputs(got, earlier)
    return bool(reused) and ev.guard(
        "output-cached", f"output(s) {reused} reuse the storage of a previous call's output"
    )
