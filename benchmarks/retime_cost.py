"""What a close call's re-timing costs, with and without the best kernel's sealed library (engine.loop.duel).

    python benchmarks/retime_cost.py [--device cpu|cuda] [--task T.py] [--kernel K.py] [--json FILE]

In one run, on one machine: the best kernel is evaluated once (its library built or found in a fresh
cache, then sealed), and the re-timing of its twin against it is run twice, each in a worker of its own:
``plain`` as before (no record: the reference's ``load_inline`` builds it the stock way, privately) and
``sealed`` (the loop's way: the record names the library, which is loaded from the cache). Printed per
run: the wall time, the task import (``setup_task``, where the reference builds) and the ratio of the two.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.eval.evaluate import evaluate  # noqa: E402
from engine.eval.options import EvalOptions  # noqa: E402
from engine.eval.timing import TimingPlan  # noqa: E402
from engine.loop import duel  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--task", type=Path, default=None)
    parser.add_argument("--kernel", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    task = (args.task or REPO / "examples/tasks" / ("relu_large.py" if cuda else "relu.py")).read_text()
    kernel = (args.kernel or REPO / "examples/kernels" / ("relu_cuda_stock.py" if cuda else "relu_cpu.py")).read_text()
    twin = kernel.replace("import torch\n", "import torch\nTWIN = True\n", 1)
    with tempfile.TemporaryDirectory(prefix="cf-retime-") as cache:
        options = EvalOptions(device=args.device, cache_root=Path(cache), timing=TimingPlan(min_trials=20))
        best = evaluate(task, kernel, options, task_name="retime")
        if best.status != "correct":
            print(f"the best kernel is {best.status}: {best.messages[-1:]}")
            return 1
        rows = {}
        for label, record in (("plain", None), ("sealed", best.to_dict())):
            started = time.monotonic()
            result = duel.retime(evaluate, task, twin, kernel, options, "retime", record)
            rows[label] = {
                "status": result.status,
                "wall_s": round(time.monotonic() - started, 2),
                "setup_task_s": round(result.durations.get("setup_task", 0.0), 2),
                "reference_from_cache": bool(result.build.reference_extensions),
                "ratio": result.speedup,
                "last_message": (result.messages or [""])[-1][:300],
            }
            print(label, json.dumps(rows[label]), flush=True)
    rows["plain_over_sealed_wall"] = round(rows["plain"]["wall_s"] / rows["sealed"]["wall_s"], 2)
    print(f"plain / sealed wall: {rows['plain_over_sealed_wall']}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
