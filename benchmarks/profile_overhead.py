"""Seconds the profile stage adds per round, against the evaluation's own timing stage (issue 8).

    python benchmarks/profile_overhead.py [--task T.py] [--kernel K.py] [--repeats 3] [--json F]

On a CUDA machine with ncu. The build is made once by a first evaluation, so every figure below is
with the extension cached, as it is inside the loop. Measured, each ``--repeats`` times:

* ``eval time stage``: the evaluation's ``time`` stage (the target's baseline);
* ``target alone``: the profiled script (``engine.profile.target``) without ncu — Python, torch, CUDA
  start, loading the cached build, warm-up and one forward;
* ``profile_candidate`` with the default rule sections, with no sections (metrics only) and with the
  four sections the summary's rule whitelist reads most — the whole stage as the loop calls it,
  split into the ncu run and reading the report back.

Target (issue 8): profile stage ≤ eval time stage + 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.eval.evaluate import evaluate_files  # noqa: E402
from engine.eval.options import EvalOptions  # noqa: E402
from engine.profile.candidate import ProfileOptions, profile_candidate  # noqa: E402
from engine.profile.ncu import RULE_SECTIONS  # noqa: E402

VARIANTS: dict[str, tuple[str, ...]] = {
    "default sections": RULE_SECTIONS,
    "no sections": (),
    "4 sections": ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats"),
}


def target_alone(task: Path, kernel: Path, cache: Path) -> float:
    with tempfile.TemporaryDirectory() as work:
        job = Path(work) / "job.json"
        job.write_text(
            json.dumps(
                {"task_path": str(task), "kernel_path": str(kernel), "cache_root": str(cache), "mode": "ncu"}
            )
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "engine.profile.target", str(job)], check=True, env=env)
        return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", type=Path, default=REPO / "examples/tasks/relu_large.py")
    parser.add_argument("--kernel", type=Path, default=REPO / "examples/kernels/relu_cuda.py")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="cudaforge-bench-cache-"))
    options = EvalOptions(device="cuda", cache_root=cache)
    first = evaluate_files(args.task, args.kernel, options)
    print(f"first evaluation: {first.status}, build {first.durations.get('build', 0):.1f} s", flush=True)
    figures: dict[str, list[float]] = {"eval time stage": [], "target alone": []}
    phases: dict[str, list[dict[str, float]]] = {}
    duration_ms = None
    for _ in range(args.repeats):
        result = evaluate_files(args.task, args.kernel, options)
        figures["eval time stage"].append(result.durations.get("time", float("nan")))
        if result.timing is not None:
            duration_ms = result.timing.candidate.median_ms
        figures["target alone"].append(target_alone(args.task, args.kernel, cache))
    task_source, kernel_source = args.task.read_text(), args.kernel.read_text()
    for name, sections in VARIANTS.items():
        figures[name] = []
        phases[name] = []
        for _ in range(args.repeats):
            started = time.monotonic()
            profile, _spec = profile_candidate(
                task_source,
                kernel_source,
                duration_ms,
                ProfileOptions(cache_root=cache, sections=sections),
            )
            figures[name].append(time.monotonic() - started)
            phases[name].append(profile.phases)
            print(f"{name}: {profile.kind}, {figures[name][-1]:.2f} s, phases {profile.phases}", flush=True)
    baseline = statistics.median(figures["eval time stage"])
    print("\n| measured | runs (s) | median (s) |\n|---|---|---|")
    for name, values in figures.items():
        print(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} |")
    budget = baseline + 10.0
    stage = statistics.median(figures["default sections"])
    print(f"\ntarget: profile stage ≤ eval time stage + 10 s = {budget:.2f} s; default: {stage:.2f} s")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "phases": phases, "budget_s": budget}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
