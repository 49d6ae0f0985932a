"""The evalset's summary and KernelBench-compatible file, from stored results (no evaluation runs).

Results are real ``EvalResult`` documents written through the store; the ones "from a newer
cudaforge" carry ``kernel_share`` and ``guard_policy`` as the guard-policy work adds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.batch.statistics import TaskRow, set_statistics
from engine.eval.result import BuildInfo, EvalResult, ExtensionBuild, Timing, TimingStats, TrialResult
from engine.evalset import store
from engine.evalset.kernelbench import write_kernelbench
from engine.evalset.pairs import Pair
from engine.evalset.summary import PENDING, row_for, share_distribution, summary_document


def stats(median: float, iqr: float) -> TimingStats:
    return TimingStats(n=100, median_ms=median, p25_ms=median - iqr / 2, p75_ms=median + iqr / 2, iqr_ms=iqr,
                       min_ms=median * 0.9, max_ms=median * 1.3, mean_ms=median * 1.01, std_ms=iqr / 1.35)  # fmt: skip


def correct(speedup: float) -> EvalResult:
    kernel, reference = stats(1.0, 0.02), stats(speedup, 0.05)
    return EvalResult(
        status="correct", stage="done", device="cuda", speedup=speedup,
        timing=Timing("cuda-events", kernel, reference),
        trials=[TrialResult(i, 42 + i, True) for i in range(5)],
        build=BuildInfo(1.0, extensions=[ExtensionBuild("e", "/b", True, 0.1, "fast")]),
        env={"gpu": "NVIDIA H200", "cpu": "x86_64"},
    )  # fmt: skip


def failed(status: str, stage: str, message: str, error: dict[str, str] | None = None) -> EvalResult:
    return EvalResult(status=status, stage=stage, device="cuda", messages=[message], error=error,
                      trials=[TrialResult(0, 42, False)] if status == "incorrect" else [])  # fmt: skip


def save(
    out: Path,
    pair: Pair,
    result: EvalResult,
    extra: dict | None = None,
    p1: float = 10.0,
    p2: float | None = 5.0,
    older: bool = False,
) -> None:
    store.write(
        store.result_path(out, pair.name), result, {"phase1_seconds": p1, "phase2_seconds": p2, "gpu": 0}
    )
    path = store.result_path(out, pair.name)
    data = json.loads(path.read_text())
    if older:  # a result from before the guard-policy work: neither field
        data.pop("guard_policy", None)
        data.pop("kernel_share", None)
    path.write_text(json.dumps({**data, **(extra or {})}))


def pair(name: str, problem: int | None, sample: int | None = 0, level: int | None = 1) -> Pair:
    return Pair(name, Path(f"/t/{name}.py"), Path(f"/k/{name}.py"), level, problem, sample)


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, list[Pair]]:
    out = tmp_path / "out"
    pairs = [
        pair("level_1_problem_19_sample_0", 19, 0),
        pair("level_1_problem_19_sample_1", 19, 1),
        pair("level_1_problem_3_sample_0", 3, 0),
        pair("level_1_problem_4_sample_0", 4, 0),
        pair("level_2_problem_1_sample_0", 1, 0, level=2),
        pair("mine", None, None, None),
        pair("level_1_problem_5_sample_0", 5, 0),
    ]
    save(
        out,
        pairs[0],
        correct(2.0),
        {"kernel_share": {"share": 0.9, "own_ms": 1.0}, "guard_policy": "default"},
    )
    save(out, pairs[1], correct(0.5), {"kernel_share": {"share": 0.35}, "guard_policy": "default"})
    save(out, pairs[2], failed("compile_error", "build", "the extension failed to build",
                               {"type": "RuntimeError", "message": "Error building extension"}), p2=None)  # fmt: skip
    save(out, pairs[3], failed("incorrect", "check", "trial 0: mismatch"), p2=None)
    save(out, pairs[4], failed("timeout", "build", "the build stage ran over its 20 s limit"), p2=None)
    save(out, pairs[5], correct(1.5), older=True)  # no kernel_share, no guard_policy
    return out, pairs  # pairs[6] has no result: pending


def test_rows_and_statistics_are_the_benchs(stored: tuple[Path, list[Pair]]) -> None:
    out, pairs = stored
    rows = [row_for(out, p) for p in pairs]
    assert [r.status for r in rows] == [
        "correct",
        "correct",
        "compile_error",
        "incorrect",
        "timeout",
        "correct",
        PENDING,
    ]
    assert (
        rows[0].speedup == 2.0 and rows[0].kernel_ms == 1.0 and rows[0].kernel_spread == pytest.approx(0.02)
    )
    assert rows[0].kernel_share == 0.9 and rows[5].kernel_share is None and rows[0].guard_policy == "default"
    assert rows[2].message == "the extension failed to build" and rows[6].message == "not evaluated yet"
    document = summary_document(rows, {"wall_seconds": 7.0}, {"guard_policy": None, "device": "cuda"})
    s = document["set"]
    assert s["tasks"] == 7 and s["correct"] == 3 and s["correct_pct"] == pytest.approx(300 / 7)
    assert s["fast_1.0"] == pytest.approx(2 / 7)  # over every pair, pending included
    assert s["geomean_speedup"] == pytest.approx((2.0 * 0.5 * 1.5) ** (1 / 3))
    bench = set_statistics(
        [TaskRow(r.name, r.status, r.correct, r.speedup, None, 0, None, 0.0) for r in rows]
    )
    assert all(s[k] == bench[k] for k in s)
    assert document["status_counts"] == {
        "correct": 3,
        "compile_error": 1,
        "incorrect": 1,
        "timeout": 1,
        PENDING: 1,
    }
    assert document["kernel_share"]["n"] == 2 and document["kernel_share"]["median"] == pytest.approx(0.625)
    assert (
        document["kernel_share"]["histogram"]["0.9-1.0"] == 1
        and document["kernel_share"]["histogram"]["0.3-0.4"] == 1
    )
    assert document["guard_policy"] == {"requested": None, "in_results": {"default": 5}}
    assert document["timing_spread"]["n"] == 3
    assert document["time"]["stored_results"]["phase1_sum_seconds"] == 60.0
    assert document["time"]["stored_results"]["phase2_sum_seconds"] == 15.0
    assert document["device"] == "cuda" and len(document["pairs"]) == 7


def test_share_distribution_is_empty_without_shares() -> None:
    assert share_distribution([]) == {"n": 0}


def test_kernelbench_results_have_eval_from_generations_shape(stored: tuple[Path, list[Pair]]) -> None:
    out, pairs = stored
    files, left_out = write_kernelbench(out, pairs)
    assert files == [
        out / "kernelbench" / "level_1" / "eval_results.json",
        out / "kernelbench" / "level_2" / "eval_results.json",
    ]
    assert left_out == ["mine"]
    level1 = json.loads(files[0].read_text())
    assert list(level1) == ["3", "4", "5", "19"]  # numeric order, as KernelBench sorts
    first, second = level1["19"]
    assert [first["sample_id"], second["sample_id"]] == [0, 1]
    for sample in (first, second):
        assert set(sample) >= {"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats"}
    assert first["compiled"] is True and first["correctness"] is True
    assert first["runtime"] == 1.01  # the candidate's mean in ms, three significant figures
    assert first["runtime_stats"]["num_trials"] == 100 and first["runtime_stats"]["hardware"] == "NVIDIA H200"
    assert set(first["runtime_stats"]) >= {"mean", "std", "min", "max", "num_trials", "hardware", "device"}
    assert first["ref_runtime"] == 2.02 and first["metadata"]["correctness_trials"] == "(5 / 5)"
    compile_error = level1["3"][0]
    assert compile_error["compiled"] is False and compile_error["correctness"] is False
    assert compile_error["runtime"] == -1.0 and compile_error["runtime_stats"] == {}
    assert compile_error["metadata"]["compilation_error_name"] == "RuntimeError"
    incorrect = level1["4"][0]
    assert incorrect["compiled"] is True and incorrect["correctness"] is False
    assert incorrect["metadata"]["correctness_issue"] == "trial 0: mismatch"
    assert incorrect["metadata"]["correctness_trials"] == "(0 / 1)"
    pending = level1["5"][0]
    assert pending["compiled"] is False and pending["metadata"]["cudaforge_status"] == PENDING
    timeout = json.loads(files[1].read_text())["1"][0]
    assert timeout["compiled"] is False and "20 s limit" in timeout["metadata"]["error"]


def test_the_table_shows_each_pairs_shapes_and_the_summary_counts_shape_specific_and_weak(tmp_path: Path) -> None:
    from engine.evalset.summary import format_table

    general, specific, weak = pair("a", 1), pair("b", 2), pair("c", 3)
    save(tmp_path, general, correct(2.0), {"shapes": {"variants": [{"status": "correct"}] * 3}})
    save(
        tmp_path,
        specific,
        correct(3.0),
        {"shapes": {"variants": [{"status": "correct"}, {"status": "incorrect"}, {"status": "skipped"}]}},
    )
    save(tmp_path, weak, correct(1.5), {"weak_outputs": [{"output": "output", "passes": ["zeros"], "checks": []}]})
    rows = [row_for(tmp_path, p) for p in (general, specific, weak)]
    assert [r.shapes for r in rows] == ["3/3", "1/2", ""]
    assert rows[2].weak_outputs == "output: zeros"
    document = summary_document(rows, {"wall_seconds": 1.0, "phase1_evaluations": 3, "phase2_evaluations": 3,
                                       "sum_evaluation_seconds": 2.0}, {})  # fmt: skip
    assert document["shapes"] == {"checked": 2, "shape_specific": 1, "weak_tasks": 1}
    text = format_table(rows, document)
    assert "shapes: 1 of 2 correct pair(s) correct at every other shape checked; 1 shape-specific" in text
    assert "weak tasks (a degenerate answer passes an output): 1 pair(s)" in text
    header = text.splitlines()[0].split()
    assert header[:4] == ["pair", "status", "speedup", "shapes"]


def test_a_pair_whose_exact_answer_is_constant_to_rounding_is_marked_and_listed(tmp_path: Path) -> None:
    from engine.eval.arbiter import CONSTANT_LEGEND, CONSTANT_MARK
    from engine.evalset.summary import format_table

    constant, ordinary = pair("gm", 41, level=2), pair("relu", 19)
    arbiter = {"outputs": [{"output": "output", "accepted": True, "constant": True}], "constant_to_rounding": True,
               "unavailable": None}  # fmt: skip
    save(tmp_path, constant, correct(3.0), {"arbiter": arbiter})
    save(tmp_path, ordinary, correct(2.0))  # a result without the field reads as not constant
    rows = [row_for(tmp_path, p) for p in (constant, ordinary)]
    assert [r.constant_to_rounding for r in rows] == [True, False]
    document = summary_document(rows, {"wall_seconds": 1.0, "phase1_evaluations": 2, "phase2_evaluations": 2,
                                       "sum_evaluation_seconds": 2.0}, {})  # fmt: skip
    assert document["constant_to_rounding"] == ["gm"]
    lines = format_table(rows, document).splitlines()
    assert lines[1].split()[:3] == ["gm", "correct", CONSTANT_MARK] and CONSTANT_MARK not in lines[2]
    assert CONSTANT_LEGEND in lines
