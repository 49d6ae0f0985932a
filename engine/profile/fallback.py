"""Feedback when hardware counters are unavailable: PyTorch-profiler kernel times + a roofline ESTIMATE.

Why: the loop must never stop because ncu is missing or counters are locked. Kernel times still show where
the time goes, and the task's own byte/FLOP counts (what the forward call must at least move and compute)
against the GPU's peaks say roughly how far from the roofline it runs. The text says plainly that this is
an estimate and why counters were missing, so the Judge does not mistake it for measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.profile.availability import ProfileUnavailable
from engine.profile.specs import GpuSpec
from engine.profile.summary import LATENCY_THRESHOLD_PCT, ProfileSummary, format_time_ns

KernelTime = tuple[str, float, int]  # (kernel name, total CUDA time in µs, calls)


def summarize_torch_profiler(
    kernels: Sequence[KernelTime],
    spec: GpuSpec | None,
    *,
    bytes_moved: float | None = None,
    flops: float | None = None,
    precision: str = "fp32",
    unavailable: ProfileUnavailable | None = None,
    max_kernels: int = 6,
) -> ProfileSummary:
    """The fallback summary, same shape as the NCU one (`kind="torch-profiler"`).

    `bytes_moved`/`flops`: the task's minimum DRAM traffic and FLOPs per forward call, if known. The
    roofline estimate uses the sum of the kernels' CUDA time as the forward's GPU time.
    """
    rows = sorted(((n, float(t), int(c)) for n, t, c in kernels), key=lambda r: -r[1])
    total_us = sum(t for _, t, _ in rows)
    why = (
        f"no hardware counters ({unavailable.reason}: {unavailable.message.splitlines()[0]})"
        if unavailable
        else "no hardware counters"
    )
    lines = [
        f"PyTorch profiler timings only — {why}. Roofline numbers below are ESTIMATES, not measurements."
    ]
    for name, t_us, calls in rows[:max_kernels]:
        share = f", {100.0 * t_us / total_us:.0f}% of GPU time" if total_us else ""
        per_call = f" ({format_time_ns(1e3 * t_us / calls)}/call)" if calls > 1 else ""
        lines.append(f"- {name}: {format_time_ns(1e3 * t_us)} over {calls} call(s){per_call}{share}")
    if len(rows) > max_kernels:
        rest = rows[max_kernels:]
        lines.append(
            f"+ {len(rest)} more kernel(s), {format_time_ns(1e3 * sum(t for _, t, _ in rest))} in total"
        )

    est = roofline_estimate(total_us, spec, bytes_moved=bytes_moved, flops=flops, precision=precision)
    lines.append(est["text"])
    data = {
        "kind": "torch-profiler",
        "gpu": spec.name if spec else None,
        "estimate": {k: v for k, v in est.items() if k != "text"},
        "kernels": [{"name": n, "cuda_time_us": t, "calls": c} for n, t, c in rows],
        "total_cuda_time_us": total_us,
        "unavailable": unavailable.to_dict() if unavailable else None,
    }
    return ProfileSummary(kind="torch-profiler", text="\n".join(lines), data=data)


def roofline_estimate(
    gpu_time_us: float | None,
    spec: GpuSpec | None,
    *,
    bytes_moved: float | None,
    flops: float | None,
    precision: str = "fp32",
) -> dict:
    """Estimated bandwidth/FLOP rate from task counts ÷ time, against the spec's peaks, with a one-line text."""
    seconds = gpu_time_us / 1e6 if gpu_time_us else None
    gbs = bytes_moved / seconds / 1e9 if bytes_moved is not None and seconds else None
    tflops = flops / seconds / 1e12 if flops is not None and seconds else None
    peak_bw = spec.mem_bandwidth_gbs if spec else None
    peak_fl = spec.peak_tflops(precision) if spec else None
    bw_pct = 100.0 * gbs / peak_bw if gbs is not None and peak_bw else None
    fl_pct = 100.0 * tflops / peak_fl if tflops is not None and peak_fl else None
    ai = flops / bytes_moved if flops is not None and bytes_moved else None
    ridge = spec.ridge_point(precision) if spec else None
    if ai is not None and ridge is not None:
        likely = "likely memory-bound" if ai < ridge else "likely compute-bound"
        busiest = bw_pct if ai < ridge else fl_pct
        if busiest is not None and busiest <= LATENCY_THRESHOLD_PCT:
            likely += f", but only {busiest:.0f}% of that peak: latency or launch overhead dominates"
    else:
        likely = "bound unknown"

    if bytes_moved is None and flops is None:
        text = "Roofline estimate: n/a (the task's byte/FLOP counts are unknown)."
    else:
        parts = []
        if gbs is not None:
            parts.append(
                f"~{gbs:,.0f} GB/s"
                + (f" = {bw_pct:.0f}% of {peak_bw:,.0f} GB/s" if bw_pct is not None else "")
            )
        if tflops is not None:
            parts.append(
                f"~{tflops:,.2f} {precision.upper()} TFLOP/s"
                + (f" = {fl_pct:.1f}% of {peak_fl:,.1f}" if fl_pct is not None else " (peak n/a)")
            )
        ai_text = (
            f"AI {ai:.2f} FLOP/B vs ridge {ridge:.1f}" if ai is not None and ridge is not None else "AI n/a"
        )
        text = (
            f"Roofline ESTIMATE from task counts over {format_time_ns(gpu_time_us * 1e3 if gpu_time_us else None)}"
            f" of kernel time: {', '.join(parts) or 'rates n/a'}; {ai_text} → {likely}."
        )
    return {
        "gpu_time_us": gpu_time_us,
        "bytes_moved": bytes_moved,
        "flops": flops,
        "precision": precision,
        "dram_gbs": gbs,
        "dram_pct_of_peak": bw_pct,
        "tflops": tflops,
        "flop_pct_of_peak": fl_pct,
        "arithmetic_intensity": ai,
        "ridge_point": ridge,
        "likely_bound": likely,
        "text": text,
    }
