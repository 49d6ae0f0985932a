"""Whether a kernel's measured time is one the hardware allows: the floor beside the speedup flag.

The worker records the task's lower bounds (``engine.eval.floor``) in ``EvalResult.hardware_floor``;
:func:`judge`, in the parent, adds the time the GPU allows at best and flags a correct kernel that is
timed below it (ARCHITECTURE.md §3, "Review flags")::

    floor_ms = max(bytes_min / peak bandwidth, flops / peak FLOP/s)

* ``bytes_min`` = the inputs' bytes + the outputs' bytes: every input read once and every output
  written once, from DRAM, since the timing flushes the L2 before every call (the bound is dropped when
  the flush is not larger than the L2). Parameters and buffers are left out: a kernel may rightly
  skip a weight the task's arithmetic makes irrelevant (a bias a norm cancels, a buffer forward
  never reads), and a wrong flag costs more than a missed one, since the speedup flag still stands.
* ``flops``: the reference's count (matmuls, convolutions, attention). It is what the reference
  does, so a kernel that exploits structure in the inputs (triangular, symmetric, diagonal) may
  legitimately do less; the flag says what bound it, and asks for a look, never refuses.
* The peaks are the datasheet's, the most generous an honest kernel could reach for the task's dtypes
  (``GENEROUS_PEAKS``): fp32 work may run on fp16 tensor cores with fp32 accumulation, whose 10-bit
  mantissa is TF32's and passes whatever TF32 passes, at twice TF32's rate; fp16/bf16 work may pass its
  1e-2 tolerance on fp8 tensor cores.
* The margin (``EvalOptions.flag_below_floor``, 0.9): real kernels do not reach datasheet peaks (an
  H200 copies at 4.3 of its 4.8 TB/s, 90%; its bf16 matmul reaches 780 of 989 TFLOP/s), so an honest
  kernel lands at 1.1x the floor or more; flagging below 0.9x leaves room for a board faster than its
  table row. Tiny tasks cannot be flagged falsely: their floor is far below a kernel launch.

No spec-table row for the GPU (or a CPU run): the numbers stay recorded, nothing is judged or said.
"""

from __future__ import annotations

import re
from typing import Any

from engine.eval.result import EvalResult
from engine.profile.specs import MIB, GpuSpec, lookup

# Per floating dtype of a task, the precisions whose peaks an honest kernel could use (see above).
GENEROUS_PEAKS: dict[str, tuple[str, ...]] = {
    "float64": ("fp16", "bf16", "tf32", "fp32"),
    "float32": ("fp16", "bf16", "tf32", "fp32"),
    "float16": ("fp8", "fp16", "bf16"),
    "bfloat16": ("fp8", "fp16", "bf16"),
    "float8_e4m3fn": ("fp8",),
    "float8_e5m2": ("fp8",),
}
EVERY_PEAK = ("fp8", "fp16", "bf16", "tf32", "fp32")  # a task without floating tensors: any of them


def gpu_spec(env: dict[str, Any]) -> GpuSpec | None:
    """The spec-table row for the GPU an environment record names (``engine.eval.envinfo``), or None."""
    name = env.get("gpu")
    if not name:
        return None
    match = re.fullmatch(r"(\d+)\.(\d+)", str(env.get("compute_capability") or ""))
    return lookup(str(name), (int(match.group(1)), int(match.group(2))) if match else None)


def generous_peak(spec: GpuSpec, dtypes: list[str] | None) -> tuple[float, str] | None:
    """(TFLOP/s, precision) of the highest peak the row knows among those the task's dtypes allow."""
    allowed = {p for dtype in dtypes or [None] for p in GENEROUS_PEAKS.get(str(dtype), EVERY_PEAK)}
    known = [(spec.peak_tflops(p), p) for p in allowed if spec.peak_tflops(p)]
    return max(known) if known else None


def hardware_floor(measured: dict[str, Any], spec: GpuSpec, flush_bytes: int) -> dict[str, Any]:
    """The floor's numbers for one GPU: the time each bound allows, the larger of the two and which."""
    moved = (measured.get("input_bytes") or 0) + (measured.get("output_bytes") or 0)
    l2_bytes = (spec.l2_mib or 0) * MIB
    bandwidth = spec.mem_bandwidth_gbs if flush_bytes > l2_bytes else None
    bytes_ms = moved / (bandwidth * 1e9) * 1e3 if bandwidth and moved else None
    peak = generous_peak(spec, measured.get("dtypes"))
    flops = measured.get("flops")
    flops_ms = flops / (peak[0] * 1e12) * 1e3 if peak and flops else None
    bounds = [(ms, name) for ms, name in ((bytes_ms, "bandwidth"), (flops_ms, "flops")) if ms]
    floor_ms, bound = max(bounds) if bounds else (None, None)
    return {
        "gpu": spec.name,
        "bytes_min": moved,
        "bandwidth_gbs": bandwidth,
        "bytes_ms": bytes_ms,
        "peak": peak[1] if peak else None,
        "peak_tflops": peak[0] if peak else None,
        "flops_ms": flops_ms,
        "floor_ms": floor_ms,
        "bound": bound,
    }


def judge(result: EvalResult, margin: float) -> None:
    """Complete ``result.hardware_floor`` with the GPU's floor; flag a correct kernel timed below
    ``margin`` × the floor. Says nothing where there is nothing to judge (the record says why)."""
    record = result.hardware_floor
    if record is None or result.timing is None:
        return
    record.update(implausible=None, margin=margin, kernel_ms=result.timing.candidate.median_ms)
    if result.timing.method != "cuda-events":
        record["unjudged"] = "not a CUDA timing: the spec table has no CPUs"
        return
    spec = gpu_spec(result.env)
    if spec is None:
        record["unjudged"] = f"GPU {result.env.get('gpu')!r} is not in the spec table"
        return
    record.update(hardware_floor(record, spec, result.timing.l2_flush_bytes))
    if record["floor_ms"] is None:
        record["unjudged"] = "no bound: nothing measured, or no bandwidth or peak in the table row"
        return
    if not result.ok:
        record["unjudged"] = f"the kernel is {result.status}: its time is not judged"
        return
    record["implausible"] = record["kernel_ms"] < margin * record["floor_ms"]
    if record["implausible"]:
        result.flags.append(floor_flag(record))


def floor_flag(record: dict[str, Any]) -> str:
    """The review flag's text: the time measured, the floor, what bound it, and what to do."""
    if record["bound"] == "bandwidth":
        why = f"moving {_bytes(record['bytes_min'])} in and out at {record['bandwidth_gbs']:g} GB/s"
    else:
        why = (
            f"the reference's {record['flops'] / 1e9:.4g} GFLOP at the {record['peak_tflops']:g} TFLOP/s "
            f"{record['peak']} peak"
        )
    return (
        f"kernel time {record['kernel_ms']:.4g} ms is below {record['margin']:g}x the "
        f"{record['floor_ms']:.4g} ms the {record['gpu']} allows at best ({record['bound']}-bound: {why}): "
        "physically implausible; check by hand that the kernel does the whole computation and that its "
        "time is real"
    )


def summary_line(record: dict[str, Any]) -> str:
    """One line for front ends: what the task moves and computes, and the floor it gives, if judged."""
    flops = record.get("flops")
    work = (
        f"{_bytes(record.get('input_bytes'))} in, {_bytes(record.get('output_bytes'))} out, "
        + (f"{flops / 1e9:.4g} GFLOP" if flops is not None else "FLOPs not counted")
    )
    floor_ms, kernel_ms = record.get("floor_ms"), record.get("kernel_ms")
    if floor_ms is None or kernel_ms is None:
        return f"{work}; not judged: {record.get('unjudged') or 'not timed'}"
    verdict = " — IMPLAUSIBLE, check by hand" if record.get("implausible") else ""
    return (
        f"{work} → at best {floor_ms:.4g} ms on the {record.get('gpu')} ({record.get('bound')}-bound); "
        f"the kernel takes {kernel_ms / floor_ms:.2f}x that{verdict}"
    )


def _bytes(count: int | None) -> str:
    if count is None:
        return "? bytes"
    return f"{count / 1e9:.4g} GB" if count >= 1e9 else f"{count / 1e6:.4g} MB"
