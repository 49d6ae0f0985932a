"""Which KernelBench tasks are weak: outputs that a degenerate answer (zeros, a constant, an input passed
through) passes at cudaforge's default tolerances (issue 25). Runs each task's reference on its own inputs
for a few seeds and applies ``engine.eval.degenerate.weak_outputs``, the function the worker uses.

``python benchmarks/weak_tasks.py TASKS_DIR [--device cuda] [--seeds 2] [--json FILE]``
(TASKS_DIR: e.g. KernelBench/level1 of ScalingIntelligence/KernelBench; not part of the repository).
Tasks run in this process one after another (the reference only, no candidate code): one that fails or
runs out of memory is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def scan(path: Path, device: str, seeds: int) -> dict:
    import torch

    from engine.eval import degenerate
    from engine.eval.tolerances import DEFAULT_TOLERANCES
    from engine.eval.values import to_device
    from engine.tasks import import_module_from_source

    started = time.monotonic()
    task = import_module_from_source(path.read_text(), str(path), f"weak_{path.stem}")
    torch.manual_seed(42)
    with torch.device(device):
        model = task.Model(*task.get_init_inputs()).to(device)
    found = []
    for seed in range(seeds):
        torch.manual_seed(43 + seed)
        with torch.device(device):
            inputs = list(to_device(list(task.get_inputs()), device))
        with torch.no_grad():
            output = model(*inputs)
        found.append(degenerate.weak_outputs(output, inputs, DEFAULT_TOLERANCES))
        dtypes = sorted({str(t.dtype).replace("torch.", "") for _, t in degenerate.leaves(output)})
        del output, inputs
    weak = degenerate.merge_weak(found)
    return {"task": path.stem, "weak": weak, "dtypes": dtypes, "seconds": time.monotonic() - started}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import torch

    rows = []
    for path in sorted(args.tasks.glob("*.py"), key=lambda p: (len(p.stem.split("_")[0]), p.stem)):
        try:
            record = scan(path, args.device, args.seeds)
        except Exception as error:  # noqa: BLE001 - a task that cannot run here is reported, not fatal
            record = {"task": path.stem, "error": f"{type(error).__name__}: {str(error)[:160]}"}
        if args.device == "cuda":
            torch.cuda.empty_cache()
        rows.append(record)
        if record.get("weak"):
            how = "; ".join(f"{w['output']} ({'/'.join(w['passes'])}; checks {'/'.join(w['checks']) or 'none'})" for w in record["weak"])
            print(f"WEAK  {record['task']}: {how}", flush=True)
        elif record.get("error"):
            print(f"ERROR {record['task']}: {record['error']}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    weak = [r for r in rows if r.get("weak")]
    errors = [r for r in rows if r.get("error")]
    print(f"\n{len(weak)} weak task(s) of {len(rows)} ({len(errors)} could not run here)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
