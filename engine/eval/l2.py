"""Persisting L2 lines, put back before every timed call (ARCHITECTURE.md §3, "Defences").

The timing flushes the L2 with a 256 MB write before each call, but lines marked *persisting* survive
it: a kernel that sets a persisting-L2 limit (``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)``) and
an access-policy window over its inputs finds them in L2 on the next call (llm.c #851). Lines can persist
only while that limit is above zero, so before each timed call the worker reads it through the driver
(``cuCtxGetLimit``, about a microsecond, outside the timed window); when a candidate changed it, the
limit is put back and the persisting lines are reset to normal (``cuCtxResetPersistingL2Cache``), and
the flush that follows evicts them. How often that was needed is reported, as the runtime rule
``l2-persisting``.

The driver is reached through ctypes on ``libcuda.so.1``, the library every CUDA process has loaded;
where it cannot be (no GPU, another platform) the guard reports itself unavailable and does nothing.
"""

from __future__ import annotations

import ctypes
from typing import Any

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # CUlimit, cuda.h
_SUCCESS = 0


class PersistingL2:
    """The persisting-L2 limit as the worker found it before the candidate ran, and the means to put it
    back. ``restores`` counts the timed calls before which it had been changed."""

    def __init__(self, driver: Any | None = None) -> None:
        self.driver = driver if driver is not None else _load_driver()
        self.baseline: int | None = None
        self.restores = 0
        self.failures = 0  # restores the driver refused
        self.seen: set[int] = set()  # the changed values found, for the message
        if self.driver is not None:
            self.baseline = self.limit()

    @property
    def available(self) -> bool:
        return self.driver is not None and self.baseline is not None

    def limit(self) -> int | None:
        """The current context's persisting-L2 limit in bytes; None when the driver refused."""
        value = ctypes.c_size_t(0)
        if self.driver.cuCtxGetLimit(ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE) != _SUCCESS:
            return None
        return int(value.value)

    def restore(self) -> bool:
        """Before a timed call: when the limit differs from the baseline, put it back and reset every
        persisting line; True when that was needed."""
        if not self.available:
            return False
        now = self.limit()
        if now is None or now == self.baseline:
            return False
        self.seen.add(now)
        put_back = self.driver.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(self.baseline or 0))
        reset = self.driver.cuCtxResetPersistingL2Cache()
        if put_back != _SUCCESS or reset != _SUCCESS:
            self.failures += 1  # said in the message: the flush may not have evicted those lines
        self.restores += 1
        return True

    def record(self) -> dict[str, object]:
        """What the result keeps (``settings.l2``): whether the guard could act, and what it did."""
        return {
            "available": self.available,
            "baseline": self.baseline,
            "restores": self.restores,
            "failures": self.failures,
            "seen": sorted(self.seen),
        }

    def message(self) -> str | None:
        """The ``l2-persisting`` finding's text when the candidate changed the limit, else None."""
        if not self.restores:
            return None
        found = ", ".join(f"{v} bytes" for v in sorted(self.seen))
        return (
            f"the persisting-L2 limit was {found} after the candidate ran (it was {self.baseline} before): "
            f"put back and the persisting lines reset before {self.restores} timed call(s), so the L2 flush "
            "evicted them and the timing stands"
            + (f" (the driver refused {self.failures} of those restores: those calls may have kept them)" if self.failures else "")
        )


def _load_driver() -> Any | None:
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    for name in ("cuCtxGetLimit", "cuCtxSetLimit", "cuCtxResetPersistingL2Cache"):
        if not hasattr(driver, name):
            return None
    driver.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    driver.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    return driver
