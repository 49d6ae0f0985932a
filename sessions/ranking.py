"""Which correct iteration is best: one rule for every place that names one (ARCHITECTURE.md §5, "Best").

Timing is noisy. On CPU identical kernels measured 1.01× to 1.23× apart, and on the H200 a reference of
a few tiny launches moved by 1.6× between workers (KernelBench level 1 problem 88: 0.072 or 0.115 ms per
call) while each kernel's own time stayed within 6% (benchmarks/RESULTS.md). A "best" picked by the
largest number ranks that noise. So:

- **What is compared.** All kernels of one task timed on one kind of device compare by their own time
  (they ran on the same inputs); otherwise (mixed GPUs, a record without times) by speedup.
- **Each measurement has a spread**: on the kernel's time, its per-call interquartile range widened by
  the median's bootstrap interval where recorded; on a speedup, the bootstrap interval of the ratio of
  medians (``timing.speedup_interval``), else the kernel's own relative spread.
- **The incumbent stays** (:func:`leader`): iterations are taken in the order they were made, and a new
  one takes the lead only when it beats the current best beyond both spreads, or won a back-to-back,
  interleaved re-timing against that very kernel (``eval.json``'s ``ranking.duel``). A tie keeps the
  earlier kernel, so "best" never moves on noise.

Nothing here imports the engine: a session's readers (report, export, TUI) rank without it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sessions.errors import SessionError

KERNEL_TIME, SPEEDUP = "kernel time", "speedup"

#: how best is chosen, in one line for the summaries that name one
RULE = (
    "best: a later kernel takes the lead only by beating the best beyond both timings' spread "
    "(± is the speedup's 95% bootstrap interval); a tie keeps the earlier one"
)

#: a candidate whose speedup is within this fraction of the best's is re-timed beside it (the loop's duel)
CLOSE_CALL = 0.05


@dataclass(frozen=True)
class Duel:
    """A back-to-back, interleaved re-timing of this kernel against another (the incumbent best):
    ``ratio`` is the incumbent's median time over this kernel's, with its bootstrap interval."""

    against_sha: str
    against: int
    ratio: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """``faster`` / ``slower`` when the interval excludes 1, else ``tie``."""
        return "faster" if self.low > 1.0 else "slower" if self.high < 1.0 else "tie"


@dataclass(frozen=True)
class Measured:
    """What ranks one correct iteration: its speedup, its kernel's median time, where it ran, and how
    far each measurement spreads."""

    branch: str
    number: int
    speedup: float | None
    kernel_ms: float | None
    device: str | None  # the GPU's name, or "cpu"
    #: the interquartile range of the kernel's per-call times: how far this run's timing can tell it apart
    kernel_p25_ms: float | None = None
    kernel_p75_ms: float | None = None
    #: the bootstrap interval of the speedup (ratio of the two medians), when the timing recorded one
    speedup_low: float | None = None
    speedup_high: float | None = None
    #: the bootstrap interval of the kernel's median time
    kernel_low_ms: float | None = None
    kernel_high_ms: float | None = None
    sha: str = ""
    duel: Duel | None = None
    #: the kernel repeated iteration N's and carries N's result (engine.loop.duplicates): never a contender
    same_as: int | None = None


def measured(branch: str, iteration: Any) -> Measured:
    """``iteration`` (sessions.records.Iteration, correct) as :class:`Measured`, from its eval.json."""
    reader = getattr(iteration, "read_json", None)  # a plain record (number, status, speedup) has none
    try:
        result = reader("eval.json") if reader is not None else {}
    except (SessionError, ValueError):  # no readable record: no time, so the speedup ranks
        result = {}
    timing = result.get("timing") or {}
    candidate = timing.get("candidate") or {}
    env = result.get("env") or {}
    device = env.get("gpu") if env.get("device") == "cuda" else env.get("device")
    speedup_interval = _pair(timing.get("speedup_interval"))
    median_interval = _pair(candidate.get("median_interval_ms"))
    return Measured(
        branch, iteration.number, iteration.speedup, candidate.get("median_ms"), device,
        candidate.get("p25_ms"), candidate.get("p75_ms"),
        *speedup_interval, *median_interval,
        sha=getattr(iteration, "sha", ""), duel=_duel((result.get("ranking") or {}).get("duel")),
        same_as=result.get("same_as") if isinstance(result.get("same_as"), int) else None,
    )  # fmt: skip


def _pair(value: Any) -> tuple[float | None, float | None]:
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, (int, float)) for v in value)
    ):
        return float(value[0]), float(value[1])
    return None, None


def _duel(value: Any) -> Duel | None:
    if not isinstance(value, dict):
        return None
    try:
        return Duel(str(value["against_sha"]), int(value["against"]), float(value["ratio"]),
                    float(value["low"]), float(value["high"]))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def ranked_by(every: Iterable[Measured]) -> str:
    """KERNEL_TIME when every iteration has a kernel time from one kind of device, else SPEEDUP."""
    every = list(every)
    devices = {m.device for m in every}
    if every and all(m.kernel_ms is not None for m in every) and len(devices) == 1 and None not in devices:
        return KERNEL_TIME
    return SPEEDUP


def sort_key(how: str) -> Any:
    """Point estimates, best first: the fastest kernel, or the highest speedup; the earlier iteration on
    ties. For ordering a list; whether the first *is* better than the next is :func:`beats`'s call."""
    if how == KERNEL_TIME:
        return lambda m: (m.kernel_ms, m.number, m.branch)
    return lambda m: (-(m.speedup if m.speedup is not None else 0.0), m.number, m.branch)


def spread(m: Measured, how: str) -> tuple[float, float]:
    """The interval ``m``'s ranking quantity could lie in: kernel milliseconds (lower is better) or a
    speedup (higher is better). A record with no spread at all is its point."""
    if how == KERNEL_TIME and m.kernel_ms is not None:
        low = [v for v in (m.kernel_ms, m.kernel_p25_ms, m.kernel_low_ms) if v is not None]
        high = [v for v in (m.kernel_ms, m.kernel_p75_ms, m.kernel_high_ms) if v is not None]
        return min(low), max(high)
    s = m.speedup if m.speedup is not None else 0.0
    if m.speedup_low is not None and m.speedup_high is not None:
        return min(s, m.speedup_low), max(s, m.speedup_high)
    if m.kernel_ms and m.kernel_p25_ms and m.kernel_p75_ms:  # the kernel's own relative spread
        return s * m.kernel_ms / m.kernel_p75_ms, s * m.kernel_ms / m.kernel_p25_ms
    return s, s


def beats(challenger: Measured, incumbent: Measured, how: str) -> bool:
    """``challenger`` is better than ``incumbent`` beyond both measurements' spread, or it won a duel
    against that very kernel (a lost or tied duel keeps the incumbent, whatever the spreads say)."""
    duel = challenger.duel
    if duel is not None and incumbent.sha and duel.against_sha == incumbent.sha:
        return duel.verdict == "faster"
    c_low, c_high = spread(challenger, how)
    i_low, i_high = spread(incumbent, how)
    if how == KERNEL_TIME:
        return c_high < i_low
    return c_low > i_high


def close_call(challenger: Measured, incumbent: Measured) -> bool:
    """Whether ``challenger``'s speedup is within :data:`CLOSE_CALL` of ``incumbent``'s (either way):
    the loop then re-times the two back to back before naming a best."""
    if challenger.speedup is None or incumbent.speedup is None or incumbent.speedup <= 0:
        return False
    return abs(challenger.speedup / incumbent.speedup - 1.0) <= CLOSE_CALL


def leader(in_order: Iterable[Measured], how: str | None = None) -> Measured | None:
    """The best of ``in_order`` (oldest first): the first, replaced only by one that :func:`beats` the
    current best. ``how`` defaults to :func:`ranked_by` over them all. A repeat of an earlier kernel
    (``same_as``) is that kernel's measurement again, so it never takes part."""
    every = [m for m in in_order if m.same_as is None]
    if not every:
        return None
    how = how or ranked_by(every)
    best = every[0]
    for m in every[1:]:
        if beats(m, best, how):
            best = m
    return best


def standings(in_order: Iterable[Measured]) -> tuple[str, list[Measured]]:
    """How they rank and the list best first: the :func:`leader`, then the rest by point estimate."""
    every = list(in_order)
    how = ranked_by(every)
    best = leader(every, how)
    rest = sorted((m for m in every if m is not best), key=sort_key(how))
    return how, ([best] if best is not None else []) + rest


def within_spread(best: Measured, others: list[Measured], how: str) -> list[Measured]:
    """Those of ``others`` this run's timing cannot tell from ``best``: their interquartile ranges of
    per-call times overlap. Kernels that differ by less than their own timing noise (on the H200, three
    level-2 kernels whose time was mostly the same cuDNN convolution) swap places from run to run, and
    the summary says so rather than name one as if it were surely faster. Only when ranked by kernel
    time: across devices the per-call ranges are not comparable (the speedups' own intervals are,
    through :func:`beats`)."""
    if how != KERNEL_TIME or best.kernel_p25_ms is None or best.kernel_p75_ms is None:
        return []
    return [
        m for m in others
        if m is not best and m.kernel_p25_ms is not None and m.kernel_p75_ms is not None
        and m.kernel_p25_ms <= best.kernel_p75_ms and best.kernel_p25_ms <= m.kernel_p75_ms
    ]  # fmt: skip


def interval_label(speedup: float | None, low: float | None, high: float | None) -> str:
    """``1.42× ±0.03`` (the larger side of the interval), ``1.42×`` without one, ``—`` without a speedup."""
    if speedup is None:
        return "—"
    if low is None or high is None:
        return f"{speedup:.2f}×"
    return f"{speedup:.2f}× ±{max(speedup - low, high - speedup, 0.0):.2f}"


def label(m: Measured) -> str:
    """:func:`interval_label` of ``m``'s speedup."""
    return interval_label(m.speedup, m.speedup_low, m.speedup_high)
