"""Cost of the sandbox per evaluation: the same kernel, build cached, sandbox off vs bwrap vs Landlock.

    python benchmarks/sandbox_overhead.py [--device cpu|cuda] [--rounds N] [--modes off,bwrap,landlock]

Rounds are interleaved (off, bwrap, landlock, off, ...) so drift in machine load hits every mode
alike; the figure is the median per mode of the evaluation's total wall time and of its
``process_start`` stage (where bwrap's namespace setup lands), and the median of the per-round
differences to ``off``. One warm-up round per mode is not counted (it fills the build cache).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.eval.evaluate import evaluate_files  # noqa: E402
from engine.eval.options import EvalOptions, EvaluationError  # noqa: E402
from engine.eval.timing import TimingPlan  # noqa: E402
from engine.sandbox import available_mechanisms  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--modes", default="off,bwrap,landlock")
    parser.add_argument("--cache", type=Path, default=None, help="build cache (default: a fresh temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    task = REPO / ("examples/tasks/relu_large.py" if args.device == "cuda" else "examples/tasks/relu.py")
    kernel = REPO / (
        "examples/kernels/relu_cuda.py" if args.device == "cuda" else "examples/kernels/relu_cpu.py"
    )
    status = available_mechanisms()
    modes = [m for m in args.modes.split(",") if status.get(m) is None]
    skipped = [f"{m} ({status.get(m)})" for m in args.modes.split(",") if m not in modes]
    cache = args.cache or Path(tempfile.mkdtemp(prefix="cudaforge-sandbox-bench-"))
    totals: dict[str, list[float]] = {m: [] for m in modes}
    starts: dict[str, list[float]] = {m: [] for m in modes}
    failed: dict[str, str] = {}  # a mechanism that cannot run here is reported, the others still measured
    for round_index in range(args.rounds + 1):
        for mode in [m for m in modes if m not in failed]:
            options = EvalOptions(
                device=args.device,
                cache_root=cache,
                sandbox=mode,
                timing=TimingPlan(min_trials=20, budget_s=2.0),
            )
            started = time.monotonic()
            try:
                result = evaluate_files(task, kernel, options)
            except EvaluationError as error:
                failed[mode] = str(error)
                print(f"{mode}: could not run: {error}", file=sys.stderr, flush=True)
                continue
            wall = time.monotonic() - started
            if result.status != "correct" or result.sandbox != mode:
                failed[mode] = f"{result.status} sandbox={result.sandbox} {result.messages}"
                print(f"{mode}: {failed[mode]}", file=sys.stderr, flush=True)
                continue
            if round_index:  # round 0 is the warm-up
                totals[mode].append(wall)
                starts[mode].append(result.durations.get("process_start", 0.0))
            print(f"round {round_index} {mode}: {wall:.2f} s", flush=True)
    totals = {m: v for m, v in totals.items() if v}
    starts = {m: v for m, v in starts.items() if v}
    report = {
        "device": args.device,
        "rounds": args.rounds,
        "skipped": skipped,
        "failed": failed,
        "median_total_s": {m: statistics.median(v) for m, v in totals.items()},
        "median_process_start_s": {m: statistics.median(v) for m, v in starts.items()},
    }
    if "off" in totals:
        report["median_extra_vs_off_s"] = {
            m: statistics.median(a - b for a, b in zip(totals[m], totals["off"], strict=True))
            for m in totals
            if m != "off"
        }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
