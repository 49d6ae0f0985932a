"""Put accepted kernels back into the user's model and prove the whole model (ARCHITECTURE.md §9).

1. **Plan** (the model process): which modules each kernel replaces. A module path replaces that module;
   a task (its file, a name from an extraction's manifest, or a session's ``task.py``) replaces every
   module whose task has that fingerprint (``engine.model.taskgen``), so a kernel only ever goes where
   the task it was written for came from.
2. **Each kernel against its task**, by the evaluator, as ``cudaforge eval`` would (static guard, sandbox,
   defences, timing): its per-module speedup. A kernel that is not correct stops here.
3. **The whole model**: the user's model as a task against the same model with every kernel swapped in
   and verified (``engine.model.wholemodel``), by the same evaluator (the candidate is cudaforge's own
   text around kernels the guard already read, so only its static guard is off), timed end to end, and
   with ``compile_baselines`` beside torch.compile. When it is not correct, each module is tried alone to
   name the swap that broke it. Nothing is exported unless the whole model passed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.eval.baselines import speedup_against
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalEvent, EvalOptions
from engine.eval.result import EvalResult
from engine.eval.tolerances import DEFAULT_TOLERANCES
from engine.model import wholemodel
from engine.model.client import run_job
from engine.model.noise import NOISE_FACTOR, tolerance
from engine.model.spec import ModelError, ModelSpec
from engine.model.taskgen import read_fingerprint

CULPRIT_PATHS = 4  # a failing task with more modules is named as a whole, not searched path by path


@dataclass
class KernelChoice:
    """A kernel and where it goes: a module ``path``, or every module of the task with ``fingerprint``."""

    label: str  # what the user typed, for messages
    kind: str  # "path" or "fingerprint"
    value: str
    kernel_source: str
    kernel_name: str = "kernel.py"


@dataclass
class ApplyReport:
    """What ``apply`` found: per kernel, the whole model, and where it stopped (``failure``)."""

    spec: dict[str, Any]
    kernels: list[dict[str, Any]] = field(default_factory=list)
    whole: dict[str, Any] | None = None
    failure: str | None = None
    broke: list[str] = field(default_factory=list)
    exported: str | None = None
    tolerance: dict[str, Any] | None = None  # the whole-model check's bar and why (engine.model.noise)
    # whose the failure is: "kernel" (refused), "task" (the task or the model failed on its own), "harness"
    failed: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def choice_for_task_file(label: str, task_path: Path, kernel_source: str, kernel_name: str) -> KernelChoice:
    stamp, intact = read_fingerprint(task_path.read_text())
    if stamp is None:
        raise ModelError(f"{task_path} is not a task cudaforge extract wrote (no '# cudaforge-task:' line)")
    if not intact:
        raise ModelError(f"{task_path} was edited after cudaforge extract wrote it: its fingerprint no longer matches")
    return KernelChoice(label, "fingerprint", stamp, kernel_source, kernel_name)


def interval(result: EvalResult) -> tuple[float, float] | None:
    """The speedup's quartile interval: reference p25 ÷ candidate p75 up to reference p75 ÷ candidate p25."""
    timing = result.timing
    if timing is None or not timing.candidate.p25_ms or not timing.candidate.p75_ms:
        return None
    return timing.reference.p25_ms / timing.candidate.p75_ms, timing.reference.p75_ms / timing.candidate.p25_ms


def summary(result: EvalResult) -> dict[str, Any]:
    """The figures apply reports of one evaluation."""
    timing = result.timing
    low_high = interval(result)
    return {
        "status": result.status,
        "message": result.messages[-1] if result.messages and not result.ok else "",  # the verdict is the last
        "speedup": result.speedup,
        "interval": list(low_high) if low_high else None,
        "candidate_ms": timing.candidate.median_ms if timing else None,
        "reference_ms": timing.reference.median_ms if timing else None,
        "baselines": {
            mode: {"speedup": speedup_against(result.speedup, b), "compiled_ms": b.get("compiled_ms"), "eager_ms": b.get("eager_ms"), "error": b.get("error")}
            for mode, b in (result.baselines or {}).items()
        },
        "kernel_share": (result.kernel_share or {}).get("share"),
        "result": result.to_dict(),
    }


def _plans(spec: ModelSpec, choices: list[KernelChoice], progress: Callable[[str], None]) -> tuple[list[dict[str, Any]], list[str], dict[str, Any] | None]:
    answer = run_job("plan", spec, progress, targets=[{"kind": c.kind, "value": c.value} for c in choices])
    plans = []
    for choice, plan in zip(choices, answer["plans"], strict=True):
        if "error" in plan:
            raise ModelError(f"{choice.label}: {plan['error']}")
        plans.append(plan["task"])
    seen: dict[str, str] = {}
    for choice, plan in zip(choices, plans, strict=True):
        for path in plan["paths"]:
            if path in seen:
                raise ModelError(f"{path} would be replaced by both {seen[path]} and {choice.label}")
            seen[path] = choice.label
    return plans, answer.get("keywords", []), answer.get("noise")


def _swaps(choices: list[KernelChoice], plans: list[dict[str, Any]], only: str | None = None) -> list[wholemodel.Swap]:
    swaps = []
    for choice, plan in zip(choices, plans, strict=True):
        paths = [p for p in plan["paths"] if only is None or p == only]
        if paths:
            swaps.append(wholemodel.Swap(plan["name"], paths, list(plan["inputs"]), dict(plan["constants"]), plan["source"], choice.kernel_source))
    return swaps


def apply(
    spec: ModelSpec, choices: list[KernelChoice], options: EvalOptions,
    progress: Callable[[str], None] = lambda _: None, on_event: Callable[[EvalEvent], None] | None = None,
) -> tuple[ApplyReport, list[wholemodel.Swap], list[str], EvalOptions]:  # fmt: skip
    """Plan, judge each kernel, then the whole model; the report, the swaps, the batch's keyword names and
    the whole-model check's options (what an export is checked with again)."""
    report = ApplyReport(spec=spec.to_dict())
    plans, keywords, noise = _plans(spec, choices, progress)
    for choice, plan in zip(choices, plans, strict=True):
        progress(f"evaluating {choice.label} against its task {plan['name']} ({len(plan['paths'])} module(s))")
        result = evaluate(plan["source"], choice.kernel_source, options, on_event, task_name=plan["name"], kernel_name=choice.kernel_name)
        entry = {"label": choice.label, "task": plan["name"], "paths": plan["paths"], **summary(result)}
        report.kernels.append(entry)
        if not result.ok:
            report.failed = whose(result)
            if report.failed == "kernel":
                report.failure = f"{choice.label} is {result.status} on its task {plan['name']}: {entry['message'] or result.status}"
            else:
                report.failure = f"the task {plan['name']} was not judged ({_WHOSE[report.failed]}): {entry['message'] or result.status}"
            return report, [], keywords, options
    swaps = _swaps(choices, plans)
    default = {**DEFAULT_TOLERANCES, **options.tolerances}[spec.torch_dtype]
    used = tolerance(default, noise)
    report.tolerance = {"dtype": spec.torch_dtype, "default": default, "noise": noise, "used": used, "factor": NOISE_FACTOR}
    whole_options = dataclasses.replace(options, static_guard=False, shapes=False, tolerances={**options.tolerances, spec.torch_dtype: used})
    task = wholemodel.whole_task(spec, keywords)
    progress(f"checking and timing the whole model with {sum(len(s.paths) for s in swaps)} module(s) replaced")
    result = evaluate(task, wholemodel.candidate(spec, swaps, keywords), whole_options, on_event, task_name="whole_model", kernel_name="whole_model_kernels.py")
    report.whole = summary(result)
    if not result.ok:
        report.failed = whose(result)
    if report.failed in ("task", "harness"):  # no kernel's fault: no kernel is searched for or blamed
        report.failure = f"the whole-model check did not judge the kernels ({_WHOSE[report.failed]}): {report.whole['message'] or result.status}"
    elif not result.ok:
        report.broke = _culprits(spec, choices, plans, keywords, whole_options, progress)
        named = f"; the swap of {', '.join(report.broke)} breaks it" if report.broke else ""
        report.failure = f"the whole model with the kernels is {result.status}: {report.whole['message'] or result.status}{named}"
    return report, swaps, keywords, whole_options


_WHOSE = {"task": "the task itself failed, in the evaluation's sandbox", "harness": "cudaforge's own fault"}


def whose(result: EvalResult) -> str:
    """Whose a failed evaluation's failure is: ``harness`` (cudaforge's), ``task`` (the task or model's own), else ``kernel``."""
    if result.harness_failed:
        return "harness"
    return "task" if result.task_error else "kernel"


def _culprits(spec: ModelSpec, choices: list[KernelChoice], plans: list[dict[str, Any]], keywords: list[str], options: EvalOptions, progress: Callable[[str], None]) -> list[str]:
    """The module paths whose swap makes the whole model fail: each task's swaps alone (one evaluation per
    task, none when there is only one), then each path alone within a failing task of a few paths."""
    task = wholemodel.whole_task(spec, keywords)
    check = dataclasses.replace(options, do_timing=False, compile_baselines=(), trials=min(options.trials, 2))

    def fails(paths: list[str], what: str) -> bool:
        progress(f"finding the swap that breaks the model: {what}")
        swaps = [s for s in (_swaps(choices, plans, only=p) for p in paths) for s in s]
        merged: dict[str, wholemodel.Swap] = {}
        for swap in swaps:
            merged.setdefault(swap.task, dataclasses.replace(swap, paths=[])).paths.extend(swap.paths)
        alone = evaluate(task, wholemodel.candidate(spec, list(merged.values()), keywords), check, task_name="whole_model", kernel_name="whole_model_kernels.py")
        return not alone.ok

    groups = [plan["paths"] for plan in plans]
    if len(groups) > 1:
        groups = [g for g, plan in zip(groups, plans, strict=True) if fails(g, f"{plan['name']}'s {len(g)} module(s) alone")]
    broke: list[str] = []
    for paths in groups:
        if len(paths) == 1 or len(paths) > CULPRIT_PATHS:
            broke += paths
            continue
        alone = [p for p in paths if fails([p], f"{p} alone")]
        broke += alone or paths
    return broke
