"""The adversarial defences end to end on CPU: real candidates, real builds, the real worker (issue 25).

Every candidate shares one C++ extension (tests/fixtures/defences/cpu_family.py), so the suite pays
for one build. Each degenerate answer is refused or failed while the honest kernel for the same task
stays correct; each of these tests fails when its defence is switched off in the worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.eval.timing import TimingPlan
from engine.guard.policy import GuardSettings
from tests.fixtures.defences.cpu_family import candidate

FIXTURES = Path(__file__).parent / "fixtures" / "defences"

pytestmark = pytest.mark.slow


def run(task: str, function: str, cache: Path, prelude: str = "", **options: object) -> EvalResult:
    settings = {"device": "cpu", "do_timing": False, "cache_root": cache, **options}
    source = candidate(function, prelude)
    return evaluate((FIXTURES / f"{task}.py").read_text(), source, EvalOptions(**settings), task_name=task)


def runtime_rules(result: EvalResult) -> list[str]:
    return [f["rule"] for f in result.findings if f.get("source") == "runtime"]


@pytest.mark.parametrize(
    ("task", "honest", "weak_for"),
    [
        ("softmax_wide", "softmax_rows", ["zeros", "constant"]),
        ("layerscale", "layerscale", ["input[0]"]),
        ("scaled_mean", "scaled_mean", ["zeros", "constant"]),
    ],
)
def test_a_weak_task_is_said_so_and_its_honest_kernel_stays_correct(
    task: str, honest: str, weak_for: list[str], ext_cache: Path
) -> None:
    result = run(task, honest, ext_cache)
    assert result.status == "correct", result.messages
    assert [w["passes"] for w in result.weak_outputs] == [weak_for]
    assert any(m.startswith("weak task:") for m in result.messages)


@pytest.mark.parametrize(
    ("task", "degenerate", "says"),
    [
        ("softmax_wide", "zeros", "output is all zeros where the reference's is not"),
        ("softmax_wide", "row_constant", "output is one constant where the reference's is not"),
        ("layerscale", "copy", "output is input[0] returned unchanged"),
        ("scaled_mean", "zeros_scalar", "the same for every trial's inputs"),
    ],
)
def test_a_degenerate_answer_to_a_weak_task_is_refused_by_its_own_rule(
    task: str, degenerate: str, says: str, ext_cache: Path
) -> None:
    result = run(task, degenerate, ext_cache)
    assert result.status == "rejected" and runtime_rules(result) == ["output-degenerate"], result.messages
    assert says in result.messages[-1]


def test_an_answer_inside_the_tolerance_but_not_following_the_reference_is_incorrect(ext_cache: Path) -> None:
    result = run("softmax_wide", "softmax_halfway", ext_cache)
    assert result.status == "incorrect", result.messages
    assert "0.5 of the reference's spread" in result.messages[-1]
    assert all(t.passed for t in result.trials)  # the value check alone would have passed it


def test_a_numeric_mode_changed_from_cpp_under_a_hidden_name_is_refused(ext_cache: Path) -> None:
    result = run("softmax_rows", "softmax_lowering_precision", ext_cache)
    assert result.status == "rejected" and "precision-changed" in runtime_rules(result), result.messages
    assert "ModelNew.forward (trial 0) changed" in result.messages[-1] and "matmul" in result.messages[-1]
    assert result.env["precision_flags"]["torch.backends.cuda.matmul.allow_tf32"] is False


def test_a_flag_the_static_guard_saw_but_was_told_to_relax_is_still_refused_and_its_line_shown(
    ext_cache: Path,
) -> None:
    switch = "torch.backends.cuda.matmul.allow_tf32 = True"
    refused = run("softmax_rows", "softmax_rows", ext_cache, prelude=switch)
    assert refused.status == "rejected" and refused.stage == "guard"  # the static guard, by default
    relaxed = run("softmax_rows", "softmax_rows", ext_cache, prelude=switch, guard=GuardSettings(relax=("monkeypatch-torch",)))
    assert relaxed.status == "rejected" and "precision-changed" in runtime_rules(relaxed), relaxed.messages
    message = relaxed.messages[-1]
    assert "its import changed torch.backends.cuda.matmul.allow_tf32: False -> True" in message
    assert "the static guard saw line 6" in message, message


def test_every_candidate_call_runs_on_filled_free_memory(ext_cache: Path) -> None:
    result = run("softmax_rows", "softmax_rows", ext_cache, trials=3)
    assert result.status == "correct", result.messages
    assert result.settings["nan_fill"]["calls"] == 6 and result.settings["nan_fill"]["bytes"] > 0


def test_a_kernel_hard_coded_to_its_shape_is_reported_and_refused_only_when_asked(ext_cache: Path) -> None:
    honest = run("softmax_rows", "softmax_rows", ext_cache, shapes=True)
    assert honest.status == "correct" and [v["status"] for v in honest.shapes["variants"]] == ["correct"] * 3
    assert "shape-specific" not in runtime_rules(honest)
    assert not any("speedup" in v for v in honest.shapes["variants"])  # no timing asked, no speed per shape
    timed = run("softmax_rows", "softmax_rows", ext_cache, shapes=True, do_timing=True, trials=1,
                timing=TimingPlan(min_trials=5, budget_s=0.5))  # fmt: skip
    for variant in timed.shapes["variants"]:  # the report's speed at each shape, with its interval
        low, high = variant["speedup_interval"]
        assert variant["speedup"] > 0 and low <= variant["speedup"] <= high and variant["timed_calls"] >= 5

    fixed = run("softmax_rows", "softmax_512", ext_cache, shapes=True)
    assert fixed.status == "correct", fixed.messages  # never a refusal under the default policy
    assert [v["status"] for v in fixed.shapes["variants"]] == ["incorrect"] * 3
    assert runtime_rules(fixed) == ["shape-specific"] and "correct at 0/3 other shapes" in fixed.findings[-1]["message"]

    refused = run("softmax_rows", "softmax_512", ext_cache, shapes=True, guard=GuardSettings(refuse=("shape-specific",)))
    assert refused.status == "rejected" and "[shape-specific]" in refused.messages[-1]

    unchecked = run("softmax_rows", "softmax_512", ext_cache)
    assert unchecked.shapes is None  # off unless asked for (evalset and bench ask)


def test_a_crash_at_another_shape_keeps_the_verdict_at_the_tasks_own(ext_cache: Path) -> None:
    result = run("softmax_rows", "softmax_512_or_crash", ext_cache, shapes=True)
    assert result.status == "correct" and result.stage == "done", result.messages
    assert result.shapes["crashed"] and result.shapes["variants"][0]["status"] == "error"
    assert "SIGSEGV" in result.shapes["variants"][0]["message"]
    assert "shape-specific" in runtime_rules(result)


def test_a_crash_at_another_shape_is_a_refusal_where_the_run_refuses_shape_specific(ext_cache: Path) -> None:
    result = run("softmax_rows", "softmax_512_or_crash", ext_cache, shapes=True, guard=GuardSettings(refuse=("shape-specific",)))
    assert result.status == "rejected" and result.failed_side == "candidate", result.messages
    assert result.messages[-1].startswith("refused by the runtime guard [shape-specific]: the worker was killed by SIGSEGV")
    assert result.shapes["crashed"]


def test_a_weak_tasks_degenerate_or_far_off_answer_at_another_shape_is_found(ext_cache: Path) -> None:
    """At the other shapes one call judges (engine.eval.degenerate.weak_failure): zeros at the even
    widths are named degenerate, the halfway answer at the odd one fails the spread check; both pass the
    value check there, so without it the kernel would be correct at every shape."""
    result = run("softmax_wide", "softmax_or_off_elsewhere", ext_cache, shapes=True)
    assert result.status == "correct", result.messages  # right at the task's own width
    found = {v["name"]: (v["status"], v["message"]) for v in result.shapes["variants"]}
    assert found == {
        "half": ("incorrect", "output is degenerate (zeros)"),
        "odd": ("incorrect", "output fails the weak-output check"),
        "odd-half": ("incorrect", "output fails the weak-output check"),  # 32767 wide: odd
    }
    assert runtime_rules(result) == ["shape-specific"]


def test_a_new_api_precision_set_at_import_is_refused_and_named(ext_cache: Path) -> None:
    """oneDNN's convolutions in reduced precision through the new API alone: no legacy flag shows it."""
    switch = 'torch.backends.mkldnn.conv.fp32_precision = "tf32"'
    result = run("softmax_rows", "softmax_rows", ext_cache, prelude=switch, guard=GuardSettings(relax=("monkeypatch-torch",)))
    assert result.status == "rejected" and "precision-changed" in runtime_rules(result), result.messages
    assert "its import changed torch.backends.mkldnn.conv.fp32_precision: 'none' -> 'tf32'" in result.messages[-1]
