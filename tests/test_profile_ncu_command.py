"""Metric sets and the ncu command lines built from them."""

from __future__ import annotations

import re

import pytest

from engine.profile.metrics import METRIC_SETS, PAPER_24, resolve_metric_set
from engine.profile.ncu import (
    RULE_SECTIONS,
    build_import_command,
    build_ncu_command,
    kernel_regex,
    resolve_clock_control,
)

# The CudaForge paper's App. B.3 list, written out independently of the module under test.
PAPER_METRICS_FROM_APPENDIX = [
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
]

ROOFLINE_NEEDS = {
    "gpu__time_duration.sum",
    "dram__bytes.sum",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
}


def test_paper_24_is_exactly_the_appendix_list() -> None:
    assert len(PAPER_METRICS_FROM_APPENDIX) == 24
    assert list(PAPER_24) == PAPER_METRICS_FROM_APPENDIX


def test_default_requests_all_24_plus_what_the_roofline_needs() -> None:
    default = resolve_metric_set("default")
    assert set(PAPER_METRICS_FROM_APPENDIX) <= set(default)
    assert default[:24] == PAPER_METRICS_FROM_APPENDIX  # the 24 come first, identifiable
    assert set(default) >= ROOFLINE_NEEDS
    assert len(default) == len(set(default))


def test_small_and_large_sets() -> None:
    small = resolve_metric_set("small")
    assert 6 <= len(small) <= 10
    assert {
        "gpu__time_duration.sum",
        "dram__bytes.sum",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
    } <= set(small)
    large = resolve_metric_set("large")
    assert set(resolve_metric_set("default")) < set(large)
    ops = ("fadd", "fmul", "ffma", "dadd", "dmul", "dfma", "hadd", "hmul", "hfma")
    assert {f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in ops} <= set(large)
    assert any(m.startswith("sm__inst_executed_pipe_tensor") for m in large)
    assert all(len(v) == len(set(v)) for v in METRIC_SETS.values())


def test_custom_list_passes_through_deduplicated() -> None:
    assert resolve_metric_set(["a__x.sum", " b__y.avg ", "a__x.sum"]) == ["a__x.sum", "b__y.avg"]
    with pytest.raises(ValueError):
        resolve_metric_set("huge")
    with pytest.raises(ValueError):
        resolve_metric_set([])
    with pytest.raises(ValueError):
        resolve_metric_set(["a,b"])


def test_build_command_full() -> None:
    cmd = build_ncu_command(
        "/venv/bin/python",
        ["bench.py", "--profile-one"],
        ["add_kernel", "sgemm_tiled"],
        ["gpu__time_duration.sum", "dram__bytes.sum"],
        "judge",
        4,
        "none",
        "/tmp/out/profile.ncu-rep",
        ["--cache-control", "all"],
        ncu="/opt/ncu",
        sections=("SpeedOfLight",),
    )
    assert cmd[0] == "/opt/ncu"
    assert cmd[-3:] == ["/venv/bin/python", "bench.py", "--profile-one"]
    joined = " ".join(cmd)
    assert "--target-processes all" in joined and "--clock-control none" in joined
    assert "--csv --page raw" in joined
    assert cmd[cmd.index("--metrics") + 1] == "gpu__time_duration.sum,dram__bytes.sum"
    assert cmd[cmd.index("-k") + 1] == "regex:^(add_kernel|sgemm_tiled)$"
    assert cmd[cmd.index("-c") + 1] == "4"
    assert cmd[cmd.index("--nvtx-include") + 1] == "judge/" and "--nvtx" in cmd
    assert cmd[cmd.index("-o") + 1] == "/tmp/out/profile.ncu-rep" and "-f" in cmd
    assert cmd[cmd.index("--section") + 1] == "SpeedOfLight"
    assert "--cache-control" in cmd and cmd.index("--cache-control") < cmd.index("/venv/bin/python")


def test_build_command_minimal_and_validation() -> None:
    cmd = build_ncu_command("python", ["b.py"], [], ["x.sum"], None, 1, "base", None, sections=())
    assert "-k" not in cmd and "--nvtx" not in cmd and "-o" not in cmd and "--section" not in cmd
    assert cmd[cmd.index("--clock-control") + 1] == "base"
    # A range given with its trailing slash is not doubled.
    cmd = build_ncu_command("python", [], [], ["x.sum"], "judge/", 1, "none", None)
    assert cmd[cmd.index("--nvtx-include") + 1] == "judge/"
    assert set(RULE_SECTIONS) <= set(build_ncu_command("python", [], [], ["x.sum"], None, 1, "none", None))
    with pytest.raises(ValueError):
        build_ncu_command("python", [], [], ["x.sum"], None, 1, "fast", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        build_ncu_command("python", [], [], ["x.sum"], None, 0, "none", None)


def test_kernel_regex_is_anchored_and_escaped() -> None:
    rx = kernel_regex(["add", "add", "k.v2"])
    assert rx == r"regex:^(add|k\.v2)$"
    pattern = re.compile(rx.removeprefix("regex:"))
    assert pattern.match("add") and not pattern.match("add_bias") and not pattern.match("kxv2")


def test_import_command() -> None:
    assert build_import_command("r.ncu-rep", "details", ncu="ncu") == [
        "ncu", "-i", "r.ncu-rep", "--csv", "--page", "details",
    ]  # fmt: skip
    with pytest.raises(ValueError):
        build_import_command("r.ncu-rep", "source")  # type: ignore[arg-type]


def test_clock_control_resolution() -> None:
    assert resolve_clock_control("none", euid=0) == "none"
    assert resolve_clock_control("base", euid=1000) == "base"
    assert resolve_clock_control("auto", euid=1000) == "none"  # non-root cannot lock clocks
    assert resolve_clock_control("auto", euid=0) == "base"
    with pytest.raises(ValueError):
        resolve_clock_control("turbo")
