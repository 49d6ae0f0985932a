"""Time the candidate and the reference in the same worker, the same way (ARCHITECTURE.md §3).

On CUDA each timed call is bracketed by events on the current stream, after a 256 MB write that
flushes the L2 (so no call profits from the previous one's cache, and the flush hides the CPU's
launch latency); on CPU a monotonic clock does the same job after a smaller cache-flushing write.
The two models are timed in alternating blocks so that clock and power drift hit both alike.
Every timed call is also timed by the host clock, from before its flush to after a device-wide sync,
and the flush by events of its own: a call's *gap* is its host time less its events' span and less the
reference's median flush. Work the events cannot see (launched on a side stream, or ahead of the flush
at a higher priority, which stretches the flush) shows in the gap; another process's work stretching
the call itself stretches both clocks and cancels. Lines a
candidate marked persisting would survive the flush: on CUDA the persisting-L2 limit is put back and
those lines reset before each timed call (engine.eval.l2). What the callables run on, and what keeps
them from replaying results, is the caller's (engine.eval.replay).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median as _median
from typing import TYPE_CHECKING, Any

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


@dataclass(frozen=True)
class CallTime:
    """One timed call by both clocks: the events' span of the call, the host clock's span of flush, call
    and device-wide sync, and the events' span of the flush alone (0 where there is no flush to time)."""

    event_ms: float
    host_ms: float | None  # None where one clock times everything (CPU): no gap to measure
    flush_ms: float = 0.0


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
    calls: dict[str, list[CallTime]] = {"candidate": [], "reference": []}
    deadline = time.monotonic() + plan.budget_s
    while True:
        for name, fn in fns.items():
            calls[name].extend(timer.time_call(fn) for _ in range(plan.block))
        enough = all(len(c) >= plan.min_trials for c in calls.values())
        if enough or time.monotonic() > deadline:
            break  # the budget wins over the trial count for very slow models
    return summarise(calls["candidate"], calls["reference"], timer, plan.warmup_calls)


def summarise(candidate: list[CallTime], reference: list[CallTime], timer: Any, warmup_calls: int = 0) -> Timing:
    """Both models' statistics from their timed calls; the gaps measured against the reference's flush."""
    from engine.eval.bootstrap import ratio_interval

    flush = _median([c.flush_ms for c in reference])
    events = {name: [c.event_ms for c in calls] for name, calls in (("candidate", candidate), ("reference", reference))}
    return Timing(
        speedup_interval=list(ratio_interval(events["reference"], events["candidate"])),
        method=timer.method,
        candidate=_stats(candidate, flush),
        reference=_stats(reference, flush),
        l2_flush_bytes=timer.flush_bytes,
        warmup_calls=warmup_calls,
    )


def gaps(calls: list[CallTime], flush_ms: float) -> list[float]:
    """Each call's host time beyond its events' span and a flush of ``flush_ms``: launch and sync latency
    for honest work; work the events did not see, inside the flush or after the call's end event, besides."""
    return [c.host_ms - c.event_ms - flush_ms for c in calls if c.host_ms is not None]


def _stats(calls: list[CallTime], flush_ms: float) -> TimingStats:
    """One model's statistics, with the medians of its host-clock spans, its flushes and its gaps."""
    stats = TimingStats.from_samples([c.event_ms for c in calls])
    if all(c.host_ms is not None for c in calls):
        stats.host_median_ms = _median([c.host_ms for c in calls])  # type: ignore[misc]
        stats.flush_median_ms = _median([c.flush_ms for c in calls])
        stats.gap_median_ms = _median(gaps(calls, flush_ms))
    return stats


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


class _CudaTimer:
    method = "cuda-events"

    def __init__(self, device: torch.device, l2: PersistingL2 | None = None) -> None:
        import torch

        self.device = device
        self.l2 = l2
        self.flush_bytes = CUDA_FLUSH_BYTES
        self.cache = torch.empty(CUDA_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.before = torch.cuda.Event(enable_timing=True)  # the flush's start
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)

    def time_call(self, fn: Callable[[], object]) -> CallTime:
        """The call by its events, the flush before it by its own, and both under the host clock; the
        candidate cannot tell this call from any other timed one."""
        import torch

        if self.l2 is not None:
            self.l2.restore()  # persisting lines would survive the flush
        started = time.perf_counter()
        self.before.record()
        self.cache.zero_()
        self.start.record()
        fn()
        self.end.record()
        torch.cuda.synchronize(self.device)  # device-wide: every stream is drained before reading
        host_ms = (time.perf_counter() - started) * 1e3
        return CallTime(float(self.start.elapsed_time(self.end)), host_ms, float(self.before.elapsed_time(self.start)))

    def time_once(self, fn: Callable[[], object]) -> float:
        return self.time_call(fn).event_ms

    def busy_time_once(self, fn: Callable[[], object]) -> float:
        """The replay probe's clock (``_CpuTimer.busy_time_once`` on CPU): CUDA events already time the
        GPU's own work, which a busy host does not stretch."""
        return self.time_once(fn)


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

    def time_call(self, fn: Callable[[], object]) -> CallTime:
        """On CPU one clock times everything: there is no second clock, and no gap."""
        return CallTime(self.time_once(fn), None)

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
