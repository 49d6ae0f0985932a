"""Prompt builders: what each of the five prompts carries, for both backends."""

from __future__ import annotations

import re

import pytest

from engine.agents import Suggestion, parse_suggestion
from engine.agents import prompts as P

REF = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)  # REF_MARK\n"
KERNEL = "class ModelNew(nn.Module):\n    pass  # KERNEL_MARK\n"
PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_]\w*")


def _all_text(prompt: P.Prompt) -> str:
    return prompt.system + "\n".join(m.content for m in prompt.messages)


def test_seed_cuda_teaches_the_fast_layout_with_the_worked_example():
    p = P.coder_seed(REF, "cuda")
    assert (p.role, p.kind, len(p.messages)) == ("coder", "seed", 1)
    user = p.messages[0].content
    assert P.example_kernel("cuda").strip() in user  # the example verbatim
    assert P.template_text("example_reference.py").strip() in user
    assert "REF_MARK" in user
    for rule in [
        "never a torch, ATen or c10 header",
        "cudaStream_t",
        "<torch/extension.h>",
        "getCurrentCUDAStream()",
        "no_implicit_headers=True",
        "partial replacement is allowed",  # guard policy `default` (KernelBench's)
        "try/except",
        "extra CUDA streams",
        "caching of outputs",
    ]:
        assert rule in p.system, rule
    assert "CUDA kernels for an NVIDIA GPU" in p.system
    strict = P.coder_seed(REF, "cuda", guard_policy="strict")
    assert "No PyTorch compute on the hot path" in strict.system
    assert "No PyTorch compute on the hot path" not in p.system


def test_seed_cpu_uses_the_cpp_only_example():
    p = P.coder_seed(REF, "cpu")
    user = p.messages[0].content
    assert P.example_kernel("cpu").strip() in user
    assert "cuda_sources" not in user and "cuda_sources" not in p.system
    assert "C++ kernels for the CPU" in p.system and "-O3" in p.system


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend"):
        P.coder_seed(REF, "rocm")  # type: ignore[arg-type]


def test_coder_repair_carries_only_the_latest_kernel_and_the_approved_suggestion():
    s = parse_suggestion(
        '{"critical_issue": "grid too small", "why_it_matters": "tail", "minimal_fix_hint": "ceil-divide"}',
        "repair",
    )
    p = P.coder_repair(REF, KERNEL, s)
    assert (p.role, p.kind, len(p.messages)) == ("coder", "repair", 1)
    user = p.messages[0].content
    assert "KERNEL_MARK" in user and "REF_MARK" in user
    assert "Critical issue: grid too small" in user and "Minimal fix hint: ceil-divide" in user
    assert p.system == P.coder_system("cuda")


def test_coder_optimize_with_human_text_and_timing():
    p = P.coder_optimize(REF, KERNEL, "Use float4 loads.", "cpu", timing="0.8 ms vs 1.1 ms (1.38x)")
    user = p.messages[0].content
    assert "Use float4 loads." in user and "0.8 ms vs 1.1 ms (1.38x)" in user and "KERNEL_MARK" in user
    assert "Its timing" not in P.coder_optimize(REF, KERNEL, "x").messages[0].content


def test_judge_repair_asks_for_exactly_one_issue_as_json_and_clips_long_logs():
    log = "HEAD_ERROR first compiler error\n" + "noise line\n" * 5000 + "TAIL_TRACEBACK RuntimeError: boom"
    p = P.judge_repair(REF, KERNEL, log)
    user = p.messages[0].content
    assert (p.role, p.kind) == ("judge", "repair")
    assert "HEAD_ERROR" in user and "TAIL_TRACEBACK" in user and "characters cut" in user
    assert len(user) < len(log)
    for key in ("critical_issue", "why_it_matters", "minimal_fix_hint"):
        assert f'"{key}"' in user
    assert "exactly one item" in p.system and "JSON" in p.system


@pytest.mark.parametrize(
    ("kind", "says"),
    [("ncu", "Nsight Compute"), ("torch-profiler", "torch.profiler"), ("none", "no profiler data")],
)
def test_judge_optimize_says_which_feedback_it_got(kind, says):
    metrics = {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 91.5}
    p = P.judge_optimize(REF, KERNEL, "GPU: NVIDIA H200\nSMs: 132", metrics, kind, timing="1.0 ms vs 1.2 ms")
    user = p.messages[0].content
    assert says in user
    assert "GPU: NVIDIA H200\nSMs: 132" in user and "1.0 ms vs 1.2 ms" in user and "KERNEL_MARK" in user
    assert ('"dram__throughput.avg.pct_of_peak_sustained_elapsed": 91.5' in user) is (kind != "none")
    for key in ("key_metrics", "bottleneck", "optimization_method", "modification_plan"):
        assert f'"{key}"' in user


def test_judge_optimize_refuses_unknown_feedback_kind():
    with pytest.raises(ValueError, match="feedback_kind"):
        P.judge_optimize(REF, KERNEL, "", None, "nsys")  # type: ignore[arg-type]


def test_no_placeholder_is_left_unfilled():
    prompts = [
        P.coder_seed(REF, "cuda"),
        P.coder_seed(REF, "cpu"),
        P.coder_repair(REF, KERNEL, "fix"),
        P.coder_optimize(REF, KERNEL, Suggestion.from_text("optimize", "plan")),
        P.judge_repair(REF, KERNEL, "log", "cpu"),
        P.judge_optimize(REF, KERNEL, "spec", "metrics", "ncu"),
    ]
    for p in prompts:
        assert not PLACEHOLDER.search(_all_text(p)), (p.role, p.kind, PLACEHOLDER.search(_all_text(p)))


def test_request_carries_system_and_messages():
    req = P.coder_seed(REF).to_request(max_output_tokens=777)
    assert req.system == P.coder_system("cuda") and req.max_output_tokens == 777
    assert req.messages_as_dicts()[0]["role"] == "user"
