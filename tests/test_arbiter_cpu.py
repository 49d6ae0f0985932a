"""The float64 arbiter for weak outputs end to end on CPU: the real worker, real torch (issue 45 item 2;
ARCHITECTURE.md §3, "Defences").

``groupnorm_mean`` is KernelBench level 2 problem 41's ending: the exact answer is 0, the float32
reference is rounding noise, so the spread rule alone failed an honest kernel (its error 1.2-1.6x the
noise "spread"). The candidates are plain PyTorch (no build): the static guard is off, the runtime guards
and the weak-output checks run as always.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.arbiter import CONSTANT_MESSAGE
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult

FIXTURES = Path(__file__).parent / "fixtures" / "defences"

pytestmark = pytest.mark.slow

GROUPNORM_MEAN = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(groups, out_features)

    def forward(self, x):
        h = self.gemm(x)
        g = h.view(h.shape[0], self.norm.num_groups, -1)
        # one pass: E[x^2] - E[x]^2, and the mean summed in reverse: rounds differently from torch
        mean = g.sum(-1, keepdim=True) / g.shape[-1]
        var = (g * g).mean(-1, keepdim=True) - mean * mean
        y = ((g - mean) * torch.rsqrt(var + self.norm.eps)).reshape(h.shape)
        out = y.flip(1).mean(1, keepdim=True)
        return {answer}
"""

SOFTMAX_ZEROS = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
"""


def run(task: str, source: str, cache: Path) -> EvalResult:
    options = EvalOptions(device="cpu", do_timing=False, cache_root=cache, static_guard=False)
    return evaluate((FIXTURES / f"{task}.py").read_text(), source, options, task_name=task)


def runtime_rules(result: EvalResult) -> list[str]:
    return [f["rule"] for f in result.findings if f.get("source") == "runtime"]


@pytest.mark.parametrize("answer", ["out", "torch.zeros_like(out)"])
def test_an_honest_answer_to_a_task_whose_exact_answer_is_constant_passes_by_the_float64_arbiter(
    answer: str, tmp_path: Path
) -> None:
    # the reordered kernel failed the spread rule (~1.3x the noise); exact zeros were output-degenerate
    result = run("groupnorm_mean", GROUPNORM_MEAN.format(answer=answer), tmp_path)
    assert result.status == "correct", result.messages
    assert any(CONSTANT_MESSAGE in m and "float64 arbiter" in m for m in result.messages), result.messages
    assert result.arbiter is not None and result.arbiter["constant_to_rounding"] is True
    assert all(o["accepted"] and o["constant"] for o in result.arbiter["outputs"])
    assert [f for f in result.flags if CONSTANT_MESSAGE in f and "not evidence" in f]
    assert EvalResult.from_json(result.to_json()).arbiter == result.arbiter


@pytest.mark.parametrize(
    ("answer", "status", "rules"),
    [
        ("out + 3e-5 * torch.sin(7 * x[:, :1])", "incorrect", []),  # inside atol, ~1000x the rounding
        ("torch.full_like(out, 5e-5)", "rejected", ["output-degenerate"]),  # a constant inside atol
    ],
)
def test_a_wrong_answer_inside_the_tolerance_is_not_rescued_by_the_arbiter(
    answer: str, status: str, rules: list[str], tmp_path: Path
) -> None:
    result = run("groupnorm_mean", GROUPNORM_MEAN.format(answer=answer), tmp_path)
    assert result.status == status and runtime_rules(result) == rules, result.messages
    assert all(t.passed for t in result.trials)  # the value check alone would have passed it
    assert result.arbiter is not None and result.arbiter["constant_to_rounding"] is False
    ruling = result.arbiter["outputs"][-1]
    assert not ruling["accepted"] and ruling["candidate_error"] > 100 * ruling["reference_error"]
    assert not [f for f in result.flags if CONSTANT_MESSAGE in f]


def test_zeros_on_a_wide_softmax_are_still_refused_since_its_exact_answer_varies(tmp_path: Path) -> None:
    result = run("softmax_wide", SOFTMAX_ZEROS, tmp_path)
    assert result.status == "rejected" and runtime_rules(result) == ["output-degenerate"], result.messages
    assert "output is all zeros where the reference's is not" in result.messages[-1]
    # the arbiter was asked and said no: the float64 softmax is not constant, zeros are far from it
    assert result.arbiter is not None and result.arbiter["outputs"]
    ruling = result.arbiter["outputs"][0]
    assert not ruling["accepted"] and not ruling["constant"]
    assert ruling["candidate_error"] > 1e6 * ruling["reference_error"]


def test_a_reference_that_fails_in_float64_falls_back_to_the_spread_rule_and_says_so(tmp_path: Path) -> None:
    result = run("groupnorm_mean_float32", GROUPNORM_MEAN.format(answer="out"), tmp_path)
    assert result.status == "incorrect", result.messages
    assert "of the reference's spread" in result.messages[-1]
    assert "the float64 arbiter could not judge it, so the spread rule decides" in result.messages[-1]
    assert result.arbiter is not None and result.arbiter["outputs"] == []
    assert result.arbiter["unavailable"].startswith("the reference failed in float64: RuntimeError")
