"""The hardware floor's judgement (engine.eval.plausibility) with the spec table's real H200 row.

The results are constructed (a CUDA timing cannot be made on a CPU machine); the floor numbers come
from ``engine.eval.floor`` on real tensors of the tasks' shapes, or are written out where they are
plain arithmetic. The GPU end (an honest kernel not flagged) is in ``test_evaluate_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

from engine.eval.floor import measure
from engine.eval.plausibility import judge
from engine.eval.result import EvalResult, Timing, TimingStats
from engine.profile.specs import MIB, lookup

H200 = {"gpu": "NVIDIA H200", "compute_capability": "9.0"}
RELU_LARGE = 4096 * 8192 * 4  # examples/tasks/relu_large.py: 32 M floats in, 32 M out
MARGIN = 0.9


def timing(kernel_ms: float, method: str = "cuda-events", flush: int = 256 * MIB) -> Timing:
    return Timing(
        method=method,
        candidate=TimingStats.from_samples([kernel_ms]),
        reference=TimingStats.from_samples([kernel_ms * 3]),
        l2_flush_bytes=flush,
    )


def result(kernel_ms: float, floor: dict, env: dict | None = None, **overrides) -> EvalResult:
    made = EvalResult(
        status=overrides.pop("status", "correct"),
        device="cuda",
        timing=timing(kernel_ms, **overrides),
        speedup=3.0,
        env=dict(H200 if env is None else env),
        hardware_floor=dict(floor),
    )
    judge(made, MARGIN)
    return made


def relu_floor() -> dict:
    # the parameters are recorded but not part of the minimum: these would triple the floor if they were
    return {"input_bytes": RELU_LARGE, "output_bytes": RELU_LARGE, "param_bytes": 4 * RELU_LARGE, "flops": 0,
            "dtypes": ["float32"]}  # fmt: skip


def test_the_h200_row_gives_the_bandwidth_floor_of_a_large_elementwise_task() -> None:
    spec = lookup("NVIDIA H200", (9, 0))
    assert spec is not None and spec.mem_bandwidth_gbs == 4800  # the row this test reads
    honest = result(0.070, relu_floor())  # ~3.8 TB/s: what a good kernel reaches on an H200
    record = honest.hardware_floor
    assert record["floor_ms"] == pytest.approx(2 * RELU_LARGE / 4800e9 * 1e3)  # 0.0559 ms
    assert record["bound"] == "bandwidth" and record["gpu"] == spec.name
    assert record["implausible"] is False and honest.flags == []


def test_a_time_below_the_floor_is_flagged_with_the_numbers_and_what_bound_it() -> None:
    flagged = result(0.020, relu_floor())
    assert flagged.hardware_floor["implausible"] is True
    (flag,) = flagged.flags
    assert "0.02 ms" in flag and "0.05592 ms" in flag
    assert "bandwidth-bound" in flag and "268.4 MB" in flag and "4800 GB/s" in flag
    assert "check by hand" in flag


def test_the_margin_spares_a_time_just_under_the_datasheet_floor() -> None:
    floor_ms = 2 * RELU_LARGE / 4800e9 * 1e3
    assert result(0.95 * floor_ms, relu_floor()).flags == []
    assert result(0.85 * floor_ms, relu_floor()).flags != []


def test_a_matmul_is_bound_by_its_flops_at_the_16_bit_tensor_peak() -> None:
    n = 4096  # KernelBench level 1 #1's size, measured on meta tensors: no real compute here
    a, b = torch.empty(n, n, device="meta"), torch.empty(n, n, device="meta")
    measured = measure(_MatMul(), [a, b])
    assert measured["flops"] == 2 * n**3 and measured["input_bytes"] == 2 * n * n * 4
    record = result(1.0, measured).hardware_floor
    # fp32 may run on fp16 tensor cores (TF32's mantissa at twice its rate): 989, not TF32's 495
    assert record["bound"] == "flops" and record["peak"] in ("fp16", "bf16") and record["peak_tflops"] == 989
    assert record["floor_ms"] == pytest.approx(2 * n**3 / 989e12 * 1e3)  # 0.139 ms
    assert record["implausible"] is False  # cuBLAS fp32 takes ~2.7 ms on an H200
    flag = result(0.05, measured).flags[0]
    assert "flops-bound" in flag and "137.4 GFLOP" in flag and "989 TFLOP/s" in flag


def test_a_half_precision_task_gets_the_fp8_peak() -> None:
    work = {"input_bytes": 0, "output_bytes": 0, "flops": 2 * 4096**3, "dtypes": ["float16"]}
    record = result(1.0, work).hardware_floor
    assert record["peak"] == "fp8" and record["peak_tflops"] == 1979


class _MatMul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def test_a_gpu_missing_from_the_spec_table_is_not_judged_and_nothing_is_said() -> None:
    unknown = result(0.001, relu_floor(), env={"gpu": "NVIDIA Imaginary 9000", "compute_capability": "9.0"})
    assert unknown.flags == []
    assert unknown.hardware_floor["implausible"] is None
    assert "not in the spec table" in unknown.hardware_floor["unjudged"]
    assert "floor_ms" not in unknown.hardware_floor  # no row, no floor: the bytes alone stay
    assert result(0.001, relu_floor(), env={}).flags == []


def test_a_cpu_timing_keeps_the_numbers_but_is_not_judged() -> None:
    cpu = result(0.001, relu_floor(), method="cpu-perf-counter")
    assert cpu.flags == [] and cpu.hardware_floor["implausible"] is None
    assert cpu.hardware_floor["input_bytes"] == RELU_LARGE and "CPUs" in cpu.hardware_floor["unjudged"]


def test_an_incorrect_kernel_gets_the_floor_but_no_flag() -> None:
    wrong = result(0.001, relu_floor(), status="incorrect")
    assert wrong.flags == [] and wrong.hardware_floor["implausible"] is None
    assert wrong.hardware_floor["floor_ms"] == pytest.approx(0.05592, rel=1e-3)


def test_without_an_l2_flush_the_bandwidth_bound_is_dropped() -> None:
    unflushed = result(0.001, relu_floor(), flush=0)
    assert unflushed.flags == [] and unflushed.hardware_floor["bytes_ms"] is None
    assert "no bound" in unflushed.hardware_floor["unjudged"]


def test_a_result_without_a_floor_is_left_alone() -> None:
    made = EvalResult(status="correct", device="cuda", timing=timing(0.001), env=dict(H200))
    judge(made, MARGIN)
    assert made.hardware_floor is None and made.flags == []


def test_the_field_survives_the_json_round_trip_and_old_results_load_without_it() -> None:
    made = result(0.020, relu_floor())
    again = EvalResult.from_json(made.to_json())
    assert again.hardware_floor == made.hardware_floor and again.flags == made.flags
    old = made.to_dict()
    del old["hardware_floor"]
    assert EvalResult.from_dict(old).hardware_floor is None


# ---------------------------------------------------------------- where the flag shows


def test_the_eval_commands_summary_shows_the_floor_and_the_flag() -> None:
    from engine.cli.eval import format_summary

    text = format_summary(result(0.020, relu_floor()))
    assert "  floor  134.2 MB in, 134.2 MB out, 0 GFLOP → at best 0.05592 ms on the NVIDIA H200 SXM" in text
    assert "IMPLAUSIBLE" in text
    assert "  flag: kernel time 0.02 ms is below 0.9x the 0.05592 ms" in text
    cpu = format_summary(result(0.001, relu_floor(), method="cpu-perf-counter"))
    assert "not judged: not a CUDA timing" in cpu and "flag:" not in cpu


def test_the_tuis_checks_table_shows_the_floor_and_each_flag_before_the_verdict() -> None:
    from tui.model import check_rows

    flagged = result(0.020, relu_floor())
    flagged.flags.insert(0, "speedup 12.00x is above the 10x review threshold: check by hand")
    rows = check_rows(flagged.to_dict())
    names = [row[0] for row in rows]
    assert names[-1] == "verdict" and names[-4:-1] == ["hardware floor", "⚑ flag", "⚑ flag"]
    floor = rows[-4]
    assert floor[1] == "0.0559 ms" and "bandwidth-bound" in floor[2] and floor[3] == "IMPLAUSIBLE"
    assert "review threshold" in rows[-3][2] and "physically implausible" in rows[-2][2]
    honest = [row for row in check_rows(result(0.070, relu_floor()).to_dict()) if row[0] == "hardware floor"]
    assert honest[0][3] == "" and "1.25x that" in honest[0][2]
    assert "hardware floor" not in {row[0] for row in check_rows({"status": "correct"})}


def test_the_evalset_summary_counts_flagged_and_implausible_kernels_apart(tmp_path) -> None:
    from engine.evalset import store
    from engine.evalset.pairs import Pair
    from engine.evalset.summary import format_table, row_for, summary_document

    made = {
        "honest": result(0.070, relu_floor()),
        "fast": result(0.070, relu_floor()),
        "impossible": result(0.020, relu_floor()),
    }
    made["fast"].flags.append("speedup 12.00x is above the 10x review threshold")
    pairs = []
    for name, one in made.items():
        pair = Pair(name, tmp_path / f"{name}_task.py", tmp_path / f"{name}.py", 1, None, None)
        store.write(store.result_path(tmp_path, name), one, {"phase1_seconds": 1.0, "phase2_seconds": 1.0})
        pairs.append(pair)
    rows = [row_for(tmp_path, p) for p in pairs]
    assert [(r.flagged, r.implausible) for r in rows] == [(False, False), (True, False), (True, True)]
    document = summary_document(rows, {"wall_seconds": 1.0, "phase1_evaluations": 3, "phase2_evaluations": 3,
                                       "sum_evaluation_seconds": 6.0}, {})  # fmt: skip
    assert document["review"] == {"flagged": 2, "implausible": 1, "implausible_pairs": ["impossible"]}
    assert "flagged for review: 2, 1 below the hardware floor (physically implausible: impossible)" in (
        format_table(rows, document)
    )


def test_the_bench_summary_counts_the_best_kernels_flagged_and_implausible(tmp_path) -> None:
    from engine.batch.statistics import format_table, set_statistics
    from engine.bench.results import session_dir, task_row
    from engine.bench.tasks import BenchTask
    from sessions.repo import SessionRepo

    rows = []
    for name, kernel_ms in (("honest", 0.070), ("impossible", 0.020)):
        task = BenchTask(name, tmp_path / f"{name}.py")
        task.path.write_text("# a task\n")
        session = SessionRepo.create(session_dir(tmp_path, task).parent, task.path, name=name)
        try:
            session.record_iteration(kernel_source="# kernel\n", eval_result=result(kernel_ms, relu_floor()).to_dict(),
                                     phase="seed")  # fmt: skip
        finally:
            session.close()
        rows.append(task_row(tmp_path, task, rounds=0))
    assert [(r.best_flagged, r.best_implausible) for r in rows] == [(False, False), (True, True)]
    stats = set_statistics(rows)
    assert stats["flagged_tasks"] == 1 and stats["implausible_tasks"] == 1
    assert "below the hardware floor (physically implausible: impossible)" in format_table(rows)
    assert "flagged for review" not in format_table(rows[:1])
