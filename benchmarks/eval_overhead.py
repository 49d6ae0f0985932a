"""Wall time of one evaluation split by stage, cold (empty build cache) and with the build cached.

    python benchmarks/eval_overhead.py [--device cuda|cpu] [--task T.py] [--kernel K.py] [--repeats N]

Stages as the engine measures them: ``process_start`` (spawning the worker interpreter),
``setup`` (importing torch, CUDA initialisation, environment facts, importing the task),
``build`` (importing the candidate, whose load_inline builds or loads the extension),
``check`` (model construction + correctness trials), ``time`` (timing both models).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.eval.evaluate import evaluate_files  # noqa: E402
from engine.eval.options import EvalOptions  # noqa: E402

STAGES = ("process_start", "setup", "build", "check", "time", "total")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--task", type=Path, default=None)
    parser.add_argument("--kernel", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3, help="cached evaluations to take the median of")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.device == "cuda":
        task = args.task or REPO / "examples/tasks/relu_large.py"
        kernel = args.kernel or REPO / "examples/kernels/relu_cuda.py"
    else:
        task = args.task or REPO / "examples/tasks/relu.py"
        kernel = args.kernel or REPO / "examples/kernels/relu_cpu.py"

    with tempfile.TemporaryDirectory(prefix="cf-overhead-") as cache:
        options = EvalOptions(device=args.device, cache_root=Path(cache))
        cold = evaluate_files(task, kernel, options)
        if cold.status != "correct":
            print(f"the kernel is not correct ({cold.status}): {cold.messages}", file=sys.stderr)
            return 1
        warm = [evaluate_files(task, kernel, options) for _ in range(args.repeats)]
    rows = {"cold": {s: cold.durations.get(s, 0.0) for s in STAGES}}
    rows["cached (median)"] = {s: statistics.median(w.durations.get(s, 0.0) for w in warm) for s in STAGES}
    env = cold.env
    print(f"eval overhead · {kernel.name} on {env.get('gpu', env.get('cpu'))} · torch {env['torch']}")
    print(f"{'':18}" + "".join(f"{s:>15}" for s in STAGES))
    for label, row in rows.items():
        print(f"{label:18}" + "".join(f"{row[s]:>14.2f}s" for s in STAGES))
    print(f"build cached on re-evaluation: {[w.build.cached for w in warm]}; speedup {cold.speedup:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "env": env, "kernel": str(kernel)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
