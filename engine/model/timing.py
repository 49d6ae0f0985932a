"""Where a model's time goes, per module path, and how long one forward takes.

Two measurements, each in its own passes (ARCHITECTURE.md §9):

* **Per-module device time.** Forward hooks open a ``record_function`` range named after each module's
  path; under the PyTorch profiler every operator's device time (on CUDA the kernels it launched, on CPU
  its own CPU time) goes to the innermost range around it (``self``) and to every range around that
  (``total``). The hooks' own Python time is never counted: only operators' time is.
* **End-to-end latency.** Forwards timed without the profiler or the hooks (CUDA events on a GPU, the
  host clock on CPU), after warm-up, until a small budget is spent; median and quartiles.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function

RANGE = "cf.module::"


def _forward(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with torch.no_grad():
        return model(*args, **kwargs)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def latency(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], device: torch.device,
    budget_s: float = 3.0, min_runs: int = 5, max_runs: int = 100,
) -> dict[str, Any]:  # fmt: skip
    """Median and quartiles of one forward's time in ms (CUDA events on a GPU, else the host clock)."""
    for _ in range(2):
        _forward(model, args, kwargs)
    _sync(device)
    times: list[float] = []
    started = time.monotonic()
    while len(times) < min_runs or (len(times) < max_runs and time.monotonic() - started < budget_s):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            _forward(model, args, kwargs)
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        else:
            tick = time.perf_counter()
            _forward(model, args, kwargs)
            times.append((time.perf_counter() - tick) * 1e3)
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    method = "cuda-events" if device.type == "cuda" else "host-clock"
    return {"median_ms": statistics.median(times), "q1_ms": quartiles[0], "q3_ms": quartiles[2], "runs": len(times), "method": method}


def _event_time_us(event: Any, device: torch.device) -> float:
    if device.type == "cuda":
        return float(sum(getattr(k, "duration", 0.0) for k in getattr(event, "kernels", ()) or ()))
    return float(getattr(event, "self_cpu_time_total", 0.0))


def _innermost_range(event: Any) -> str | None:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(RANGE):
            return parent.name[len(RANGE) :]
        parent = parent.cpu_parent
    return None


def _ranges_around(event: Any) -> list[str]:
    paths = []
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(RANGE):
            paths.append(parent.name[len(RANGE) :])
        parent = parent.cpu_parent
    return paths


def module_times(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], device: torch.device, passes: int = 3
) -> dict[str, Any]:
    """Per module path, ``self_ms`` and ``total_ms`` of device time per forward, and the forward's ``device_ms``."""
    paths = {module: path for path, module in model.named_modules()}
    open_ranges: list[Any] = []

    def before(module: nn.Module, _args: Any) -> None:
        if module in paths:
            scope = record_function(RANGE + paths[module])
            scope.__enter__()
            open_ranges.append(scope)

    def after(module: nn.Module, _args: Any, _output: Any) -> None:
        if module in paths and open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    handles = [h for m in paths for h in (m.register_forward_pre_hook(before), m.register_forward_hook(after))]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        _forward(model, args, kwargs)
        _sync(device)
        with profile(activities=activities) as prof:
            for _ in range(passes):
                _forward(model, args, kwargs)
            _sync(device)
    finally:
        for handle in handles:
            handle.remove()
    self_us: dict[str, float] = {}
    total_us: dict[str, float] = {}
    device_us = 0.0
    for event in prof.events():
        if event.name.startswith(RANGE) or str(getattr(event, "device_type", "")).endswith("CUDA"):
            continue
        spent = _event_time_us(event, device)
        if spent <= 0:
            continue
        device_us += spent
        inner = _innermost_range(event)
        if inner is None:
            continue
        self_us[inner] = self_us.get(inner, 0.0) + spent
        for path in set(_ranges_around(event)):
            total_us[path] = total_us.get(path, 0.0) + spent
    scale = 1e-3 / passes
    return {
        "self_ms": {p: v * scale for p, v in self_us.items()},
        "total_ms": {p: v * scale for p, v in total_us.items()},
        "device_ms": device_us * scale,
        "passes": passes,
    }
