"""``torch.compile`` baselines beside eager: how fast the reference gets without writing a kernel.

Why (ARCHITECTURE.md §3, "Baselines beside eager"): a kernel that beats eager PyTorch may still lose
to ``torch.compile``, which is what a user would otherwise reach for. KernelBench's maintainers keep
eager as the level-1 figure, so eager stays the headline; these are shown beside it when asked for
(``cudaforge eval --compile-baseline MODE``, ``[eval] compile_baselines`` for the loop).

Each mode runs in a fresh process (``python -m engine.eval.baselines``): the task's ``Model`` with the
same seeded inputs as the evaluator, compiled (``torch.compile(model, mode=...)``), checked against
eager, and timed against eager with the evaluator's own timing (``engine.eval.timing``). The speedup
against a baseline is then::

    speedup_vs_mode = speedup_vs_eager × compiled_ms / eager_ms

with compiled ÷ eager from that one process, so each ratio is between two things timed side by side.
Only the reference (the user's own task) runs there; no candidate code does. A mode that fails, or
whose output differs from eager, is recorded as such and gives no speedup.

A measured baseline is kept beside the build cache (``<cache>-baselines/<key>.json``: the worker, which
runs candidate code, may write the cache itself) and reused for a day
by every later evaluation of the same reference, mode, device, GPU, torch and timing settings: it is a
property of the reference, not of the candidate, and max-autotune's compile takes a minute or more, so
measuring it again in every round of a session would add that minute to each round (seen on the H200:
a three-round demo session with both modes ran past four minutes). A reused baseline says so
(``reused``: the age in seconds); failures are never kept, so a failed mode is tried again.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import COMPILE_MODES as MODES  # torch.compile's modes offered (KernelBench's use both)

SCHEMA = 1
TIMEOUT_S = 900.0  # one mode's compile and timing; max-autotune tries many configurations
REUSE_S = 24 * 3600.0  # a kept baseline is measured again after this long (drivers, clocks, a new day)


def speedup_against(speedup: float | None, baseline: dict[str, Any] | None) -> float | None:
    """The kernel's speedup over the compiled reference; None when either side is missing or the compiled
    output did not match eager."""
    if speedup is None or not baseline or not baseline.get("compiled_matches"):
        return None
    eager, compiled = baseline.get("eager_ms"), baseline.get("compiled_ms")
    return speedup * compiled / eager if eager and compiled else None


def compile_ratio(baseline: dict[str, Any] | None) -> float | None:
    """eager ÷ compiled: where torch.compile itself sits on the eager speedup scale (None: not usable)."""
    if not baseline or not baseline.get("compiled_matches"):
        return None
    eager, compiled = baseline.get("eager_ms"), baseline.get("compiled_ms")
    return eager / compiled if eager and compiled else None


def against_text(speedup: float | None, baselines: dict[str, Any] | None) -> str:
    """``vs compile 1.20x · max-autotune 0.95x``: the speedup against each measured mode ("" when none)."""
    parts = []
    for mode, baseline in (baselines or {}).items():
        value = speedup_against(speedup, baseline)
        if value is not None:
            parts.append(f"{'compile' if mode == 'default' else mode} {value:.2f}x")
    return ("vs " + " · ".join(parts)) if parts else ""


def measure(
    task_path: Path, device_name: str, mode: str, trials: int, budget_s: float, seed: int,
    tolerances: dict[str, float] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Compile the task's reference in ``mode``, check it against eager (at the evaluation's tolerances:
    a whole model's check has a bar of its own, engine.model.noise), time both (one process)."""
    import torch

    from engine.eval.compare import compare_outputs
    from engine.eval.timing import TimingPlan, time_models
    from engine.eval.values import to_device
    from engine.tasks import import_module_from_source

    device = torch.device("cuda" if device_name == "cuda" else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the evaluator times the reference (EvalOptions.cpu_threads)
    task = import_module_from_source(task_path.read_text(encoding="utf-8"), str(task_path))
    torch.manual_seed(seed)
    init_inputs = list(task.get_init_inputs())
    torch.manual_seed(seed)
    with torch.device(device):
        eager = task.Model(*init_inputs).to(device)
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = list(to_device(list(task.get_inputs()), device))
    compiled = torch.compile(eager, mode=None if mode == "default" else mode)
    started = time.monotonic()
    with torch.no_grad():
        first = compiled(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        compile_s = time.monotonic() - started
        check = compare_outputs(eager(*inputs), first, tolerances or {})
        timing = time_models(
            lambda: compiled(*inputs), lambda: eager(*inputs), device, TimingPlan(trials, budget_s)
        )
    assert timing is not None  # no after_warmup check: the timing always runs to the end
    return {
        "schema": SCHEMA,
        "mode": mode,
        "task": str(task_path),
        "device": device.type,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "compile_seconds": round(compile_s, 3),
        "compiled_matches": check.passed,
        "mismatch": None if check.passed else check.message,
        "eager_ms": timing.reference.median_ms,
        "eager_iqr_ms": timing.reference.iqr_ms,
        "compiled_ms": timing.candidate.median_ms,
        "compiled_iqr_ms": timing.candidate.iqr_ms,
        "method": timing.method,
        "trials": timing.candidate.n,
    }


@dataclass(frozen=True)
class TimingSettings:
    """How a baseline is timed: the evaluation's own trials, budget and seed."""

    trials: int
    budget_s: float
    seed: int


def command(
    task_path: Path,
    device: str,
    mode: str,
    out: Path,
    python: str = sys.executable,
    plan: TimingSettings | None = None,
    tolerances: dict[str, float] | None = None,
) -> list[str]:
    timing = (
        ["--trials", str(plan.trials), "--budget", str(plan.budget_s), "--seed", str(plan.seed)]
        if plan
        else []
    )
    if tolerances:
        timing += ["--tolerances", json.dumps(tolerances)]
    return [python, "-m", "engine.eval.baselines", str(task_path), "--device", device, "--mode", mode,
            "--json", str(out), *timing]  # fmt: skip


def reuse_key(
    task_source: str, device: str, mode: str, plan: TimingSettings | None, gpu_index: int | None,
    tolerances: dict[str, float] | None = None,
) -> str:  # fmt: skip
    """Everything a baseline's figure depends on but the moment it was taken."""
    try:
        torch_version = importlib.metadata.version("torch")  # without importing torch in the parent
    except importlib.metadata.PackageNotFoundError:
        torch_version = ""
    payload = {
        "schema": SCHEMA, "task": task_source, "device": device, "mode": mode,
        "plan": None if plan is None else [plan.trials, plan.budget_s, plan.seed],
        "gpu_index": gpu_index, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch": torch_version, "python": sys.executable,
    }  # fmt: skip
    if tolerances:  # only where given, so the keys of baselines kept before stay what they were
        payload["tolerances"] = tolerances
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def _kept(path: Path) -> dict[str, Any] | None:
    """A kept baseline younger than REUSE_S, marked with its age; None when there is none."""
    try:
        age = time.time() - path.stat().st_mtime
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if age > REUSE_S or not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    return {**data, "reused": round(age, 1)}


def store_for(cache_root: Path) -> Path:
    """Where kept baselines live: beside the build cache (``<cache>-baselines``), not inside it. Every
    candidate's sandboxed worker may write the build cache, and a baseline kept there could be forged by
    the very kernel it is compared with; only this (trusted) process writes here."""
    return cache_root.with_name(f"{cache_root.name}-baselines")


def run_baselines(
    task_source: str,
    device: str,
    modes: list[str] | tuple[str, ...],
    timeout_s: float = TIMEOUT_S,
    cache_root: Path | None = None,
    plan: TimingSettings | None = None,
    gpu_index: int | None = None,
    tolerances: dict[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each mode's baseline: kept from an earlier evaluation of the same reference (beside ``cache_root``),
    else measured one after the other, each in its own process, on ``gpu_index`` where given; a failed
    mode is ``{"mode", "failed": why}``."""
    results: dict[str, dict[str, Any]] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if gpu_index is not None:  # the same GPU the candidate was timed on
        env["CUDA_VISIBLE_DEVICES"] = str(gpu_index)
    with tempfile.TemporaryDirectory(prefix="cudaforge-baseline-") as folder:
        task_path = Path(folder) / "task.py"
        task_path.write_text(task_source, encoding="utf-8")
        for mode in modes:
            kept_at = (
                store_for(cache_root) / f"{reuse_key(task_source, device, mode, plan, gpu_index, tolerances)}.json"
                if cache_root is not None
                else None
            )
            if kept_at is not None and (kept := _kept(kept_at)) is not None:
                results[mode] = kept
                continue
            out = Path(folder) / f"{mode}.json"
            try:
                done = subprocess.run(
                    command(task_path, device, mode, out, plan=plan, tolerances=tolerances), capture_output=True, text=True,
                    timeout=timeout_s, env=env,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                results[mode] = {"mode": mode, "failed": f"ran over {timeout_s:g} s"}
                continue
            try:
                results[mode] = json.loads(out.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
                results[mode] = {"mode": mode, "failed": tail[0][:300]}
                continue
            if kept_at is not None:
                with contextlib.suppress(OSError):  # a read-only cache: measured again next time
                    kept_at.parent.mkdir(parents=True, exist_ok=True)
                    tmp = kept_at.with_name(f"{kept_at.name}.{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(results[mode], indent=2) + "\n", encoding="utf-8")
                    tmp.replace(kept_at)
    return results


def measure_into(
    task: Path, device: str, mode: str, out: Path, plan: TimingSettings | None = None,
    tolerances: dict[str, float] | None = None,
) -> dict[str, Any] | None:  # fmt: skip
    """Measure one mode with ``plan`` (default: the project's timing settings) and write the JSON to
    ``out`` atomically; None, after saying why on stderr, when it could not be measured. Both workers use
    it (this module's and the bench's ``engine.bench.compile_baseline``)."""
    from engine.config import ConfigError, load_config

    if plan is None:
        try:
            config = load_config()  # the project's cudaforge.toml: the same timing budget as the sessions
        except ConfigError as error:
            print(f"compile baseline: {error}", file=sys.stderr)
            return None
        plan = TimingSettings(config.eval.timing_trials, config.eval.timing_budget_s, config.eval.seed)
    try:
        data = measure(task, device, mode, plan.trials, plan.budget_s, plan.seed, tolerances)
    except Exception as error:  # torch.compile can fail on any task; the evaluation goes on without it
        traceback.print_exc()
        print(f"compile baseline failed: {type(error).__name__}: {error}", file=sys.stderr)
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.eval.baselines")
    parser.add_argument("task", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--mode", choices=MODES, default="default")
    parser.add_argument("--json", type=Path, required=True, help="where the result goes")
    parser.add_argument("--trials", type=int, default=None, help="timing trials (default: the config's)")
    parser.add_argument("--budget", type=float, default=None, help="timing budget in seconds")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--tolerances", type=json.loads, default=None, help="per-dtype tolerances as JSON")
    args = parser.parse_args(argv)
    plan = None
    if args.trials is not None and args.budget is not None and args.seed is not None:
        plan = TimingSettings(args.trials, args.budget, args.seed)
    return 0 if measure_into(args.task, args.device, args.mode, args.json, plan, args.tolerances) is not None else 1


if __name__ == "__main__":
    sys.exit(main())
