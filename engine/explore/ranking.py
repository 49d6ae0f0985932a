"""How an exploration ranks its kernels: by the kernel's own time, when every one was timed on one kind of GPU.

Why (ARCHITECTURE.md §2, "Explore"; measured in benchmarks/RESULTS.md): every evaluation times the
reference again, in its own worker, and divides. For a reference of a few tiny launches that time
moved between workers by 1.6x on the H200 (KernelBench level 1 problem 88: 0.072 or 0.115 ms per
call) while each kernel's own time stayed within 6%, so ranking branches by speedup ranked the
reference's noise: the exploration named a kernel 28% slower than the fastest. All of an
exploration's kernels solve one task on the same inputs, so their own times compare directly, as
long as they ran on the same kind of device. When they did not (a Ray cluster of mixed GPUs, an
evaluation without timing), the speedup is the fair measure and ranks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessions.errors import SessionError

KERNEL_TIME, SPEEDUP = "kernel time", "speedup"


@dataclass(frozen=True)
class Measured:
    """What ranks one correct iteration: its speedup, its kernel's median time and where it ran."""

    branch: str
    number: int
    speedup: float | None
    kernel_ms: float | None
    device: str | None  # the GPU's name, or "cpu"
    #: the interquartile range of the kernel's per-call times: how far this run's timing can tell it apart
    kernel_p25_ms: float | None = None
    kernel_p75_ms: float | None = None


def measured(branch: str, iteration: Any) -> Measured:
    """``iteration`` (sessions.records.Iteration, correct) as :class:`Measured`, from its eval.json."""
    try:
        result = iteration.read_json("eval.json")
    except (SessionError, ValueError):  # no readable record: no time, so the speedup ranks
        result = {}
    candidate = (result.get("timing") or {}).get("candidate") or {}
    env = result.get("env") or {}
    device = env.get("gpu") if env.get("device") == "cuda" else env.get("device")
    return Measured(
        branch, iteration.number, iteration.speedup, candidate.get("median_ms"), device,
        candidate.get("p25_ms"), candidate.get("p75_ms"),
    )  # fmt: skip


def ranked_by(every: list[Measured]) -> str:
    """KERNEL_TIME when every iteration has a kernel time from one kind of device, else SPEEDUP."""
    devices = {m.device for m in every}
    if every and all(m.kernel_ms is not None for m in every) and len(devices) == 1 and None not in devices:
        return KERNEL_TIME
    return SPEEDUP


def sort_key(how: str) -> Any:
    """Best first: the fastest kernel, or the highest speedup; the earlier iteration on ties."""
    if how == KERNEL_TIME:
        return lambda m: (m.kernel_ms, m.number, m.branch)
    return lambda m: (-(m.speedup if m.speedup is not None else 0.0), m.number, m.branch)


def within_spread(best: Measured, others: list[Measured], how: str) -> list[Measured]:
    """Those of ``others`` this run's timing cannot tell from ``best``: their interquartile ranges of
    per-call times overlap. Kernels that differ by less than their own timing noise (on the H200, three
    level-2 kernels whose time was mostly the same cuDNN convolution) swap places from run to run, and
    the summary says so rather than name one as if it were surely faster. Only when ranked by kernel
    time: a speedup carries no spread of its own."""
    if how != KERNEL_TIME or best.kernel_p25_ms is None or best.kernel_p75_ms is None:
        return []
    return [
        m for m in others
        if m is not best and m.kernel_p25_ms is not None and m.kernel_p75_ms is not None
        and m.kernel_p25_ms <= best.kernel_p75_ms and best.kernel_p25_ms <= m.kernel_p75_ms
    ]  # fmt: skip
