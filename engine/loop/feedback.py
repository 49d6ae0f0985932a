"""What the agents are told about a kernel's evaluation, and what a round cost.

The Judge sees only the latest kernel and its feedback (ARCHITECTURE.md §2): for a failed kernel a report
assembled from the EvalResult (verdict, messages, guard findings, compiler output from the first
error on, Python error, failing trials, worker output), which the Coder's repair prompt carries too;
for a correct one its timing, the GPU spec (from the spec table by name, profiled or not), every
requested NCU metric with our reading of them, and the own-kernel share. These helpers turn
``eval.json`` and ``profile.json`` dicts into that text so the loop itself stays about control flow.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Iterable, Mapping
from typing import Any

from engine.agents.prompts import FEEDBACK_KINDS, FeedbackKind
from engine.profile.metric_table import metric_table, requested_metrics, rules_text
from engine.profile.result import FEEDBACK_KIND_LINES
from engine.profile.specs import format_for_prompt, lookup

MAX_BUILD_LOG_LINES = 200
MAX_LINE_CHARS = 500
#: library kernels listed for the Judge under "largest library kernels left"
MAX_LIBRARY_KERNELS = 5
_RULE_LINE = re.compile(r"^\s+\[[A-Z]+\] \w+: ")
_ERROR_LINE = re.compile(r"\berror\b|^FAILED:", re.IGNORECASE)
_TENSOR_CORE_DTYPES = (("tf32", "TF32"), ("bf16", "BF16"), ("fp16", "FP16"), ("fp8", "FP8"))


def build_log_excerpt(
    log: str, max_lines: int = MAX_BUILD_LOG_LINES, line_chars: int = MAX_LINE_CHARS
) -> str:
    """A long build log cut to what a fix needs: from just before the first error on, and the end.

    nvcc and ninja logs open with long command lines and warnings; the first ``error`` is what the
    Coder must fix first, so the excerpt starts there. Every cut says how much it removed.
    """
    lines = [
        line
        if len(line) <= line_chars
        else f"{line[:line_chars]}[... {len(line) - line_chars} characters cut]"
        for line in log.rstrip().splitlines()
    ]
    if len(lines) <= max_lines:
        return "\n".join(lines)
    first = next((i for i, line in enumerate(lines) if _ERROR_LINE.search(line)), 0)
    start = max(0, first - 5)
    head_n = max_lines * 2 // 3
    tail_start = len(lines) - (max_lines - head_n)
    kept: list[str] = []
    if start:
        kept.append(f"[... {start} lines cut before the first error ...]")
    if start + head_n >= tail_start:
        return "\n".join([*kept, *lines[start:]])
    kept += lines[start : start + head_n]
    kept.append(f"[... {tail_start - start - head_n} lines cut ...]")
    kept += lines[tail_start:]
    return "\n".join(kept)


def error_log(result: Mapping[str, Any]) -> str:
    """The repair input of both agents: why this kernel is not correct, most telling facts first.

    For a compile error the compiler's own lines come before the Python traceback (which only says
    that the build failed), so that clipping the whole log never loses the first compiler error.
    """
    lines = [f"Verdict: {result.get('status', '?')} (stage reached: {result.get('stage', '?')})"]
    lines += [f"- {m}" for m in result.get("messages") or []]
    for flag in result.get("flags") or []:
        lines.append(f"- guard flag: {flag}")
    if result.get("status") == "rejected" and result.get("guard_policy"):
        lines.append(f"- guard policy: {result['guard_policy']}")
    for finding in result.get("findings") or []:
        lines.append(
            f"- guard finding [{finding.get('rule')}] line {finding.get('line')}: {finding.get('message')}"
        )
    build_log = ((result.get("build") or {}).get("log") or "").rstrip()
    if build_log and result.get("status") == "compile_error":
        lines += ["Build log:", build_log_excerpt(build_log)]
    error = result.get("error") or {}
    if error:
        lines.append(f"Python error: {error.get('type')}: {error.get('message')}")
        if error.get("traceback") and build_log and result.get("status") == "compile_error":
            lines.append("(Python traceback left out: it only says that the build above failed.)")
        elif error.get("traceback"):
            lines += ["Traceback:", str(error["traceback"]).rstrip()]
    failed = [t for t in result.get("trials") or [] if not t.get("passed")]
    for trial in failed[:3]:
        lines.append(f"Trial failed: {_trial_text(trial)}")
    if len(failed) > 3:
        lines.append(f"[... {len(failed) - 3} more failed trial(s) not shown ...]")
    stderr = (result.get("stderr_tail") or "").rstrip()
    if stderr and result.get("status") in ("runtime_error", "timeout", "incorrect"):
        lines += ["Last worker output:", stderr]
    return "\n".join(lines)


def _trial_text(trial: Mapping[str, Any]) -> str:
    keys = ("index", "seed", "max_abs_error", "max_rel_error", "message")
    parts = [f"{k}={trial[k]}" for k in keys if trial.get(k) is not None]
    return ", ".join(parts) or "no details"


def timing_text(result: Mapping[str, Any]) -> str | None:
    """``kernel 0.12 ms vs reference 0.20 ms (1.67x)`` or None when the kernel was not timed."""
    timing = result.get("timing") or {}
    cand, ref = timing.get("candidate") or {}, timing.get("reference") or {}
    if not cand.get("median_ms") or not ref.get("median_ms"):
        return None
    speedup = result.get("speedup")
    tail = f" ({speedup:.2f}x)" if isinstance(speedup, (int, float)) else ""
    return f"kernel {cand['median_ms']:.4f} ms vs reference {ref['median_ms']:.4f} ms{tail}"


def hardware_text(result: Mapping[str, Any]) -> str:
    """A short hardware description when none was given: the GPU's name, or the CPU's."""
    env = result.get("env") or {}
    if result.get("device") == "cuda":
        name = env.get("gpu") or env.get("gpu_name") or "an NVIDIA GPU"
        return f"GPU: {name}"
    cpu = platform.processor() or platform.machine() or "unknown CPU"
    return f"CPU: {cpu}, {os.cpu_count() or '?'} logical cores (C++ extensions on CPU tensors)"


def gpu_name(result: Mapping[str, Any] | None) -> str | None:
    env = (result or {}).get("env") or {}
    return env.get("gpu") or env.get("gpu_name") or None


def gpu_spec_text(name: str | None, compute_capability: tuple[int, int] | None = None) -> str:
    """The target block, from the spec table by device name: it does not depend on profiling.

    A GPU the table lacks still gets its name and a plain statement that its limits are unknown.
    """
    if not name:
        return "GPU: an NVIDIA GPU (model not known yet)"
    spec = lookup(name, compute_capability)
    if spec is None:
        return f"GPU: {name} (not in cudaforge's spec table: peaks and per-SM limits unknown)"
    block = format_for_prompt(spec)
    if spec.name != name:
        block = block.replace(f"GPU: {spec.name}", f"GPU: {name} (table row: {spec.name})", 1)
    tensor = [label for key, label in _TENSOR_CORE_DTYPES if spec.peak_tflops(key)]
    if tensor:
        block += f"\nTensor cores: {', '.join(tensor)} (FP32 math runs on the CUDA cores)"
    return block


def _compute_capability(result: Mapping[str, Any] | None) -> tuple[int, int] | None:
    text = str(((result or {}).get("env") or {}).get("compute_capability") or "")
    match = re.fullmatch(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def target_text(result: Mapping[str, Any] | None, device: str, name: str | None = None) -> str:
    """What the agents are told about the hardware: the GPU spec block on CUDA, the CPU line on CPU."""
    if device != "cuda":
        return hardware_text({"device": "cpu"})
    return gpu_spec_text(gpu_name(result) or name, _compute_capability(result))


def optimize_feedback(profile: Mapping[str, Any] | None) -> tuple[str | None, FeedbackKind]:
    """``(text, feedback_kind)`` for the Judge's optimize prompt, from a profile.json dict.

    Measured values first (every requested metric per own kernel, the paper's 24 under their names),
    then our reading of them (the summary: roofline position, occupancy limiter, stalls), then ncu's
    own rule results. A profile with none of these falls back to its ``judge_block``.
    """
    if not profile:
        return None, "none"
    kind = profile.get("kind") if profile.get("kind") in FEEDBACK_KINDS else "ncu"
    if kind == "none":
        return None, "none"
    parts = []
    unavailable = profile.get("unavailable") or {}
    if unavailable and kind != "ncu":
        message = (str(unavailable.get("message") or "").splitlines() or [""])[0]
        parts.append(f"{FEEDBACK_KIND_LINES[kind]} Reason: {unavailable.get('reason')} — {message}")
    metrics = profile.get("metrics") or {}
    if metrics:
        table = metric_table(metrics, profile.get("launches"), requested_metrics(profile.get("command")))
        parts.append("Measured, per own kernel (every requested metric):\n" + table)
    summary = profile.get("summary")
    summary_text = str((summary.get("text") if isinstance(summary, Mapping) else summary) or "").strip()
    rules = rules_text(profile.get("rules") or [], list(metrics)) if metrics else ""
    if summary_text:
        if rules:  # the summary's clipped rule lines: the full ones follow in their own section
            summary_text = "\n".join(line for line in summary_text.splitlines() if not _RULE_LINE.match(line))
        parts.append("Our reading of the measurements:\n" + summary_text)
    if rules:
        parts.append("Nsight Compute rule results:\n" + rules)
    if not metrics and not summary_text:
        return (profile.get("judge_block") or None), kind
    return "\n\n".join(parts), kind


def share_text(result: Mapping[str, Any] | None, max_library: int = MAX_LIBRARY_KERNELS) -> str:
    """The measured own-kernel share and the largest library kernels left; "" when not measured."""
    share = (result or {}).get("kernel_share")
    if not isinstance(share, Mapping) or share.get("share") is None:
        return ""
    own_ms, lib_ms = share.get("own_ms"), share.get("library_ms")
    times = ""
    if isinstance(own_ms, (int, float)) and isinstance(lib_ms, (int, float)):
        times = f" ({own_ms:.4g} ms own vs {lib_ms:.4g} ms library per forward)"
    lines = [
        f"Own-kernel share: {100.0 * float(share['share']):.0f}% of the forward's device time runs in the"
        f" candidate's own kernels{times}; measured by {share.get('method') or 'the profiler'}."
    ]
    kernels = [k for k in share.get("kernels") or [] if isinstance(k, Mapping)]
    library = [k for k in kernels if not k.get("own")]
    own = [k for k in kernels if k.get("own")]

    def row(k: Mapping[str, Any]) -> str:
        calls = f" over {k['calls']} call(s)" if k.get("calls") else ""
        ms = k.get("ms")
        return (
            f"- {k.get('name')}: {ms:.4g} ms{calls}" if isinstance(ms, (int, float)) else f"- {k.get('name')}"
        )

    if library:
        lines.append("Largest library kernels left (candidates to replace or fuse next):")
        lines += [row(k) for k in library[:max_library]]
        if len(library) > max_library:
            lines.append(f"[... {len(library) - max_library} smaller library kernel(s) not shown ...]")
    else:
        lines.append("No library kernel runs in the forward: all device time is in the own kernels.")
    if own:
        lines.append("Own kernels:")
        lines += [row(k) for k in own[:max_library]]
        if len(own) > max_library:
            lines.append(f"[... {len(own) - max_library} more own kernel(s) not shown ...]")
    return "\n".join(lines)


def usage_totals(records: Iterable[Mapping[str, Any]]) -> tuple[int, float | None]:
    """Tokens and cost of a round's calls; the cost is None when any answered call had no price."""
    tokens, cost, unknown = 0, 0.0, False
    for record in records:
        usage = record.get("usage") or {}
        tokens += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        if record.get("reply") is None:
            continue  # a failed call: nothing billed that we know of
        if record.get("cost_usd") is None:
            unknown = True
        else:
            cost += float(record["cost_usd"])
    return tokens, None if unknown else cost
