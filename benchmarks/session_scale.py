"""How fast does a long session open? Build a 200-iteration session, then time open + history.

The TUI's session browser and ``cudaforge sessions`` open sessions and list their history all the
time, so this must stay interactive: the target is <= 0.5 s for 200 iterations on a 2-core
machine. The figure printed is the median of several runs, each with a fresh ``SessionRepo`` (no
cache carried over); the worst run and a cold run in a new Python process (imports included) are
printed too, plus the cost of reading every iteration's kernel lazily.

    python benchmarks/session_scale.py [--iterations 200] [--runs 7] [--keep DIR]

Exit status 1 when the median exceeds the target.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from sessions.repo import SessionRepo  # noqa: E402

TARGET_S = 0.5

TASK = "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"


def build(root: Path, iterations: int) -> Path:
    """A session shaped like a real one: ~4 KB kernels, ~20 KB transcripts, profiles, suggestions."""
    repo = SessionRepo.create(
        root,
        task_source=TASK,
        task_name="bench",
        name="bench",
        settings={"coder": "openai/o3", "judge": "openai/o3", "rounds": iterations},
    )
    with repo:
        for n in range(iterations):
            correct = n % 3 != 1
            repo.record_iteration(
                kernel_source=f"# kernel version {n}\n" + "cuda_src = '''\n" + "// body\n" * 450 + "'''\n",
                eval_result={
                    "status": "correct" if correct else "incorrect",
                    "speedup": 1.0 + n / 100 if correct else None,
                    "stage": "time",
                    "log": "build ok\n" * 100,
                },
                phase="seed" if n == 0 else ("optimize" if correct else "repair"),
                profile={"kernel": {f"metric_{k}": k * 1.5 for k in range(24)}} if correct else None,
                suggestion={"proposed": {"issue": "x" * 300}, "approved": {"issue": "x" * 300}, "by": "auto"},
                transcript=[
                    {"role": role, "model": "openai/o3", "reply": "y" * 8000, "usage": {"tokens": 3000}}
                    for role in ("judge", "coder")
                ],
                coder="openai/o3",
                judge="openai/o3",
                tokens=6000,
                cost_usd=0.05,
            )
    return repo.path


def open_and_list(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    with SessionRepo.open(path) as repo:
        history = repo.history()
        rows = [(it.number, it.phase, it.status, it.speedup, it.tokens, it.cost_usd) for it in history]
        best = repo.best()
    elapsed = time.perf_counter() - start
    assert len(rows) > 0 and best is not None
    return elapsed, len(rows)


def cold_run(path: Path) -> float:
    code = (
        "import sys, time; t = time.perf_counter()\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "from sessions.repo import SessionRepo\n"
        "r = SessionRepo.open(sys.argv[1]); h = r.history(); r.close()\n"
        "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="build the session here and keep it")
    args = parser.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="cudaforge-bench-"))
    try:
        t0 = time.perf_counter()
        path = build(root, args.iterations)
        build_s = time.perf_counter() - t0
        times = []
        for _ in range(args.runs):
            elapsed, count = open_and_list(path)
            times.append(elapsed)
        assert count == args.iterations, count
        cold_s = cold_run(path)
        with SessionRepo.open(path) as repo:
            t0 = time.perf_counter()
            total = sum(len(it.kernel_source) for it in repo.history())
            read_all_s = time.perf_counter() - t0
        median = statistics.median(times)
        result = {
            "iterations": args.iterations,
            "open_and_history_median_s": round(median, 4),
            "open_and_history_max_s": round(max(times), 4),
            "cold_process_incl_imports_s": round(cold_s, 4),
            "read_every_kernel_s": round(read_all_s, 4),
            "kernel_bytes_read": total,
            "build_s": round(build_s, 2),
            "target_s": TARGET_S,
        }
        print(
            f"open + history of {args.iterations} iterations: median {median * 1000:.1f} ms, "
            f"worst {max(times) * 1000:.1f} ms (target <= {TARGET_S * 1000:.0f} ms); "
            f"cold process incl. imports {cold_s * 1000:.1f} ms; "
            f"reading all {args.iterations} kernels {read_all_s * 1000:.1f} ms"
        )
        print(json.dumps(result))
        return 0 if median <= TARGET_S else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
