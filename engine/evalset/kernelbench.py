"""Results in the shape of KernelBench's ``eval_results.json``, so its analysis scripts read them.

KernelBench's ``scripts/eval_from_generations.py`` (``add_to_eval_results_file``) writes, per run
and level, a JSON object keyed by the problem id (a string, sorted numerically) whose value is a
list of samples::

    {"19": [{"sample_id": 0, "compiled": true, "correctness": true, "metadata": {...},
             "runtime": 0.0123, "runtime_stats": {"mean": ..., "std": ..., "min": ..., "max": ...,
                                                   "num_trials": 100, "hardware": ..., "device": ...}}]}

``runtime`` is the candidate's mean time in ms (-1.0 when not timed), statistics rounded to three
significant figures as KernelBench's ``get_timing_stats`` does. KernelBench's ``KernelExecResult``
also has ``ref_runtime`` / ``ref_runtime_stats``; we fill them from the reference timed in the same
worker. ``metadata`` uses KernelBench's keys where one exists (``compilation_error``,
``runtime_error``, ``correctness_issue``, ``correctness_trials``, ``hardware``, ``device``) and adds
``cudaforge_status``, ``cudaforge_stage`` and ``speedup``.

This is our own code written to the documented shape; nothing of KernelBench is imported. One file
per level: ``OUT/kernelbench/level_<L>/eval_results.json`` (``OUT/kernelbench/eval_results.json``
for pairs whose level is unknown). Pairs without a problem id cannot be keyed and are listed in
``summary.json`` instead.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.evalset import store
from engine.evalset.pairs import Pair

COMPILE_FAILED_STATUSES = ("compile_error", "rejected")


def _sig3(value: float | None) -> float:
    return float(f"{value:.3g}") if value is not None else -1.0


def _stats(stats: dict[str, Any] | None, hardware: str | None, device: str) -> dict[str, Any]:
    if not stats:
        return {}
    out: dict[str, Any] = {
        "mean": _sig3(stats.get("mean_ms")),
        "std": _sig3(stats.get("std_ms")),
        "min": _sig3(stats.get("min_ms")),
        "max": _sig3(stats.get("max_ms")),
        "num_trials": stats.get("n"),
        "median": _sig3(stats.get("median_ms")),
    }
    if hardware:
        out["hardware"] = hardware
    out["device"] = device
    return out


def compiled(data: dict[str, Any]) -> bool:
    """KernelBench's ``compiled``: the candidate built and loaded (it reached the check)."""
    status, stage = data.get("status"), data.get("stage")
    if status in COMPILE_FAILED_STATUSES or status == "harness_error":  # the latter: no verdict at all
        return False
    if status in ("correct", "incorrect"):
        return True
    return stage in ("check", "time", "done")


def entry(pair: Pair, data: dict[str, Any] | None) -> dict[str, Any]:
    """One sample's record; a pair with no verdict is an uncompiled, incorrect sample, as KernelBench
    counts a missing one."""
    sample = pair.sample_id or 0
    if data is None:
        return {"sample_id": sample, "compiled": False, "correctness": False,
                "metadata": {"error": "not evaluated", "cudaforge_status": "pending"},
                "runtime": -1.0, "runtime_stats": {}}  # fmt: skip
    env = data.get("env") or {}
    hardware = env.get("gpu") if data.get("device") == "cuda" else env.get("cpu")
    device = "cuda:0" if data.get("device") == "cuda" else "cpu"
    status = data.get("status")
    messages = data.get("messages") or []
    error = data.get("error") or {}
    metadata: dict[str, Any] = {"hardware": hardware, "device": device}
    trials = data.get("trials") or []
    if trials:
        metadata["correctness_trials"] = f"({sum(1 for t in trials if t.get('passed'))} / {len(trials)})"
    detail = error.get("message") or (messages[-1] if messages else "")
    if status == "compile_error":
        metadata["compilation_error_name"] = error.get("type") or "CompilationError"
        metadata["compilation_error"] = detail
    elif status == "runtime_error":
        metadata["runtime_error_name"] = error.get("type") or (data.get("signal") or "RuntimeError")
        metadata["runtime_error"] = detail
    elif status == "incorrect":
        metadata["correctness_issue"] = detail or "Output mismatch"
    elif status in ("timeout", "rejected"):
        metadata["error"] = detail
    elif status == "harness_error":  # counted like a missing sample: cudaforge failed, not the kernel
        metadata["error"] = f"not evaluated: {detail}"
        metadata["harness_fault"] = data.get("harness_fault")
    metadata.update(cudaforge_status=status, cudaforge_stage=data.get("stage"), speedup=data.get("speedup"))
    timing = data.get("timing") or {}
    candidate, reference = timing.get("candidate"), timing.get("reference")
    return {
        "sample_id": sample,
        "compiled": compiled(data),
        "correctness": status == "correct",
        "metadata": metadata,
        "runtime": _sig3(candidate.get("mean_ms")) if candidate else -1.0,
        "runtime_stats": _stats(candidate, hardware, device),
        "ref_runtime": _sig3(reference.get("mean_ms")) if reference else -1.0,
        "ref_runtime_stats": _stats(reference, hardware, device),
    }


def write_kernelbench(out: Path, pairs: Sequence[Pair]) -> tuple[list[Path], list[str]]:
    """Write one ``eval_results.json`` per level; (files written, names of pairs left out)."""
    by_level: dict[int | None, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    left_out: list[str] = []
    for pair in pairs:
        if pair.problem_id is None:
            left_out.append(pair.name)
            continue
        data = store.read(store.result_path(out, pair.name))
        by_level[pair.level][str(pair.problem_id)].append(entry(pair, data))
    written = []
    for level, problems in sorted(by_level.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        folder = out / "kernelbench" / (f"level_{level}" if level is not None else "")
        folder.mkdir(parents=True, exist_ok=True)
        ordered = {
            key: sorted(samples, key=lambda s: s["sample_id"])
            for key, samples in sorted(problems.items(), key=lambda item: int(item[0]))
        }
        path = folder / "eval_results.json"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(ordered, indent=4) + "\n", encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written, left_out
