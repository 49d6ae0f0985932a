"""How far a module's measured time is from what the GPU allows for it: the profile's headroom column.

For each module, from the traced forward (``engine.model.trace``): the bytes it must move at least (its
first call's inputs and outputs, and its parameters, each read or written once from DRAM) and the FLOPs
it does (matmuls, convolutions, attention), against the spec table's datasheet peaks::

    floor_ms = max(bytes / DRAM bandwidth, flops / peak FLOP/s of the model's dtype)
    headroom = measured device time / floor_ms

The peak is the dtype's own dense peak (fp32's non-tensor-core one for float32 models: float32's 1e-4
bar rules out TF32), so headroom says how much a kernel at the dtype's honest limit could win. Unlike
the review flag's floor (``engine.eval.plausibility``), which uses the most generous peak, this one
estimates opportunity, not a bound to flag below. No spec-table row (a CPU run, an unknown GPU): no floor.
"""

from __future__ import annotations

from typing import Any

from engine.profile.specs import GpuSpec

PEAK_BY_DTYPE = {"float32": "fp32", "float64": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def floor(bytes_moved: int, flops: int, dtype: str, spec: GpuSpec | None) -> dict[str, Any] | None:
    """``{"floor_ms", "bytes_ms", "flops_ms", "bound"}`` or None without a spec row or bandwidth."""
    if spec is None or not spec.mem_bandwidth_gbs:
        return None
    bytes_ms = bytes_moved / (spec.mem_bandwidth_gbs * 1e9) * 1e3
    peak = spec.peak_tflops(PEAK_BY_DTYPE.get(dtype, "fp32"))
    flops_ms = flops / (peak * 1e12) * 1e3 if peak and flops else 0.0
    bound = "flops" if flops_ms > bytes_ms else "bandwidth"
    return {"floor_ms": max(bytes_ms, flops_ms), "bytes_ms": bytes_ms, "flops_ms": flops_ms, "bound": bound}


def headroom(time_ms: float | None, floor_record: dict[str, Any] | None) -> float | None:
    """Measured time ÷ floor (``3.2`` means 3.2× slower than the hardware allows); None when unknown."""
    if not time_ms or not floor_record or floor_record["floor_ms"] <= 0:
        return None
    return time_ms / floor_record["floor_ms"]
