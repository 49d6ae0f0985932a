"""What the guards cost one evaluation: the same kernel evaluated with guards on and off (build cached).

    python benchmarks/guard_overhead.py [--device cuda|cpu] [--repeats N]

The static checks run in the engine before the worker starts; the runtime checks add a second
candidate call per trial, the input/output comparisons, the fresh-input re-check after timing and,
on CUDA, one profiled forward that lists the launched kernels.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.eval.evaluate import evaluate_files  # noqa: E402
from engine.eval.options import EvalOptions  # noqa: E402
from engine.guard.static import check_source  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cuda = args.device == "cuda"
    task = REPO / ("examples/tasks/relu_large.py" if cuda else "examples/tasks/relu.py")
    kernel = REPO / ("examples/kernels/relu_cuda.py" if cuda else "examples/kernels/relu_cpu.py")
    source = kernel.read_text()
    t0 = time.perf_counter()
    for _ in range(20):
        check_source(source, "cuda" if cuda else "cpu")
    static_ms = (time.perf_counter() - t0) / 20 * 1e3
    with tempfile.TemporaryDirectory(prefix="cf-guard-") as cache:
        evaluate_files(task, kernel, EvalOptions(device=args.device, cache_root=Path(cache)))  # build once
        rows = {}
        for label, guards in (("guards off", False), ("guards on", True)):
            results = [
                evaluate_files(
                    task, kernel, EvalOptions(device=args.device, cache_root=Path(cache), guards=guards)
                )
                for _ in range(args.repeats)
            ]
            assert all(r.status == "correct" for r in results), [r.messages for r in results]
            rows[label] = {
                s: statistics.median(r.durations.get(s, 0.0) for r in results)
                for s in ("check", "time", "total")
            }
    print(f"guard overhead · {kernel.name} on {args.device} · static check {static_ms:.1f} ms")
    print(f"{'':12}{'check':>10}{'time':>10}{'total':>10}")
    for label, row in rows.items():
        print(f"{label:12}" + "".join(f"{row[s]:>9.2f}s" for s in ("check", "time", "total")))
    extra = rows["guards on"]["total"] - rows["guards off"]["total"]
    print(f"guards add {extra:.2f} s per evaluation ({extra / rows['guards off']['total']:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
