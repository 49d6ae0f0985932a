"""The profile of a user's model (child process): per module path, calls, shares, shapes and headroom.

The JSON (``cudaforge profile --json``; ARCHITECTURE.md §9) has the model's ``latency`` (end-to-end, timed
alone) and ``device_ms`` (its operators' device time per forward), and ``modules``: one entry per module
path (the root is ``""``) with ``path``, ``type``, ``calls``, ``share`` ``{"self", "total"}`` (fractions
of ``device_ms``), ``self_ms``/``total_ms``, the first call's ``args``/``kwargs``/``output`` described by
``engine.model.values``, ``params``, ``flops``, ``bytes`` and, where the GPU is in the spec table,
``floor`` and ``headroom`` (``engine.model.headroom``).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from engine.model import headroom, timing
from engine.model.load import Loaded, run_once
from engine.model.spec import ModelSpec
from engine.model.trace import ModuleRecord, trace
from engine.profile.specs import GpuSpec, lookup


def gpu_spec(device: torch.device) -> tuple[str | None, GpuSpec | None]:
    if device.type != "cuda":
        return None, None
    name = torch.cuda.get_device_name(device)
    return name, lookup(name, torch.cuda.get_device_capability(device))


def module_entry(record: ModuleRecord, times: dict[str, Any], dtype: str, spec: GpuSpec | None) -> dict[str, Any]:
    device_ms = times["device_ms"] or 0.0
    self_ms = times["self_ms"].get(record.path, 0.0)
    total_ms = times["total_ms"].get(record.path, 0.0)
    bytes_moved = record.io_bytes + record.param_bytes
    floor = headroom.floor(bytes_moved, record.flops, dtype, spec)
    entry = record.to_dict()
    entry.update(
        leaf=record.leaf,
        self_ms=self_ms,
        total_ms=total_ms,
        share={"self": self_ms / device_ms if device_ms else 0.0, "total": total_ms / device_ms if device_ms else 0.0},
        bytes=bytes_moved,
        floor=floor,
        headroom=headroom.headroom(total_ms, floor),
    )
    return entry


def profile(spec: ModelSpec, loaded: Loaded, progress: Any, passes: int = 3) -> tuple[dict[str, Any], dict[str, ModuleRecord]]:
    """Trace, time per module and end to end; the profile as a JSON-able dict, and the trace's records
    (extraction reads them rather than tracing the model again)."""
    device = torch.device(spec.device)
    seconds: dict[str, float] = {}
    started = time.monotonic()
    run_once(loaded, spec)  # a clear error for inputs that do not run, before any hook is set
    progress("tracing the model's modules")
    records, _ = trace(loaded.model, loaded.args, loaded.kwargs)
    seconds["trace"] = time.monotonic() - started
    started = time.monotonic()
    progress(f"timing {len(records)} modules under the profiler ({passes} forwards)")
    times = timing.module_times(loaded.model, loaded.args, loaded.kwargs, device, passes=passes)
    seconds["modules"] = time.monotonic() - started
    started = time.monotonic()
    progress("timing the whole forward")
    latency = timing.latency(loaded.model, loaded.args, loaded.kwargs, device)
    seconds["latency"] = time.monotonic() - started
    gpu, row = gpu_spec(device)
    modules = [module_entry(r, times, spec.torch_dtype, row) for r in records.values()]
    profiled = {
        "model": spec.target,
        "spec": spec.to_dict(),
        "device": spec.device,
        "gpu": gpu,
        "gpu_spec": row.key if row else None,
        "dtype": spec.dtype,
        "torch": torch.__version__,
        "latency": latency,
        "device_ms": times["device_ms"],
        "passes": times["passes"],
        "modules": modules,
        "seconds": seconds,
    }
    return profiled, records
