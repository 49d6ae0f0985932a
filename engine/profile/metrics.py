"""Named Nsight Compute metric sets.

Why a curated default: the CudaForge paper found that 24 hand-picked metrics (App. B.3) gave the Judge
better results, faster and cheaper, than the full NCU dump. `PAPER_24` is that list, verbatim and in the
paper's order. The summary also needs a few numbers the 24 do not contain (kernel time, total DRAM bytes,
FP instruction counts for FLOP/s, the SOL percentages, the warp limit and theoretical occupancy); they are
kept apart in `SUMMARY_EXTRAS` so "the 24" stays identifiable.

Note: with `ncu --metrics`, a metric the GPU cannot collect is an error, so every extra here is one that
exists on every architecture from Volta on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# CudaForge paper, App. B.3 (identical to `METRICS` in its run_ncu.py), in the paper's order.
PAPER_24: tuple[str, ...] = (
    "sm__cycles_active.avg",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__occupancy_limit_blocks",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__registers_per_thread",
    "sm__inst_executed.sum",
    "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_sector_hit_rate.pct",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_active",
    "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_branch_resolving_per_warp_active.pct",
    "smsp__sass_average_branch_targets_threads_uniform.pct",
)

# FP instruction counters (thread level, predicated-on) behind ncu's own roofline charts. FLOPs are
# add + mul + 2 × fma per precision. Tensor-core math is NOT in these counters.
FLOP_COUNTERS: tuple[str, ...] = tuple(
    f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"
    for op in ("fadd", "fmul", "ffma", "dadd", "dmul", "dfma", "hadd", "hmul", "hfma")
)

SUMMARY_EXTRAS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "dram__bytes.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_warps",
    *FLOP_COUNTERS,
)

# Two of the paper's 24 do not exist on newer chips: on an H200 (ncu 2025.3) ncu silently returned
# neither `sm__inst_executed_pipe_fp32...` nor `..._stalled_memory_dependency...` (captured in
# tests/fixtures/ncu/h200_relu_default_raw.csv). Their nearest counterparts are requested beside them,
# and `filled_paper_slots` says which name filled each of the 24 slots.
ARCH_EQUIVALENTS: dict[str, str] = {
    "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active": "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct": "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
}


def filled_paper_slots(collected: Iterable[str]) -> dict[str, str | None]:
    """For each of the paper's 24 metrics, the collected name that fills it (itself or its equivalent)."""
    have = set(collected)
    slots: dict[str, str | None] = {}
    for name in PAPER_24:
        alternative = ARCH_EQUIVALENTS.get(name)
        slots[name] = name if name in have else (alternative if alternative in have else None)
    return slots


# ~8 numbers: enough to say where a kernel sits and why, at the cost of few replay passes.
SMALL: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
)

# The default plus the unit-level SOL/throughput breakdown and pipe utilisation.
LARGE_ADDITIONS: tuple[str, ...] = (
    "gpc__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor.sum",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "sm__inst_executed.avg.per_cycle_active",
    "smsp__issue_active.avg.per_cycle_active",
    "smsp__warps_eligible.avg.per_cycle_active",
    "launch__grid_size",
    "launch__block_size",
    "launch__waves_per_multiprocessor",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_wait_per_warp_active.pct",
    "smsp__warp_issue_stalled_not_selected_per_warp_active.pct",
    "smsp__warp_issue_stalled_no_instruction_per_warp_active.pct",
    "smsp__thread_inst_executed_per_inst_executed.ratio",
)


def _dedupe(names: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for n in names:
        n = n.strip()
        if n and n not in seen:
            seen.add(n)
            out.append(n)
    return out


METRIC_SETS: dict[str, tuple[str, ...]] = {
    "default": tuple(_dedupe((*PAPER_24, *ARCH_EQUIVALENTS.values(), *SUMMARY_EXTRAS))),
    "small": SMALL,
    "large": tuple(_dedupe((*PAPER_24, *ARCH_EQUIVALENTS.values(), *SUMMARY_EXTRAS, *LARGE_ADDITIONS))),
}


def resolve_metric_set(choice: str | Sequence[str] | None = "default") -> list[str]:
    """Metric names for a set name ("default", "small", "large") or a custom list (passed through, deduped).

    A custom list is the user's decision: nothing is added to it, so the summary shows "n/a" for what it lacks.
    """
    if choice is None:
        choice = "default"
    if isinstance(choice, str):
        if choice not in METRIC_SETS:
            raise ValueError(
                f"unknown metric set {choice!r}; choose one of {sorted(METRIC_SETS)} or give a list"
            )
        return list(METRIC_SETS[choice])
    names = _dedupe(choice)
    if not names:
        raise ValueError("a custom metric list must name at least one metric")
    bad = [n for n in names if "," in n or " " in n]
    if bad:
        raise ValueError(f"metric names cannot contain commas or spaces: {bad}")
    return names
