"""Evaluate a candidate kernel against its task in a fresh, isolated worker process: the entry points.

``evaluate``/``evaluate_files`` run the static guard, then (unless it refused) one worker under
:class:`~engine.eval.supervisor.WorkerSupervisor`, and finish the result the same way for every caller
(guard settings recorded, the review flags, which side failed). ``check_task`` runs the task alone.
The options' device and guard settings are the front end's, used as they are: the device was resolved
and the guard settings validated before the options were made (engine.eval.options).

"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.eval import forkserver, jobdirs, plausibility, spare, stagetimes
from engine.eval.build import makers
from engine.eval.build.extension import default_cache_root
from engine.eval.options import EvalEvent, EvalOptions, EvaluationError
from engine.eval.result import CANDIDATE_SIDE, HARNESS_SIDE, REFERENCE_SIDE, REJECTED, EvalResult
from engine.eval.supervisor import KERNEL_FILE, WorkerSupervisor
from engine.guard.policy import GuardSettings
from engine.guard.rules import LEFT_TO_BUILD
from engine.profile.kernels import kernel_names_from_source

__all__ = [
    "EvalEvent", "EvalOptions", "EvaluationError", "check_task", "evaluate", "evaluate_files", "warm_worker",
]  # fmt: skip


def evaluate_files(
    task_path: str | Path,
    kernel_path: str | Path,
    options: EvalOptions | None = None,
    on_event: Callable[[EvalEvent], None] | None = None,
) -> EvalResult:
    """Evaluate ``kernel_path`` against the task in ``task_path``."""
    task_path, kernel_path = Path(task_path), Path(kernel_path)
    for label, path in (("task", task_path), ("kernel", kernel_path)):
        if not path.is_file():
            raise EvaluationError(f"no such {label} file: {path}")
    return evaluate(
        task_path.read_text(),
        kernel_path.read_text(),
        options,
        on_event,
        task_name=task_path.stem,
        kernel_name=kernel_path.name,
    )


def evaluate(
    task_source: str,
    kernel_source: str,
    options: EvalOptions | None = None,
    on_event: Callable[[EvalEvent], None] | None = None,
    task_name: str = "task",
    kernel_name: str = KERNEL_FILE,
    worker: spare.Spare | None = None,
    gate: Callable[[], None] | None = None,
) -> EvalResult:
    """Evaluate a candidate given as source text; blocks until the verdict (or a timeout).

    ``kernel_name``: the file name the candidate is written under for the worker, so Python's own
    messages (``SyntaxError: … (mykernel.py, line 3)``, tracebacks) name the user's file. ``worker``:
    one the caller started for this evaluation (``start_worker_for``), used or killed here. ``gate``: the
    worker builds first and waits, launching nothing on the GPU, until ``gate()`` has returned (the caller then holds
    the GPU; engine.eval.pipe, GPU_WAIT); never called when the evaluation ends before that.
    """
    options = options or EvalOptions()
    device, guard = options.device, options.guard
    started = time.monotonic()
    findings = static_findings(kernel_source, device, guard) if options.guards and options.static_guard else []
    guard_seconds = time.monotonic() - started
    refusals = [f for f in findings if f["severity"] == "refuse" and not f["relaxed"] and f["rule"] not in LEFT_TO_BUILD]
    if refusals:
        spare.release(worker)
        result = EvalResult(status=REJECTED, stage="guard", device=device, findings=findings)
        result.messages = [
            f"refused by the static guard [{f['rule']}] at line {f['line']}: {f['message']}" for f in refusals
        ]
    else:
        cache_root = _cache_root(options)
        waiting = spare.claim(worker, options, cache_root) if worker else spare.take(options, cache_root)
        job_dir = waiting.job_dir if waiting else jobdirs.new_job_dir(shared=forkserver.kept(options))
        try:
            kernel_names = kernel_names_from_source(kernel_source) if device == "cuda" else []
            run = WorkerSupervisor(
                job_dir, options, cache_root, on_event, kernel_names, spare=waiting.worker if waiting else None, gate=gate
            )  # fmt: skip
            result = run.execute(task_source, kernel_source, task_name, kernel_name)
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        if options.use_pch and options.make_pch:  # a header the worker asked for is made now, in the background
            makers.start_queued(cache_root, options.sandbox)
        result.findings = [*findings, *result.findings]
        name_static_lines(result, findings)
    result.durations["guard"] = guard_seconds
    result.relaxed_rules = sorted(set(guard.relax) | {f["rule"] for f in result.findings if f.get("relaxed")})
    result.guard_policy = guard.policy
    result.guard_refuse = list(guard.refuse)
    add_review_flags(result, options)
    mark_failed_side(result)
    if options.compile_baselines and result.ok and result.timing is not None:
        from engine.eval.baselines import TimingSettings, run_baselines

        started_baselines = time.monotonic()
        plan = TimingSettings(options.timing.min_trials, options.timing.budget_s, options.seed)
        result.baselines = run_baselines(
            task_source, device, options.compile_baselines, cache_root=_cache_root(options), plan=plan,
            gpu_index=options.gpu_index, tolerances=options.tolerances or None,
        )  # fmt: skip
        result.durations["baselines"] = time.monotonic() - started_baselines
    result.kernel_sha256 = hashlib.sha256(kernel_source.encode()).hexdigest()
    result.task = task_name
    result.device = device
    result.settings = {**options.settings(), **result.settings}
    result.durations.setdefault("total", time.monotonic() - started)
    result.durations[stagetimes.WALL] = (
        time.monotonic() - started
    )  # what no stage explains shows (stagetimes)
    return result


def add_review_flags(result: EvalResult, options: EvalOptions) -> None:
    """What asks a human to look at a correct kernel (ARCHITECTURE.md §3, "Review flags"): a speedup
    above the threshold, a task whose exact answer is constant to rounding, a time below the floor."""
    if result.speedup is not None and result.speedup > options.flag_speedup_above and result.ok:
        result.flags.append(
            f"speedup {result.speedup:.2f}x is above the {options.flag_speedup_above:g}x review threshold: "
            "check by hand that the kernel does the whole computation"
        )
    if result.ok and (result.arbiter or {}).get("constant_to_rounding"):
        from engine.eval.arbiter import review_flag

        result.flags.append(review_flag(result.arbiter or {}))
    plausibility.judge(result, options.flag_below_floor)  # a time below what the GPU allows: flagged too


# Runtime rules whose finding the static guard may have seen the cause of, and the static rules that see it.
STATIC_CAUSES = {"precision-changed": ("torch-global-state", "monkeypatch-torch")}


def name_static_lines(result: EvalResult, static: list[dict[str, Any]]) -> None:
    """A runtime refusal whose cause the static guard saw (relaxed or warned) names that line."""
    for finding in result.findings:
        rules = STATIC_CAUSES.get(str(finding.get("rule")))
        if finding.get("source") != "runtime" or not rules:
            continue
        seen = [f"line {f['line']}: {f['message']}" for f in static if f["rule"] in rules and f.get("line")]
        if not seen:
            continue
        note = f" (the static guard saw {'; '.join(seen)})"
        if result.messages and result.messages[-1].endswith(finding["message"]):
            result.messages[-1] += note
        finding["message"] += note


def mark_failed_side(result: EvalResult) -> None:
    """Blame the right side of a failure the worker could not (a timeout or crash, a static refusal).

    A worker that dies or runs over in the ``reference`` stage was running task code only; a harness
    fault blames neither side.
    """
    if result.harness_failed:
        result.failed_side, result.task_error = HARNESS_SIDE, False
        return
    if result.ok or result.failed_side is not None:
        return
    if result.stage == "reference":
        result.failed_side, result.task_error = REFERENCE_SIDE, True
    else:
        result.failed_side = CANDIDATE_SIDE


def check_task(task_source: str, options: EvalOptions | None = None, task_name: str = "task") -> EvalResult:
    """Run only the worker's reference check (no candidate): ``task_error`` says whether the task is broken.

    The loop calls it before its first LLM request, so a broken task costs no tokens.
    """
    options = options or EvalOptions()
    device = options.device
    cache_root = _cache_root(options)
    job_dir = jobdirs.new_job_dir("cudaforge-taskcheck-", shared=forkserver.kept(options))
    try:
        run = WorkerSupervisor(job_dir, options, cache_root, None, reference_only=True)
        result = run.execute(task_source, "", task_name)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
    mark_failed_side(result)
    if (
        not result.ok and not result.harness_failed
    ):  # any other failure before a candidate exists is the task's
        result.failed_side, result.task_error = REFERENCE_SIDE, True
    result.task, result.device = task_name, device
    return result


def _cache_root(options: EvalOptions) -> Path:
    cache_root = (Path(options.cache_root) if options.cache_root else default_cache_root()).resolve()
    cache_root.mkdir(parents=True, exist_ok=True)
    return cache_root


def warm_worker(options: EvalOptions) -> None:
    """Start the worker of the next evaluation with these options now (engine.eval.spare): the loop calls
    this before the Coder writes, so the evaluation that follows starts with torch imported."""
    with contextlib.suppress(EvaluationError, OSError):  # the evaluation starts its own worker and says why
        spare.prestart(options, _cache_root(options))


def start_worker_for(options: EvalOptions) -> spare.Spare | None:
    """A worker started now for one evaluation with exactly these options that the caller is about to
    run (engine.explore.devices starts a timing's while it waits for its GPU): the caller's own, passed
    as ``evaluate(..., worker=)`` or given up with ``spare.release``. None when it could not start."""
    with contextlib.suppress(EvaluationError, OSError):  # the evaluation starts its own worker and says why
        return spare.start(options, _cache_root(options))
    return None


def static_findings(kernel_source: str, device: str, guard: GuardSettings) -> list[dict[str, Any]]:
    """The static guard's findings for the source under the run's guard settings, as result dicts
    (relaxed ones marked)."""
    from engine.guard.static import check_source_under

    findings = check_source_under(kernel_source, "cuda" if device == "cuda" else "cpu", guard)
    return [{**f.to_dict(), "source": "static"} for f in findings]
