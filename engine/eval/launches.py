"""The launch check: which kernels a forward launches and whose they are (ARCHITECTURE.md §3, "Defences").

On CUDA one forward of the candidate (after a warm-up) and one of the reference run under the PyTorch
profiler. A launched kernel is the candidate's own only when engine.guard.binary finds its full signature
compiled into one of the candidate's extensions and the reference does not launch it too; name matching
against the source never counts. Then:

- no own kernel launched: ``no-own-kernel``;
- otherwise the share of device time decides (``own-kernel-trivial``), unless every CUDA extension was
  split-built, where the ablation stage decides (engine.eval.late);
- the profiler or ``nm`` unavailable: ``kernel-launch-unverified`` (a warning), never a refusal.

The measured launches are kept per (task, kernel, torch, GPU): starting the profiler costs seconds, so a
kernel evaluated again does not measure them again. The attribution is made again each time, from the
extensions this evaluation loaded.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

Evaluation = Any  # engine.eval.worker.Evaluation, which imports this module (no import back: no cycle)

SHARE_REPEATS = 3  # forwards profiled for the own-kernel share (after one warm-up)
_MEMO_VERSION = "launch-checks-v3"  # v3: the reference's launches kept beside the candidate's times


def memo_path(ev: Evaluation) -> Path:
    """Where the launches of this (task, kernel, GPU, torch) are kept."""
    import torch

    key = hashlib.sha256(
        "\0".join(
            [
                Path(ev.job.task_path).read_text(),
                Path(ev.job.kernel_path).read_text(),
                torch.__version__,
                torch.cuda.get_device_name(ev.device),
            ]
        ).encode()
    ).hexdigest()[:24]
    return Path(ev.job.cache_root) / _MEMO_VERSION / f"{key}.json"


def _measure(ev: Evaluation, task: Any, reference: Any, new: Any) -> dict[str, Any] | None:
    """``{"candidate": {name: [ms, launches]}, "reference": [names]}``, memoized; None (and a warning)
    when the profiler cannot list launches here."""
    import torch

    from engine.guard import share

    memo = memo_path(ev)
    try:
        return json.loads(memo.read_text())
    except (OSError, ValueError):
        pass
    inputs = ev.make_inputs(task, ev.job.seed)
    try:
        with torch.no_grad():
            new(*inputs)  # warm-up: library autotuning and first-call allocations stay out of the share
            times = share.cuda_kernel_times(lambda: new(*inputs), repeats=SHARE_REPEATS)
            theirs = share.cuda_kernel_times(lambda: reference(*inputs), repeats=1)
    except Exception as error:  # no CUPTI here: say so rather than refuse
        ev.guard("kernel-launch-unverified", f"the PyTorch profiler could not list launches: {error}")
        return None
    _record_warmup(ev)
    measured = {"candidate": {k: list(v) for k, v in times.items()}, "reference": list(theirs)}
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(json.dumps(measured))
    return measured


def _record_warmup(ev: Evaluation) -> None:
    """The profiler warm-up's own seconds (engine.guard.profiler_thread), kept from this thread: the
    warm-up ran before the sessions just measured, on the profiler's thread, while the worker went on."""
    warming = getattr(ev, "profiler_warming", None)
    if warming is not None and warming.done() and warming.exception() is None:
        ev.result.durations["profiler_warmup"] = warming.result()


def _libraries(ev: Evaluation) -> list[str]:
    """The shared libraries of every extension the candidate loaded that can hold CUDA kernels."""
    from engine.eval.ablation import CUDA_PATHS

    recorder = getattr(ev, "recorder", None)
    if recorder is None:
        return []
    libraries = []
    for module, path in zip(recorder.modules, recorder.module_paths, strict=True):
        # load_inline(is_python_module=False) returns the library's path itself
        library = module if isinstance(module, str) else getattr(module, "__file__", None)
        if path in CUDA_PATHS and library:
            libraries.append(str(library))
    return libraries


def launch_refused(ev: Evaluation, task: Any, reference: Any, new: Any) -> bool:
    """Attribute one forward's kernels and apply the rules above; True when the candidate is refused."""
    from engine.eval import late
    from engine.guard import binary, share

    names = list(ev.job.kernel_names)
    if ev.device.type != "cuda" or not names:
        return False
    measured = _measure(ev, task, reference, new)
    if measured is None:
        return False
    times = {name: (float(ms), int(count)) for name, (ms, count) in measured["candidate"].items()}
    launched = list(times)
    try:
        functions = binary.extension_functions(_libraries(ev))
    except binary.AttributionUnavailable as error:
        ev.guard("kernel-launch-unverified", f"the candidate's kernels could not be read from its binary: {error}")
        return False
    who = binary.attribute(launched, functions, names, measured["reference"])
    record = share.share_record(share.classify_kernels(times, who.own, SHARE_REPEATS), share.CUDA_METHOD)
    record["attribution"] = "binary"
    ev.result.kernel_share = record
    ev.result.messages.append(f"kernels launched by one forward: {', '.join(launched) or 'none'}")
    note = who.note()
    if note:
        ev.result.messages.append(note)
    if not who.own:
        seen = f"; {note}" if note else ""
        return ev.guard(
            "no-own-kernel",
            "no kernel compiled into the candidate's extensions launched in a forward (its source's kernels: "
            f"{', '.join(names)}); launched: {', '.join(launched) or 'none'}{seen}",
        )
    if late.ablation_applies(ev):  # the ablation stage decides whether the own kernels are needed
        record["test"] = "ablation"
        return False
    record["test"] = "share"
    trivial = share.trivial_share_message(record)
    return bool(trivial) and ev.guard("own-kernel-trivial", trivial or "")


def own_launches(ev: Evaluation) -> Any:
    """A function telling which of the candidate's own kernels one call launches (engine.eval.replay's
    step 3), or None where that cannot be told: not CUDA, or no kernel of this evaluation attributed to
    the candidate's binary. The function itself answers None when the profiler fails, and
    ``replay.DEFERRED`` where the ablation stage will tell (every extension split-built, a reference
    that leaves its inputs alone): one call there, where the profiler would start cold."""
    from engine.eval import late, replay

    record = ev.result.kernel_share or {}
    own = {row["name"] for row in record.get("kernels", []) if row.get("own")}
    if ev.device.type != "cuda" or record.get("attribution") != "binary" or not own:
        return None
    if ev.job.guards and late.ablation_applies(ev) and not ev.reference_mutates:
        return lambda call: replay.DEFERRED

    def launched(call: Any) -> list[str] | None:
        from engine.guard import share

        try:
            times = share.cuda_kernel_times(call, repeats=1)
        except Exception:  # noqa: BLE001 - no evidence: the probe falls back on time
            return None
        return sorted(name for name in times if name in own)

    return launched
