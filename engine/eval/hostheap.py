"""Keep freed host memory in the process's heap (ARCHITECTURE.md §3, "Defences"; in CPU workers).

glibc hands memory back to the kernel in two ways that make a CPU call's cost depend on the allocator's
history instead of the kernel's work: chunks above a dynamic mmap threshold are unmapped when freed, and
the heap's top is trimmed once enough of it is free. The next allocation then takes fresh pages, and the
call that first writes them pays a page fault per 4 KiB page: about 0.33 ms for a 1 MiB output on the
2-core machine, four times the ReLU's own work. So an honest kernel's first call on new inputs (the
replay probe's *fresh* call, engine.eval.replay) measured five times a call on inputs it had seen, and was
refused as a replay under CI's load (session 25). With the thresholds fixed here, freed memory stays
mapped and written, every call of a size reuses it, and the NaN fill (engine.eval.stale) reaches it too.
"""

from __future__ import annotations

import ctypes

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's largest on 64-bit: bigger chunks are always mapped anew
TRIM_THRESHOLD = (1 << 31) - 1  # an int: the heap's top is never given back during an evaluation


def keep_freed_memory() -> bool:
    """Fix glibc's thresholds so freed chunks up to 32 MiB stay in the heap; False where the C library
    is not glibc (or refuses), and nothing changes."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: no ldconfig run in a sandboxed worker
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
