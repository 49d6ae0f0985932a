"""What the agents are told about a kernel's evaluation, and what a round cost.

The Judge sees only the latest kernel and its feedback (DESIGN §2): for a failed kernel a log
assembled from the EvalResult (verdict, messages, Python error, compiler output, worker output),
for a correct one its timing and the hardware/profile text. These helpers turn ``eval.json`` and
``profile.json`` dicts into that text so the loop itself stays about control flow.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable, Mapping
from typing import Any

from engine.agents.prompts import FEEDBACK_KINDS

MAX_BUILD_LOG_LINES = 200


def error_log(result: Mapping[str, Any]) -> str:
    """The Judge's repair input: why this kernel is not correct, most telling facts first."""
    lines = [f"Verdict: {result.get('status', '?')} (stage reached: {result.get('stage', '?')})"]
    lines += [f"- {m}" for m in result.get("messages") or []]
    for flag in result.get("flags") or []:
        lines.append(f"- guard flag: {flag}")
    for finding in result.get("findings") or []:
        lines.append(
            f"- guard finding [{finding.get('rule')}] line {finding.get('line')}: {finding.get('message')}"
        )
    error = result.get("error") or {}
    if error:
        lines.append(f"Python error: {error.get('type')}: {error.get('message')}")
        if error.get("traceback"):
            lines += ["Traceback:", str(error["traceback"]).rstrip()]
    failed = [t for t in result.get("trials") or [] if not t.get("passed")]
    for trial in failed[:3]:
        lines.append(f"Trial failed: {_trial_text(trial)}")
    build_log = ((result.get("build") or {}).get("log") or "").rstrip()
    if build_log and result.get("status") == "compile_error":
        tail = build_log.splitlines()[-MAX_BUILD_LOG_LINES:]
        lines += ["Build log:", *tail]
    stderr = (result.get("stderr_tail") or "").rstrip()
    if stderr and result.get("status") in ("runtime_error", "timeout", "incorrect"):
        lines += ["Last worker output:", stderr]
    return "\n".join(lines)


def _trial_text(trial: Mapping[str, Any]) -> str:
    parts = [f"{k}={trial[k]}" for k in ("seed", "max_abs_error", "message") if trial.get(k) is not None]
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


def profile_feedback(profile: Mapping[str, Any] | None) -> tuple[str | Mapping[str, Any] | None, str]:
    """``(metrics, feedback_kind)`` for the Judge from a profile.json dict (None → no feedback)."""
    if not profile:
        return None, "none"
    kind = profile.get("kind") if profile.get("kind") in FEEDBACK_KINDS else "ncu"
    if kind == "none":
        return None, "none"
    summary = profile.get("summary")
    text = profile.get("judge_block") or (summary.get("text") if isinstance(summary, Mapping) else summary)
    return (text or profile), kind


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
