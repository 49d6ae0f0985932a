"""Whose fault a failure is, inside the worker (ARCHITECTURE.md §3, "Harness faults"): the kernel's, the
task's or cudaforge's own. An exception no stage caught, an out-of-memory beside other processes, the build
hook's own failure, an extension that failed to load while the candidate went on: each is judged here, so
``Evaluation`` keeps only the order of its stages.
"""

from __future__ import annotations

from typing import Any

from engine.eval import faults
from engine.eval.result import REFERENCE_SIDE, RUNTIME_ERROR, EvalResult, error_info

Evaluation = Any  # engine.eval.worker.Evaluation, which imports this module (no import back: no cycle)


def out_of_memory(ev: Evaluation, error: BaseException) -> dict[str, int] | None:
    """Record the GPU's memory at an OOM; the numbers when others held enough to be the cause."""
    memory = faults.gpu_memory(ev.device)
    ev.result.memory = {**(ev.result.memory or {}), "at_oom": memory}
    return memory if faults.contention(memory) else None



def unexpected(ev: Evaluation, error: BaseException) -> EvalResult:
    """An exception no stage caught: whose fault it is decides the status (engine.eval.faults)."""
    stage = ev.result.stage
    text = f"{type(error).__name__}: {error}"
    fault = our_fault(ev, error)
    if fault is not None:
        return ev.harness(fault.kind, fault.message, error)
    if faults.is_oom(error):
        shared = out_of_memory(ev, error)
        if shared:
            return ev.harness(
                faults.OOM_CONTENTION,
                f"out of GPU memory in stage {stage} while other processes held most of it "
                f"({faults.describe_memory(shared)})",
                error,
            )
    candidate = ev.candidate_ran and (
        faults.is_oom(error)
        or faults.is_cuda_error(error)
        or faults.passes_through(error, ev.job.kernel_path)
    )
    if candidate:
        ev.result.error = error_info(error)
        return ev.finish(RUNTIME_ERROR, f"evaluation failed in stage {stage}: {text}")
    if faults.passes_through(error, ev.job.task_path):  # the task's own code raised
        ev.result.error = error_info(error)
        ev.result.failed_side, ev.result.task_error = REFERENCE_SIDE, True
        return ev.finish(RUNTIME_ERROR, f"the task's code failed in stage {stage}: {text}")
    kind = faults.IMPORT if isinstance(error, ImportError) else faults.INTERNAL
    return ev.harness(kind, f"stage {stage}: {text}", error)



def our_fault(ev: Evaluation, error: BaseException) -> faults.HarnessFault | None:
    """The build hook's own recorded failure, when it is what went wrong (during the build, or in
    ``error``'s chain later). Only the object the hook kept counts: a candidate that raises a
    HarnessFault of its own is not believed."""
    recorder = getattr(ev, "recorder", None)
    ours = recorder.fault if recorder is not None else None
    if ours is not None and (ev.result.stage == "build" or faults.in_chain(error, ours)):
        return ours
    return None



def record_memory(ev: Evaluation) -> None:
    """The allocator's peaks over the whole evaluation (host-side counters: safe after a fault)."""
    import torch

    if ev.device.type != "cuda" or not torch.cuda.is_initialized():
        return
    try:
        peaks = {
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(ev.device)),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(ev.device)),
        }
    except Exception:  # noqa: BLE001 - measuring must never change the verdict
        return
    ev.result.memory = {**peaks, **(ev.result.memory or {})}



def extension_failed(ev: Evaluation) -> bool:
    """A ``load_inline`` call failed, no later one worked, and the candidate went on (it caught the
    error): whatever it returns was not computed by that extension. True when that ends the
    evaluation (a refusal, or a harness fault when the machine could not build)."""
    recorder = getattr(ev, "recorder", None)
    failed = getattr(recorder, "failed", [])
    if not failed or any(f["rule"] == "extension-load-failed" for f in ev.result.findings):
        return False
    for error in getattr(recorder, "failed_errors", []):
        environment = faults.environment_problem(error)
        if environment:  # the machine could not build (no toolkit, a full disk): not the candidate's doing
            ev.harness(faults.ENVIRONMENT, f"the extension could not be built here: {environment}", error)
            return True
    ledger = getattr(ev, "ledger", None)
    return ev.guard(
        "extension-load-failed",
        f"load_inline failed for {failed_loads(failed, getattr(ledger, 'first_error', None))}, and the "
        "candidate caught the error and went on: its results come from some other code path (a fallback), "
        "not from that extension",
    )


FAILED_LOADS_SHOWN = 3


def failed_loads(failed: list[str], first_error: str | None) -> str:
    """The failed ``load_inline`` calls, the first few by name and the rest counted, then the compiler's
    first error: a UNet whose twenty blocks each caught the same failure made one line of twenty."""
    shown = "; ".join(failed[:FAILED_LOADS_SHOWN])
    if len(failed) > FAILED_LOADS_SHOWN:
        shown += f"; and {len(failed) - FAILED_LOADS_SHOWN} more"
    return f"{shown} [{first_error}]" if first_error else shown
