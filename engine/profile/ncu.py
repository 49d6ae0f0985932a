"""Nsight Compute command lines, plus the one import point for the ncu helpers.

Why these flags (details and measurements: /work/shared/reference/ncu-timing-compile.md §1):
- `--target-processes all`: the evaluator runs the candidate in a child worker process.
- `-k regex:^(a|b)$` with the default `--kernel-name-base function`: only the candidate's own kernels,
  matched on the bare function name (robust to templates and parameter lists).
- `--nvtx --nvtx-include "<range>/"`: only kernels inside one push/pop NVTX range, i.e. exactly one forward
  call after warm-up (`torch.cuda.nvtx.range` is a push/pop range, hence the trailing '/').
- `-c N`: a bound on profiled launches; `-c` counts all matching kernels together.
- `--clock-control none` where clocks cannot or must not be locked (shared and cloud machines).
- `--csv --page raw`: machine-readable numbers; with `-o` the report is also kept, and re-read offline with
  `build_import_command` (raw for metrics, details for rule results).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Literal

from engine.profile.availability import (
    ProfileUnavailable,
    check_profiling_available,
    classify_ncu_failure,
    counters_permission_status,
    find_ncu,
)
from engine.profile.kernels import kernel_names_from_source
from engine.profile.lock import gpu_profile_lock
from engine.profile.ncu_csv import RuleResult, launch_counts, parse_details_csv, parse_raw_csv

__all__ = [
    "RULE_SECTIONS",
    "ProfileUnavailable",
    "RuleResult",
    "build_import_command",
    "build_ncu_command",
    "check_profiling_available",
    "classify_ncu_failure",
    "counters_permission_status",
    "find_ncu",
    "gpu_profile_lock",
    "kernel_names_from_source",
    "kernel_regex",
    "launch_counts",
    "parse_details_csv",
    "parse_raw_csv",
    "resolve_clock_control",
]

ClockControl = Literal["none", "base"]

# Sections whose rules pass the summary's whitelist (SOLBottleneck, Occupancy rules, LaunchConfiguration,
# CPIStall, the coalescing / bank-conflict rules, WorkloadImbalance). Rules only run for collected sections.
RULE_SECTIONS: tuple[str, ...] = (
    "SpeedOfLight",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
    "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Tables",
    "WorkloadDistribution",
)


def kernel_regex(kernel_names: Sequence[str]) -> str:
    """`regex:^(a|b)$` for ncu's -k: anchored so that `add` does not also select `add_bias`."""
    escaped = [re.escape(n) for n in dict.fromkeys(kernel_names)]
    return f"regex:^({'|'.join(escaped)})$"


def resolve_clock_control(setting: str = "auto", euid: int | None = None) -> ClockControl:
    """ "none" or "base" from the config value ("auto", "none", "base").

    "auto" locks clocks to base ("base", ncu's own default, reproducible numbers) only for root, because
    other users cannot lock clocks; everyone else gets "none". On shared or rented machines set "none"
    explicitly: locking clocks there affects other users' work.
    """
    if setting in ("none", "base"):
        return setting  # type: ignore[return-value]
    if setting != "auto":
        raise ValueError(f"clock_control must be 'auto', 'none' or 'base', not {setting!r}")
    uid = os.geteuid() if euid is None else euid
    return "base" if uid == 0 else "none"


def build_ncu_command(
    python: str,
    script_args: Sequence[str],
    kernel_names: Sequence[str],
    metrics: Sequence[str],
    nvtx_range: str | None,
    launch_count: int,
    clock_control: ClockControl,
    export_path: str | os.PathLike[str] | None,
    extra: Sequence[str] = (),
    *,
    ncu: str = "ncu",
    sections: Sequence[str] = RULE_SECTIONS,
    launch_skip: int = 0,
) -> list[str]:
    """The argv for profiling `python script_args...` under ncu (no shell: each element is one argument)."""
    if clock_control not in ("none", "base"):
        raise ValueError(f"clock_control must be 'none' or 'base', not {clock_control!r}")
    if launch_count < 1:
        raise ValueError("launch_count must be >= 1")
    if not metrics and not sections:
        raise ValueError("give at least one metric or section")
    cmd = [ncu, "--target-processes", "all", "--clock-control", clock_control, "--csv", "--page", "raw"]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    for section in sections:
        cmd += ["--section", section]
    if kernel_names:
        cmd += ["-k", kernel_regex(kernel_names)]
    if launch_skip:
        cmd += ["-s", str(launch_skip)]
    cmd += ["-c", str(launch_count)]
    if nvtx_range:
        include = nvtx_range if nvtx_range.endswith("/") else f"{nvtx_range}/"
        cmd += ["--nvtx", "--nvtx-include", include]
    if export_path is not None:
        cmd += ["-o", os.fspath(export_path), "-f"]
    cmd += list(extra)
    cmd += [python, *script_args]
    return cmd


def build_import_command(
    report_path: str | os.PathLike[str], page: Literal["raw", "details"] = "raw", *, ncu: str = "ncu"
) -> list[str]:
    """Re-print a saved `.ncu-rep` as CSV (no GPU needed): "raw" for metrics, "details" for rule results."""
    if page not in ("raw", "details"):
        raise ValueError(f"page must be 'raw' or 'details', not {page!r}")
    return [ncu, "-i", os.fspath(report_path), "--csv", "--page", page]
