"""Time the candidate and the reference in the same worker, the same way (ARCHITECTURE.md §3).

On CUDA each timed call is bracketed by events on the current stream, after a 256 MB write that
flushes the L2 (so no call profits from the previous one's cache, and the flush hides the CPU's
launch latency); on CPU a monotonic clock does the same job after a smaller cache-flushing write.
The two models are timed in alternating blocks so that clock and power drift hit both alike.
Host-clock calls with a device-wide sync, interleaved with the event-timed ones, record what the
events cannot see: work launched on a side stream shows up there and not in the events. Lines a
candidate marked persisting would survive the flush: on CUDA the persisting-L2 limit is put back and
those lines reset before each timed call (engine.eval.l2). What the callables run on, and what keeps
them from replaying results, is the caller's (engine.eval.replay).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.config import EvalConfig
from engine.eval.result import Timing, TimingStats

if TYPE_CHECKING:
    import torch

    from engine.eval.l2 import PersistingL2

CUDA_FLUSH_BYTES = 256 * 1024 * 1024
CPU_FLUSH_BYTES = 32 * 1024 * 1024


@dataclass
class TimingPlan:
    """How much timing to do: ``min_trials`` per model, fewer only when ``budget_s`` runs out first."""

    min_trials: int = EvalConfig.timing_trials
    budget_s: float = EvalConfig.timing_budget_s
    warmup_calls: int = 3
    warmup_s: float = 0.05
    block: int = 10
    host_per_block: int = 2  # host-clock calls per model per block, interleaved with the event-timed ones


def make_timer(device: torch.device, l2: PersistingL2 | None = None) -> _CudaTimer | _CpuTimer:
    """The flushed single-call clock for ``device``; on CUDA, ``l2`` (engine.eval.l2) is put back before
    every timed call's flush."""
    return _CudaTimer(device, l2) if device.type == "cuda" else _CpuTimer()


def time_models(
    candidate: Callable[[], object],
    reference: Callable[[], object],
    device: torch.device,
    plan: TimingPlan,
    timer: _CudaTimer | _CpuTimer | None = None,
    after_warmup: Callable[[], bool] | None = None,
) -> Timing | None:
    """Time two zero-argument callables; returns medians, spread and the host-clock medians.
    ``after_warmup``, called between the warm-up and the first timed call, may stop the timing by
    returning False (the replay defence verifies the warm-up's outputs there); then None."""
    import torch  # noqa: F401  (the timers need it; importing this module alone must not)

    timer = timer or make_timer(device)
    fns = {"candidate": candidate, "reference": reference}
    for fn in fns.values():
        _warm_up(fn, timer, plan)
    if after_warmup is not None and not after_warmup():
        return None
    samples: dict[str, list[float]] = {"candidate": [], "reference": []}
    host: dict[str, list[float]] = {"candidate": [], "reference": []}
    deadline = time.monotonic() + plan.budget_s
    while True:
        for name, fn in fns.items():
            for _ in range(plan.block):
                samples[name].append(timer.time_once(fn))
            for _ in range(plan.host_per_block):
                host[name].append(timer.host_time_once(fn))
        enough = all(len(s) >= plan.min_trials for s in samples.values())
        if enough or time.monotonic() > deadline:
            break  # the budget wins over the trial count for very slow models
    from engine.eval.bootstrap import ratio_interval

    return Timing(
        speedup_interval=list(ratio_interval(samples["reference"], samples["candidate"])),
        method=timer.method,
        candidate=_stats(samples["candidate"], host["candidate"]),
        reference=_stats(samples["reference"], host["reference"]),
        l2_flush_bytes=timer.flush_bytes,
        warmup_calls=plan.warmup_calls,
    )


def _stats(samples: list[float], host: list[float]) -> TimingStats:
    """One model's statistics, with the median of its host-clock calls."""
    return TimingStats.from_samples(samples, _median(host) if host else None)


def _warm_up(fn: Callable[[], object], timer: _CpuTimer | _CudaTimer, plan: TimingPlan) -> None:
    """Run until both the call count and the time floor are met (lazy loading, handles, clocks)."""
    start = time.monotonic()
    calls = 0
    while calls < plan.warmup_calls or time.monotonic() - start < plan.warmup_s:
        fn()
        calls += 1
        if calls >= 1000:
            break
    timer.sync()


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class _CudaTimer:
    method = "cuda-events"

    def __init__(self, device: torch.device, l2: PersistingL2 | None = None) -> None:
        import torch

        self.device = device
        self.l2 = l2
        self.flush_bytes = CUDA_FLUSH_BYTES
        self.cache = torch.empty(CUDA_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)

    def time_once(self, fn: Callable[[], object]) -> float:
        import torch

        if self.l2 is not None:
            self.l2.restore()  # persisting lines would survive the flush
        self.cache.zero_()
        self.start.record()
        fn()
        self.end.record()
        torch.cuda.synchronize(self.device)  # device-wide: every stream is drained before reading
        return float(self.start.elapsed_time(self.end))

    def busy_time_once(self, fn: Callable[[], object]) -> float:
        """The replay probe's clock (``_CpuTimer.busy_time_once`` on CPU): CUDA events already time the
        GPU's own work, which a busy host does not stretch."""
        return self.time_once(fn)
    def host_time_once(self, fn: Callable[[], object]) -> float:
        import torch

        if self.l2 is not None:
            self.l2.restore()
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(self.device)
        return (time.perf_counter() - t0) * 1e3


class _CpuTimer:
    method = "cpu-perf-counter"

    def __init__(self) -> None:
        import torch

        self.flush_bytes = CPU_FLUSH_BYTES
        self.cache = torch.empty(CPU_FLUSH_BYTES // 4, dtype=torch.int32)

    def sync(self) -> None:
        pass

    def time_once(self, fn: Callable[[], object]) -> float:
        self.cache.zero_()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def host_time_once(self, fn: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def busy_time_once(self, fn: Callable[[], object]) -> float:
        """The process's CPU milliseconds in one flushed call: what the replay probe compares on CPU. A busy
        machine delays a call's wall time (a preempted first call measured several times its second one
        under CI's load) but not the work the call does, which is what a memo skips. The worker runs CPU
        evaluations on one thread (``cpu_threads``); with more, torch's idle threads spinning after the
        flush count too."""
        self.cache.zero_()
        t0 = time.process_time_ns()
        fn()
        return (time.process_time_ns() - t0) / 1e6
