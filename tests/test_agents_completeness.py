"""Every prompt carries what its agent needs (issue #19), filled from real EvalResults and real profiles.

The EvalResults are real captures (tests/fixtures/evals/capture.py, CPU C++ extensions); the NCU data
is the H200 capture in tests/fixtures/ncu. The optimize round's result is the captured correct one
moved onto an H200 (device, env) with an own-kernel share in the shape the guard records it.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from engine.agents import Suggestion, parse_suggestion
from engine.agents import prompts as P
from engine.agents.context import Contract, GuardChanges, PromptContext
from engine.eval.options import EvalOptions
from engine.eval.tolerances import DEFAULT_TOLERANCES
from engine.loop import feedback, history
from engine.loop.context import round_context
from engine.profile.metrics import resolve_metric_set
from engine.profile.ncu import build_ncu_command
from engine.profile.ncu_csv import parse_details_csv, parse_raw_csv
from engine.profile.result import ProfileResult
from engine.profile.specs import lookup
from engine.profile.summary import summarize
from sessions.records import IterationRecord
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES

FIXTURES = Path(__file__).parent / "fixtures"
EVALS = FIXTURES / "evals"
NCU = FIXTURES / "ncu"
TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()
H200 = lookup("NVIDIA H200", (9, 0))


def _eval(name: str) -> dict[str, Any]:
    return json.loads((EVALS / f"{name}.json").read_text())


def _text(prompt: P.Prompt) -> str:
    return prompt.system + "\n" + "\n".join(m.content for m in prompt.messages)


def _on_h200(result: dict[str, Any], share: dict[str, Any] | None = None) -> dict[str, Any]:
    result = copy.deepcopy(result)
    result["device"] = "cuda"
    result["env"] = {**result.get("env", {}), "gpu": "NVIDIA H200", "compute_capability": "9.0"}
    result["kernel_share"] = share
    return result


SHARE = {
    "share": 0.31,
    "own_ms": 0.062,
    "library_ms": 0.138,
    "method": "torch.profiler device time",
    "kernels": [
        {"name": "cudnn_conv_implicit_gemm_LIBMARK", "own": False, "ms": 0.101, "calls": 1},
        {"name": "fused_bias_relu_kernel", "own": True, "ms": 0.062, "calls": 1},
        *[
            {"name": f"at_native_elementwise_{i}", "own": False, "ms": 0.006 - i * 0.001, "calls": 1}
            for i in range(6)
        ],
    ],
}


def _ncu_profile(metric_set: str = "large") -> dict[str, Any]:
    raw = (NCU / f"h200_relu_{metric_set}_raw.csv").read_text()
    table = parse_raw_csv(raw)
    rules = parse_details_csv((NCU / "h200_relu_details.csv").read_text())
    command = build_ncu_command(
        "python", ["-m", "x"], [], resolve_metric_set(metric_set), None, 1, "none", Path("r"), ()
    )
    result = ProfileResult(
        kind="ncu", metrics=table, rules=rules, summary=summarize(table, rules, H200), command=command
    )
    return json.loads(result.to_json())


def _number(cell: str) -> float:
    return float(re.match(r"-?[\d,]*\.?\d+(e[-+]?\d+)?", cell.strip()).group(0).replace(",", ""))


# ---------------------------------------------------------------------------------------------- repair


def test_repair_prompts_carry_the_first_compiler_error_and_the_diagnosis() -> None:
    result = _eval("compile_error")
    assert result["status"] == "compile_error"
    first = "‘first_undeclared_name’ was not declared in this scope"
    log = feedback.error_log(result)
    diagnosis = parse_suggestion(
        '{"critical_issue": "DIAG-MARK undeclared name", "why_it_matters": "no build", "minimal_fix_hint": "x"}',
        "repair",
    )
    judge = P.judge_repair(TASK, KERNEL, log, "cpu")
    coder = P.coder_repair(TASK, KERNEL, diagnosis, "cpu", failure=log)
    for prompt in (judge, coder):
        text = _text(prompt)
        assert first in text and "second_undeclared_name" in text
    assert "DIAG-MARK" in coder.messages[0].content


def test_a_long_build_log_keeps_its_first_error_and_marks_every_cut() -> None:
    result = _eval("compile_error")
    noise = "\n".join(f"warning: noisy line {i}" for i in range(3000))
    result["build"]["log"] = f"{noise}\n{result['build']['log']}\n{noise}"
    text = (
        P.coder_repair(TASK, KERNEL, "fix it", "cpu", failure=feedback.error_log(result)).messages[0].content
    )
    assert "first_undeclared_name’ was not declared" in text
    assert "lines cut before the first error" in text and re.search(
        r"\[\.\.\. \d+ (lines|characters) cut", text
    )
    assert len(text) < P.MAX_LOG_CHARS + 3000


def test_incorrect_repair_shows_the_failing_trial_with_got_and_expected() -> None:
    result = _eval("incorrect")
    assert result["status"] == "incorrect"
    failure = next(t for t in result["trials"] if not t["passed"])
    text = P.coder_repair(TASK, KERNEL, "fix", "cpu", failure=feedback.error_log(result)).messages[0].content
    assert failure["message"] in text and "got" in failure["message"] and "expected" in failure["message"]
    assert f"seed={failure['seed']}" in text


def test_guard_findings_reach_the_coder() -> None:
    result = _eval("correct") | {
        "status": "rejected",
        "stage": "guard",
        "guard_policy": "strict",
        "findings": [{"rule": "torch-compute-in-forward", "line": 12, "message": "torch.relu in forward"}],
    }
    text = P.coder_repair(TASK, KERNEL, "fix", "cpu", failure=feedback.error_log(result)).messages[0].content
    assert "[torch-compute-in-forward] line 12: torch.relu in forward" in text
    assert "guard policy: strict" in text


# ---------------------------------------------------------------------------------------------- optimize


@pytest.mark.parametrize("metric_set", ["default", "large"])
def test_optimize_prompt_contains_every_collected_metric_value(metric_set: str) -> None:
    profile = _ncu_profile(metric_set)
    metrics, kind = feedback.optimize_feedback(profile)
    result = _on_h200(_eval("correct"), SHARE)
    prompt = P.judge_optimize(
        TASK,
        KERNEL,
        feedback.target_text(result, "cuda"),
        metrics,
        kind,  # type: ignore[arg-type]
        "cuda",
        feedback.timing_text(result),
        share=feedback.share_text(result),
    )
    text = _text(prompt)
    ((kernel, values),) = profile["metrics"].items()
    requested = resolve_metric_set(metric_set)
    checked = 0
    for name in requested:
        if name not in values or not isinstance(values[name][0], (int, float)):
            continue
        row = next(line for line in text.splitlines() if line.startswith(f"{name} | "))
        assert _number(row.split(" | ")[1]) == pytest.approx(values[name][0], rel=1e-3, abs=1e-9), row
        checked += 1
    assert checked >= 35  # 37 numeric values in the default capture, more in the large one
    # the paper's 24 by name, the Hopper stand-ins marked, our reading, ncu's rules, the GPU
    assert "paper #24" in text and "SOLBottleneck" in text and "latency-bound" in text
    if metric_set == "large":
        assert "stand-in on Hopper+" in text
    assert "132 SMs" in text and "4,800 GB/s" in text and "Tensor cores: TF32, BF16, FP16, FP8" in text


def test_optimize_prompt_shows_the_share_and_the_largest_library_kernels() -> None:
    result = _on_h200(_eval("correct"), SHARE)
    share = feedback.share_text(result)
    text = P.judge_optimize(TASK, KERNEL, "GPU", None, "none", "cuda", share=share).messages[0].content
    assert "31% of the forward's device time" in text and "cudnn_conv_implicit_gemm_LIBMARK: 0.101 ms" in text
    assert "fused_bias_relu_kernel" in text
    assert "[... 2 smaller library kernel(s) not shown ...]" in text  # 7 library kernels, 5 shown
    assert (
        "Where the device time goes"
        not in P.judge_optimize(TASK, KERNEL, "GPU", None, "none").messages[0].content
    )


def test_gpu_spec_comes_from_the_table_even_when_profiling_failed() -> None:
    result = _on_h200(_eval("correct"))
    metrics, kind = feedback.optimize_feedback({"kind": "none", "unavailable": {"reason": "no-ncu"}})
    assert (metrics, kind) == (None, "none")
    text = (
        P.judge_optimize(TASK, KERNEL, feedback.target_text(result, "cuda"), metrics, kind)
        .messages[0]
        .content
    )
    assert "NVIDIA H200" in text and "132 SMs" in text and "228 KiB shared memory" in text
    assert "65,536 registers" in text and "FP32 ridge point" in text
    unknown = feedback.gpu_spec_text("NVIDIA Imaginary X1")
    assert "NVIDIA Imaginary X1" in unknown and "not in cudaforge's spec table" in unknown


# ---------------------------------------------------------------------------------------------- standing facts


def test_coder_prompts_carry_the_gpu_spec_and_the_configured_contract() -> None:
    options = EvalOptions(device="cuda", trials=7, tolerances={"float32": 2e-4})
    context = PromptContext(
        target=feedback.target_text(_on_h200(_eval("correct")), "cuda"),
        contract=Contract.from_settings(options.settings()),
    )
    suggestion = Suggestion.from_text("optimize", "vectorize")
    prompts = [
        P.coder_seed(TASK, "cuda", context=context),
        P.coder_repair(TASK, KERNEL, "fix", "cuda", failure="boom", context=context),
        P.coder_optimize(TASK, KERNEL, suggestion, "cuda", context=context),
    ]
    for prompt in prompts:
        text = _text(prompt)
        assert "NVIDIA H200" in text and "132 SMs" in text and "227 KiB per block" in text
        assert "7 trials" in text and "float32 2e-4" in text and "bfloat16 1e-2" in text
        assert "float32 1e-4" not in text  # the configured 2e-4, not the default


def test_default_contract_is_the_evaluators_default() -> None:
    text = Contract.from_settings(EvalOptions().settings()).text()
    assert f"{EvalOptions().trials} trials" in text
    for dtype in DEFAULT_TOLERANCES:
        assert dtype in text
    assert "float32 1e-4" in text and "float16 1e-2" in text
    assert P.coder_seed(TASK).system.count("float32 1e-4") == 1  # defaults apply without a context


def test_policy_text_differs_between_default_and_strict() -> None:
    default = P.coder_system("cuda", "default")
    strict = P.coder_system("cuda", "strict")
    assert default != strict
    assert "partial replacement is allowed" in default and "share of the forward's device time" in default
    assert "`nn` layers" in default and "ATen calls inside your extension are allowed" in default
    assert "No PyTorch compute on the hot path" in strict and "partial replacement" not in strict
    # the Judge is held to the same policy
    judge_default = _text(P.judge_repair(TASK, KERNEL, "log", guard_policy="default"))
    judge_strict = _text(P.judge_repair(TASK, KERNEL, "log", guard_policy="strict"))
    assert "partial replacement is allowed" in judge_default and "full replacement" in judge_strict
    cpu = P.coder_system("cpu", "default")
    assert "not measured" in cpu
    with pytest.raises(ValueError, match="guard policy"):
        P.coder_system("cuda", "lenient")


def test_rules_the_session_changed_are_named() -> None:
    context = PromptContext(
        guard=GuardChanges.from_result(
            {"guard_refuse": ["functional-in-forward"], "relaxed_rules": ["fp-downcast"]}
        )
    )
    text = P.coder_system("cuda", "default", context)
    assert "`functional-in-forward`" in text and "`fp-downcast`" in text
    assert (
        GuardChanges.from_result(object()) == GuardChanges()
    )  # a result from before the guard-policy fields


def test_seed_asks_for_speed_from_the_first_answer() -> None:
    text = P.coder_seed(TASK).messages[0].content
    assert "fastest kernel you can make correct" in text and "straightforward" not in text


# ---------------------------------------------------------------------------------------------- history


def _session_with_rounds(tmp_path: Path) -> SessionRepo:
    session = SessionRepo.create(tmp_path / "sessions", EXAMPLES / "tasks" / "relu.py", name="history")
    correct = _on_h200(_eval("correct"))
    session.record_iteration(IterationRecord(KERNEL, _eval("compile_error"), phase="seed"))
    repair = {"mode": "repair", "critical_issue": "REPAIR-MARK undeclared name", "parsed": True}
    session.record_iteration(
        IterationRecord(
            KERNEL,
            correct,
            phase="repair",
            suggestion={
                "proposed": repair,
                "approved": repair,
                "approved_by": "auto",
                "edited": False,
                "rejected": [],
            },
        )
    )
    rejected = {"mode": "optimize", "bottleneck": "REJECTED-IDEA shared-memory tiling", "parsed": True}
    edited = {
        "mode": "optimize",
        "bottleneck": "scalar loads",
        "optimization_method": "float4 loads",
        "parsed": True,
    }
    session.record_iteration(
        IterationRecord(
            KERNEL,
            correct | {"speedup": 1.37},
            phase="optimize",
            suggestion={
                "proposed": edited,
                "approved": edited,
                "approved_by": "human",
                "edited": True,
                "rejected": [{"suggestion": rejected, "note": "HUMAN-NOTE: a 1-D relu has no reuse to tile"}],
            },
        )
    )
    return session


def test_history_table_shows_the_humans_rejection_note_to_both_agents(tmp_path: Path) -> None:
    session = _session_with_rounds(tmp_path)
    try:
        options = EvalOptions(device="cuda", trials=5)
        context, policy = round_context(session, session.current_branch, options)
    finally:
        session.close()
    assert policy == "default"
    table = context.history
    assert "HUMAN-NOTE: a 1-D relu has no reuse to tile" in table
    assert "REJECTED-IDEA shared-memory tiling" in table and "rejected (human)" in table
    assert "scalar loads -> float4 loads" in table and "edited (human)" in table and "1.37x" in table
    assert "0 | seed" in table and "compile_error" in table and "REPAIR-MARK" in table
    judge = P.judge_optimize(TASK, KERNEL, context.target, None, "none", "cuda", context=context)
    coder = P.coder_optimize(TASK, KERNEL, "plan", "cuda", context=context)
    for prompt in (judge, coder):
        assert "HUMAN-NOTE" in prompt.messages[0].content
    assert "unless you say why it will work this time" in judge.messages[0].content
    # the target came from the latest result's GPU name, with no profile at all
    assert "132 SMs" in context.target


def test_history_is_bounded_with_a_visible_marker() -> None:
    rows = [
        history.HistoryRow(
            i, "optimize", f"idea {i} " + "x" * 400, "correct", 1.0 + i / 10, "approved (policy:auto)"
        )
        for i in range(30)
    ]
    table = history.render(rows, max_rows=12)
    assert "[... 18 older row(s) not shown ...]" in table
    assert "idea 29" in table and "idea 17 " not in table and "…" in table
    assert len(table.splitlines()) == 14
    assert history.render([]) == ""


def test_no_placeholder_is_left_with_a_full_context(tmp_path: Path) -> None:
    context = PromptContext(target="GPU: X", history="0 | seed | first | correct | 1.00x | — | —")
    for prompt in (
        P.coder_seed(TASK, "cpu", guard_policy="strict", context=context),
        P.coder_repair(TASK, KERNEL, "fix", failure="log", context=context),
        P.coder_optimize(TASK, KERNEL, "plan", timing="1 ms", context=context),
        P.judge_repair(TASK, KERNEL, "log", context=context),
        P.judge_optimize(TASK, KERNEL, "GPU", "m", "ncu", share="s", context=context),
    ):
        assert not re.search(r"\$\{?[A-Za-z_]\w*", _text(prompt)), prompt.kind


# ---------------------------------------------------------------------------------------------- the loop


@pytest.mark.slow
def test_the_loop_passes_failure_contract_and_history_to_the_agents(tmp_path: Path, ext_cache: Path) -> None:
    from engine.loop.machine import FINISHED
    from tests.loop_helpers import make_loop, new_session

    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "repair_flow", rounds=2)
    assert loop.run() == FINISHED
    _, repair, optimize = session.history()
    calls = {(c["role"], c["kind"]): c for item in (repair, optimize) for c in item.transcript}
    coder_repair = calls[("coder", "repair")]
    # the Coder sees the compiler's complaint itself, next to the Judge's diagnosis
    assert "undeclared_thing_42" in coder_repair["messages"][0]["content"]
    assert "Critical issue:" in coder_repair["messages"][0]["content"]
    # the correctness bar of the loop's EvalOptions (tests/loop_helpers.fast_eval: 2 trials)
    assert "2 trials" in coder_repair["system"] and "float32 1e-4" in coder_repair["system"]
    judge_optimize = calls[("judge", "optimize")]["messages"][0]["content"]
    assert "0 | seed | first kernel from the reference | compile_error" in judge_optimize
    assert "1 | repair |" in judge_optimize and "approved (policy:auto)" in judge_optimize
    session.close()


def test_prompt_sizes_stay_bounded_when_every_section_is_past_its_cap() -> None:
    from benchmarks.prompt_budget import TASK_DIR, measure_current

    figures = measure_current(
        (TASK_DIR / "task.py").read_text(), (TASK_DIR / "kernel.py").read_text(), lambda t: (len(t) + 3) // 4
    )
    stress = figures["stress: every section past its cap"]
    # caps: failure 12k chars, metrics 16k, history 4k, share 2k; the task and kernel are not clipped
    assert max(stress.values()) < 8_000, stress
    assert all(figures["with history"][k] >= figures["no history"][k] for k in stress)


def test_ncu_rule_results_appear_once_in_full() -> None:
    text, kind = feedback.optimize_feedback(_ncu_profile("default"))
    assert kind == "ncu" and text is not None
    assert text.count("SOLBottleneck") == 1 and "Look at Scheduler Statistics" in text


def test_torch_profiler_feedback_says_why_there_are_no_counters() -> None:
    profile = {
        "kind": "torch-profiler",
        "summary": {"kind": "torch-profiler", "text": "- relu_kernel: 98.0 µs over 1 call(s)", "data": {}},
        "unavailable": {"reason": "no-permission", "message": "ERR_NVGPUCTRPERM\nmore", "hint": ""},
    }
    text, kind = feedback.optimize_feedback(profile)
    assert kind == "torch-profiler"
    assert (
        "no-permission — ERR_NVGPUCTRPERM" in text and "relu_kernel: 98.0 µs" in text and "more" not in text
    )


def test_round_context_takes_the_policy_and_changed_rules_from_the_options(tmp_path: Path) -> None:
    from types import SimpleNamespace

    session = _session_with_rounds(tmp_path)
    try:
        options = SimpleNamespace(
            device="cuda",
            guard_policy="strict",
            guard_refuse=("functional-in-forward",),
            relax=("fp-downcast",),
            settings=lambda: {"trials": 9, "tolerances": {"float32": 3e-4}},
        )
        context, policy = round_context(session, session.current_branch, options)
        # options from before the guard-policy fields: the latest result's record stands in
        older, older_policy = round_context(session, session.current_branch, EvalOptions(device="cuda"))
    finally:
        session.close()
    assert policy == "strict" and context.guard == GuardChanges(("functional-in-forward",), ("fp-downcast",))
    assert context.contract == Contract(9, {**DEFAULT_TOLERANCES, "float32": 3e-4})
    assert older_policy == "default" and older.contract.trials == EvalOptions().trials
    text = P.coder_system("cuda", policy, context)
    assert "full replacement" in text and "`functional-in-forward`" in text and "9 trials" in text


def test_a_16_bit_task_tells_both_agents_its_dtype_and_bar(tmp_path: Path) -> None:
    """A task extracted from a bf16 model (``cudaforge extract --dtype bf16``) names its dtype; the round's
    contract, and so the Coder's and the Judge's prompts, say it and its tolerance."""
    from sessions.repo import SessionRepo

    bf16_task = (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Linear):\n    def __init__(self, a, b):\n"
        "        super().__init__(a, b)\n        self.to(torch.bfloat16)\n\n\ndef get_inputs():\n"
        "    return [torch.randn((8, 16), dtype=torch.bfloat16)]\n\n\ndef get_init_inputs():\n    return [16, 4]\n"
    )
    with SessionRepo.create(tmp_path, task_source=bf16_task, task_name="linear") as session:
        context, _ = round_context(session, session.current_branch, EvalOptions(device="cuda"))
    assert context.contract.precision == ("bfloat16",)
    judge = P.judge_optimize(bf16_task, "class ModelNew: ...", "H200", None, "none", context=context)
    for text in (P.coder_system("cuda", "default", context), judge.messages[0].content):
        assert "This task computes in bfloat16" in text and "bfloat16 1e-2" in text
    plain = Contract.from_settings({}, "import torch\n\ndef get_inputs():\n    return [torch.randn(4)]\n")
    assert plain.precision == () and "This task computes in" not in plain.text()
