"""Bootstrap intervals for timed medians and their ratio, so a speedup carries its spread (ARCHITECTURE.md §3).

The timer's per-call samples are resampled with replacement; the 2.5th and 97.5th percentiles of the
resampled statistic give a 95% interval. The generator is seeded from the samples themselves, so the same
measurements always give the same interval (a re-read record never changes its verdict). Plain Python:
a few hundred resamples of a few hundred calls cost tens of milliseconds, beside seconds of timing.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

RESAMPLES = 400
LEVEL = 0.95


def _rng(*samples: Sequence[float]) -> random.Random:
    """Seeded by the values, in any order (a sorted copy gives the same interval as the timer's order)."""
    return random.Random(hash(tuple(round(x, 9) for s in samples for x in sorted(s))) & 0xFFFFFFFF)


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    tail = (1.0 - LEVEL) / 2
    lo = ordered[int(tail * (len(ordered) - 1))]
    hi = ordered[int(round((1.0 - tail) * (len(ordered) - 1)))]
    return lo, hi


def median_interval(samples: Sequence[float]) -> tuple[float, float]:
    """The 95% bootstrap interval of ``samples``' median (one sample: that value twice)."""
    if len(samples) < 2:
        return (samples[0], samples[0]) if samples else (float("nan"), float("nan"))
    ordered = sorted(samples)
    rng, n = _rng(ordered), len(ordered)
    return _percentiles([statistics.median(rng.choices(ordered, k=n)) for _ in range(RESAMPLES)])


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float]) -> tuple[float, float]:
    """The 95% bootstrap interval of median(numerator) / median(denominator): a speedup's interval when
    the numerator is the reference's times and the denominator the candidate's."""
    if not numerator or not denominator:
        return float("nan"), float("nan")
    numerator, denominator = sorted(numerator), sorted(denominator)
    rng = _rng(numerator, denominator)
    n, d = len(numerator), len(denominator)
    ratios = []
    for _ in range(RESAMPLES):
        bottom = statistics.median(rng.choices(denominator, k=d))
        top = statistics.median(rng.choices(numerator, k=n))
        ratios.append(top / bottom if bottom > 0 else float("inf"))
    return _percentiles(ratios)
