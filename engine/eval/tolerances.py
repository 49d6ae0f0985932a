"""Default correctness tolerances per output dtype (ARCHITECTURE.md §3), kept torch-free for the engine process."""

from __future__ import annotations

# Absolute and relative tolerance per dtype; integer and bool outputs compare exactly.
DEFAULT_TOLERANCES: dict[str, float] = {
    "float32": 1e-4,
    "float64": 1e-4,
    "float16": 1e-2,
    "bfloat16": 1e-2,
    "float8_e4m3fn": 1e-1,
    "float8_e5m2": 1e-1,
}
