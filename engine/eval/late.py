"""The worker's late stages: ablation and shapes (ARCHITECTURE.md §3, "Defences").

Both run a candidate in a way its author did not plan for (its own kernels switched off, other sizes),
which may crash the process or poison the CUDA context; so they run last, after the worker sent the
verdict so far (engine.eval.pipe ``PROVISIONAL``), and the supervisor keeps that verdict when the
worker dies or hangs here, with the stage's outcome added.
"""

from __future__ import annotations

import time
from typing import Any

from engine.eval import check_stage
from engine.eval.pipe import PROVISIONAL
from engine.eval.values import clone

Evaluation = Any  # engine.eval.worker.Evaluation, which imports this module (no import back: no cycle)
# The ablation's new inputs: a seed no earlier stage called the candidate with (the check's trials from
# seed + 1, timing's sets from + 1000, the replay probe's from + 2000 and its confirmation's from + 3000),
# so a cache keyed by values cannot answer them.
ABLATION_SEED = 5000


def ablation_applies(ev: Evaluation) -> bool:
    """On CUDA, when every CUDA extension of the candidate was built on the split path."""
    from engine.eval.ablation import switches

    if ev.device.type != "cuda" or not ev.job.kernel_names:
        return False
    recorder = getattr(ev, "recorder", None)
    if recorder is None:
        return False
    if not hasattr(ev, "_ablation_switches"):
        try:
            ev._ablation_switches = switches(recorder.modules, recorder.module_paths)
        except (OSError, AttributeError) as error:  # the switch not found: say so, judge by the share
            ev.result.messages.append(f"the ablation switch could not be loaded ({error}); the share rule judges")
            ev._ablation_switches = None
    return ev._ablation_switches is not None


def own_kernels_unneeded(ev: Evaluation, task: Any, reference: Any, new: Any) -> bool:
    """One forward on new inputs with the own kernels' launches switched off; True when the rule it
    finds refuses the kernel.

    An output that still passes is ``own-kernel-unneeded``: the work is all in PyTorch. Where the replay
    probe found seen calls suspiciously fast and deferred to this stage (engine.eval.replay, step 3) and
    the own kernels are needed on new inputs, the forward on the tensors of the probe's fastest seen call
    (so a cache keyed by pointers hits as well as one keyed by values) that passes is ``output-replayed``,
    a result kept from an earlier call. That forward runs first, before the new inputs could push its
    answer out of a small cache; one that passes on new inputs too is named ``own-kernel-unneeded``, not
    a replay (on the H100 a cuDNN convolution's timing made such a kernel a suspect)."""
    import torch

    from engine.eval.replay import credited_words

    ev.stage("ablation")
    started = time.monotonic()
    suspect = getattr(ev, "replay_suspect", None)
    with torch.no_grad():
        seen_passed, seen_how = False, ""
        if suspect is not None:  # first: a new input would give a small cache the chance to push it out
            seen_passed, seen_how = _ablated_forward(ev, reference, new, suspect, fresh=False)
        passed, how = _ablated_forward(ev, reference, new, ev.make_inputs(task, ev.job.seed + ABLATION_SEED), fresh=True)
    replayed = seen_passed and not passed  # right on new inputs without its kernels too: the work is PyTorch's
    outcome = "unneeded" if passed else "replayed" if replayed else "needed"
    record = {"outcome": outcome, "seconds": time.monotonic() - started, "how": how}
    if suspect is not None:
        record["seen"] = {"outcome": "passes" if seen_passed else "fails", "how": seen_how}
    share = ev.result.kernel_share if ev.result.kernel_share is not None else {}
    share["test"], share["ablation"] = "ablation", record
    ev.result.kernel_share = share
    if replayed:
        replay = ev.result.settings.get("replay") or {}
        return ev.guard(
            "output-replayed",
            f"after timing, calls on inputs it had seen took {replay.get('seen_median_ms') or 0:.4f} ms against "
            f"{replay.get('fresh_median_ms') or 0:.4f} ms on new ones{credited_words(replay.get('timed_median_ms'))}; "
            "with every launch of its own kernels switched "
            "off it answered new inputs wrong but still returned the answer for inputs it had seen: it "
            "returns results it kept (a cache keyed by the inputs)",
        )
    if not passed:
        return False
    return ev.guard(
        "own-kernel-unneeded",
        "with every launch of the source's own kernels switched off, the output still matches the "
        "reference: the result does not need them (the work is all in PyTorch)",
    )


def _ablated_forward(ev: Evaluation, reference: Any, new: Any, inputs: Any, fresh: bool) -> tuple[bool, str]:
    """One forward with the own kernels switched off: whether its output passes, and how. ``fresh``:
    inputs the candidate has not seen (called on copies); else the very tensors it has."""
    from engine.eval.ablation import Ablated
    from engine.eval.compare import compare_outputs
    from engine.eval.degenerate import weak_failure

    expected = reference(*clone(inputs))
    ev.sync()
    ev.poison()
    try:
        with Ablated(ev._ablation_switches):
            got = new(*(clone(inputs) if fresh else inputs))
            ev.sync()
        outcome = compare_outputs(expected, got, ev.job.tolerances)
        passed, how = outcome.passed, outcome.message or "its output still passes"
        weak = passed and weak_failure(ev.result.weak_outputs, expected, got, inputs)
        if weak:  # on a weak task zeros pass the value check: the full check decides
            passed, how = False, f"{weak} without them"
    except Exception as error:  # noqa: BLE001 - without its kernels the forward may fail: they are needed
        passed, how = False, f"{type(error).__name__}: {str(error)[:200]}"
    return passed, how


def shapes_refused(ev: Evaluation, task: Any, reference: Any, new: Any) -> bool:
    """The candidate checked at perturbed sizes; True when ``shape-specific`` refuses it."""
    import torch

    from engine.eval import shapes
    from engine.eval.compare import compare_outputs
    from engine.eval.degenerate import weak_failure

    ev.stage("shapes")
    sizes = shapes.perturbable_sizes(task)
    record: dict[str, Any] = {"sizes": sizes, "variants": [], "note": "", "crashed": False}
    ev.result.shapes = record
    if not sizes:
        record["note"] = "get_inputs reads no module-level size that the models do not"
        return False
    started = time.monotonic()
    for label, shape in shapes.variants(sizes):
        entry: dict[str, Any] = {"name": label, "sizes": shape, "status": "skipped", "message": ""}
        record["variants"].append(entry)
        ev.channel.send(PROVISIONAL, result=ev.result.to_dict())  # a crash here keeps this entry
        with shapes.SizesSet(task, shape), torch.no_grad():
            try:
                inputs = ev.make_inputs(task, ev.job.seed + 3000)
                expected = reference(*clone(inputs))
                ev.sync()
            except Exception as error:  # noqa: BLE001 - the reference does not take this shape: skip it
                entry["message"] = f"the reference does not accept it: {type(error).__name__}: {str(error)[:160]}"
                continue
            ev.poison()
            try:
                got = new(*clone(inputs))
                ev.sync()
                outcome = compare_outputs(expected, got, ev.job.tolerances)
                weak = outcome.passed and weak_failure(ev.result.weak_outputs, expected, got, inputs)
                if weak and check_stage.rescued(ev,  # within rounding of the float64 reference (engine.eval.arbiter)
                    reference, expected, [got], inputs, [w["output"] for w in ev.result.weak_outputs],
                    degenerate=" is degenerate " in weak,
                ):
                    weak = ""
                entry["status"] = "correct" if outcome.passed and not weak else "incorrect"
                entry["message"] = weak or outcome.message
                if entry["status"] == "correct" and ev.job.do_timing:
                    entry.update(_speed_at_shape(ev, reference, new, inputs))
            except Exception as error:  # noqa: BLE001 - the candidate's failure at this shape is the finding
                entry["status"], entry["message"] = "error", f"{type(error).__name__}: {str(error)[:200]}"
                if "CUDA" in str(error):
                    break  # the context may be poisoned: later shapes would fail for that alone
    record["seconds"] = time.monotonic() - started
    return _shape_finding(ev, record)


#: a shape's speed is indicative: a few calls on one input set, each flushed, beside the reference's
SHAPE_TIMING_TRIALS = 20
SHAPE_TIMING_BUDGET_S = 2.0


def _speed_at_shape(ev: Evaluation, reference: Any, new: Any, inputs: Any) -> dict[str, Any]:
    """The candidate's speedup at a shape it was correct at, with its bootstrap interval (the report's
    "speed at each tested shape"): fewer calls than the task's own timing, so a guide, not the verdict."""
    from engine.eval.timing import TimingPlan, make_timer, time_models

    plan = TimingPlan(min_trials=SHAPE_TIMING_TRIALS, budget_s=SHAPE_TIMING_BUDGET_S, warmup_calls=2, block=5)
    try:
        timing = time_models(lambda: new(*inputs), lambda: reference(*inputs), ev.device, plan,
                             make_timer(ev.device, ev.l2))  # fmt: skip
    except Exception as error:  # noqa: BLE001 - no speed at this shape is only a missing figure
        return {"timing_note": f"not timed: {type(error).__name__}: {str(error)[:120]}"}
    if timing is None or timing.candidate.median_ms <= 0:
        return {}
    return {
        "speedup": timing.reference.median_ms / timing.candidate.median_ms,
        "speedup_interval": timing.speedup_interval,
        "kernel_ms": timing.candidate.median_ms,
        "reference_ms": timing.reference.median_ms,
        "timed_calls": timing.candidate.n,
    }


def _shape_finding(ev: Evaluation, record: dict[str, Any]) -> bool:
    from engine.eval.shapes import summary

    failed = [v for v in record["variants"] if v["status"] in ("incorrect", "error")]
    if not failed:
        return False
    first = failed[0]
    sizes = ", ".join(f"{k}={v}" for k, v in first["sizes"].items())
    return ev.guard(
        "shape-specific", f"{summary(record)}; at {sizes} ({first['name']}): {first['message'][:300]}"
    )
