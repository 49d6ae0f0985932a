"""``--compile-baseline``: how fast ``torch.compile`` makes the reference, measured next to eager.

A kernel that beats eager PyTorch may still lose to ``torch.compile``, which is what a user would
otherwise reach for. For each task a fresh worker (``python -m engine.bench.compile_baseline``)
builds the reference ``Model`` exactly as the evaluator does (same seed, ``get_init_inputs``,
inputs made on the device), compiles it, checks the compiled output against eager, and times the
two *interleaved in the same process* with the evaluator's own timer (:func:`engine.eval.timing.time_models`:
CUDA events and an L2 flush on GPU, one thread on CPU).

The speedup of the task's best kernel over the compiled reference is then::

    speedup_vs_compile = best_speedup × compiled_ms / eager_ms

``best_speedup`` (eager ÷ kernel) comes from the session's own evaluation and the ratio
compiled ÷ eager from this run, so each ratio is between two things timed side by side; only the
eager reference links them. That is a deliberate choice over dividing absolute times taken in
different processes (what a stored baseline-times file would do).

The result is cached in ``OUT/baseline/<task>.json``; a rerun of the bench skips tasks that have one.
Exit codes of the worker: 0 measured (the JSON says whether compiled matched eager), 1 failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.bench.tasks import BenchTask

SCHEMA = 1


def baseline_file(out: Path, task: BenchTask) -> Path:
    return out / "baseline" / f"{task.name}.json"


def read_baseline(out: Path, task: BenchTask) -> dict[str, Any] | None:
    """The measured baseline of ``task`` (``None`` when none was measured or it is unreadable)."""
    try:
        data = json.loads(baseline_file(out, task).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def baseline_command(task: BenchTask, out: Path, device: str, python: str = sys.executable) -> list[str]:
    """The worker's command line; it writes ``baseline_file(out, task)`` itself."""
    return [python, "-m", "engine.bench.compile_baseline", str(task.path), "--device", device,
            "--json", str(baseline_file(out, task))]  # fmt: skip


def compile_speedup(baseline: dict[str, Any] | None) -> float | None:
    """eager ÷ compiled reference; ``None`` without a baseline, or when compiled did not match eager."""
    if not baseline or not baseline.get("compiled_matches"):
        return None
    eager, compiled = baseline.get("eager_ms"), baseline.get("compiled_ms")
    return eager / compiled if eager and compiled else None


def speedup_vs_compile(best_speedup: float | None, baseline: dict[str, Any] | None) -> float | None:
    """The best kernel's speedup over the compiled reference (see the module docstring)."""
    ratio = compile_speedup(baseline)
    return None if best_speedup is None or ratio is None else best_speedup / ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench.compile_baseline")
    parser.add_argument("task", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--json", type=Path, required=True, help="where the result goes")
    args = parser.parse_args(argv)
    from engine.eval.baselines import measure_into  # torch.compile's default mode, as eval measures it

    data = measure_into(args.task, args.device, "default", args.json)
    if data is None:
        return 1
    verdict = "matches eager" if data["compiled_matches"] else "DIFFERS from eager"
    print(
        f"compile baseline: eager {data['eager_ms']:.4f} ms · compiled {data['compiled_ms']:.4f} ms "
        f"({data['eager_ms'] / data['compiled_ms']:.2f}x) · compiled output {verdict} · "
        f"compile {data['compile_seconds']:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
