"""What a worker's start costs, started as a new interpreter or forked from the fork server (issue 47).

    python benchmarks/fork_workers.py [--device cpu|cuda] [--sandbox auto] [--runs 8] [--json FILE]

In one process, on one machine, alternating so that load drifts hit both alike: ``--runs`` evaluations of
a small kernel (ReLU; on CUDA the CUDA C++ one) with workers started anew (``exec``) and as many forked
(``fork``), after one untimed evaluation of each that builds the kernel and starts the server. Printed per
way: the median of the whole ``evaluate`` call, of the worker's start (``process_start`` + ``setup``), the
CPU seconds the evaluating process's children used per evaluation (the workers and what they ran), and
the ratio of the medians; every verdict must be the same. The server's own start is printed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.eval.evaluate import evaluate  # noqa: E402
from engine.eval.options import EvalOptions  # noqa: E402

WAYS = ("exec", "fork")


def _machine_busy() -> float:
    """CPU seconds the whole machine has been busy (``/proc/stat``): a killed worker's sandbox never
    reaps its children, so their time reaches no rusage; run this on an otherwise idle machine."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    task = (REPO / "examples/tasks" / ("relu_large.py" if cuda else "relu.py")).read_text()
    kernel = (REPO / "examples/kernels" / ("relu_cuda.py" if cuda else "relu_cpu.py")).read_text()

    def options(way: str) -> EvalOptions:
        return EvalOptions(device="cuda" if cuda else "cpu", sandbox=args.sandbox, workers=way, do_timing=False)

    rows: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    verdicts: set[tuple[str, str]] = set()
    first: dict[str, float] = {}
    for way in WAYS:  # builds the kernel (once) and starts the server, untimed
        started = time.monotonic()
        result = evaluate(task, kernel, options(way))
        first[way] = time.monotonic() - started
        verdicts.add((result.status, result.settings.get("worker_start", "")))
        print(f"first {way}: {result.status} in {first[way]:.2f} s ({result.settings.get('worker_start')})", flush=True)
    for _ in range(args.runs):
        for way in WAYS:
            cpu_before = _machine_busy()
            started = time.monotonic()
            result = evaluate(task, kernel, options(way))
            wall = time.monotonic() - started
            cpu = _machine_busy() - cpu_before
            d = result.durations
            rows[way].append({"wall": wall, "start": d.get("process_start", 0.0) + d.get("setup", 0.0), "cpu": cpu})
            verdicts.add((result.status, result.settings.get("worker_start", "")))
    summary = {
        way: {key: statistics.median(r[key] for r in rows[way]) for key in ("wall", "start", "cpu")} for way in WAYS
    }
    print(f"{'way':6} {'evaluate s':>11} {'start s':>8} {'CPU s':>8}")
    for way in WAYS:
        s = summary[way]
        print(f"{way:6} {s['wall']:11.3f} {s['start']:8.3f} {s['cpu']:8.3f}")
    ratio = summary["exec"]["wall"] / summary["fork"]["wall"]
    print(f"exec/fork, whole evaluation: {ratio:.2f}x; verdicts: {sorted(verdicts)}")
    if args.json:
        args.json.write_text(
            json.dumps({"device": args.device, "runs": args.runs, "first": first, "rows": rows, "summary": summary,
                        "verdicts": sorted(verdicts)}, indent=1)  # fmt: skip
        )
    statuses = {status for status, _ in verdicts}
    return 0 if len(statuses) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
