"""Issue 29 on the GPU: a real session's roofline against Nsight Compute's own figures, and its baselines.

    python benchmarks/visual_evidence.py --out DIR [--assets LB_ASSETS]

1. A real session through the headless loop (``cudaforge run``), with the demo's scripted Coder and
   Judge on ``examples/tasks/relu_large.py``, profiled by the loop, with ``[eval] compile_baselines =
   ["default", "max-autotune"]``: every correct iteration must record both torch.compile baselines.
2. With ``--assets`` (the leaderboard's ``docs/assets``), a second session whose scripted Coder serves
   a real leaderboard kernel of a FLOP-heavy task (level 1, problem 2: a matrix product), so a kernel
   under the *compute* roof is checked too (its FLOPs counted from the SASS instruction counts).
3. For every own kernel of every profiled iteration: the roof and percentage the Judge, the workbench
   and the report read (``engine.profile.summary.roofline_position``), against a separate ``ncu`` run of
   the same kernel file with Nsight Compute's speed-of-light section (and the instruction counts its
   roofline chart is drawn from): the memory roof against ncu's "DRAM Throughput" (percent of peak),
   the compute roof against ncu's achieved FP32 FLOP/s over its own peak. Goal: within 5 points.

One JSON line per comparison in ``DIR/roofline.jsonl`` as it is known; ``DIR/summary.md`` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

DEMO = REPO / "tui" / "demo" / "script"
TASK = REPO / "examples" / "tasks" / "relu_large.py"
PROFILE_ONE = REPO / "tests" / "fixtures" / "ncu" / "profile_one.py"
# o1's matrix product with K = 32 (l1_p7) from the leaderboard: FLOPs counted, so the roofline comes from the
# intensity. (Its l1_p2 SGEMM, K = 4096, fails the fp32 bar of 1e-4 on 373 of 2M elements: an honest
# rounding difference that KernelBench's old 1e-2 bar let through, so it is never profiled.)
MATMUL_FILE = "1143f5a65506760015e6c3f06a283f87"
# ncu's roofline chart for FP32: achieved = (fadd + fmul + 2 ffma) per cycle, peak = 2 ffma per cycle
SOL_METRICS = [
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "smsp__cycles_elapsed.avg.per_second",
    "sm__cycles_elapsed.avg.per_second",
    "gpu__time_duration.sum",
]


def run_session(
    work: Path, log_dir: Path, name: str, task: Path, coder: Path, rounds: int, toml: str, timeout: float
) -> Path:
    """One headless session; its repository's path."""
    cwd = work / f"cwd-{name}"
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "cudaforge.toml").write_text(toml)
    sessions = work / "sessions"
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with (log_dir / f"{name}.log").open("w") as log:  # written as it runs: a cut-off call still brings it back
        try:
            code: int | str = subprocess.run(
                [sys.executable, "-m", "tui.cli", "run", str(task), "--headless", "--auto-approve", "--device", "cuda",
                 "--rounds", str(rounds), "--coder", f"scripted/{coder}", "--judge", f"scripted/{DEMO / 'judge'}",
                 "--sessions-dir", str(sessions), "--name", name],
                cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
            ).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            code = "timeout"
    print(f"session {name}: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
    made = sorted(p for p in sessions.iterdir() if p.is_dir() and p.name.startswith(name)) if sessions.is_dir() else []
    return made[0] if made else sessions / name


def base_name(signature: str) -> str:
    return signature.split("(", 1)[0].strip()


def ncu_sol(task: Path, kernel: Path, names: list[str], out: Path) -> dict[str, dict[str, float]]:
    """Nsight Compute's own figures for the named kernels of one forward (the loop's NVTX range)."""
    from engine.profile.ncu_csv import parse_raw_csv

    if shutil.which("ncu") is None:  # reading sessions brought back from the GPU machine: no own run here
        return {}
    # ncu's -k matches the function's base name: "relu_kernel", not "relu_kernel(const float *, float *, long)"
    pattern = "regex:^(" + "|".join(sorted({re.escape(base_name(n)) for n in names})) + ")$"
    done = subprocess.run(
        ["ncu", "--clock-control", "none", "--target-processes", "all", "--nvtx", "--nvtx-include", "cudaforge_forward/",
         "-k", pattern, "--section", "SpeedOfLight", "--metrics", ",".join(SOL_METRICS), "--csv", "--page", "raw",
         sys.executable, str(PROFILE_ONE), str(task), str(kernel)],
        capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    out.write_text(done.stdout + "\n--- stderr\n" + done.stderr)
    csv_start = done.stdout.find('"ID"')
    table = parse_raw_csv(done.stdout[csv_start:]) if csv_start >= 0 else {}
    figures: dict[str, dict[str, float]] = {}
    for kernel_name, metrics in table.items():
        values = {k: float(v[0]) for k, v in metrics.items() if isinstance(v[0], (int, float))}
        per_cycle = sum(values.get(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed", 0.0) * w
                        for op, w in (("fadd", 1), ("fmul", 1), ("ffma", 2)))  # fmt: skip
        peak = values.get("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained")
        fp32 = None
        if peak:
            # smsp per-cycle counts against the SM peak per cycle: the two clocks are the same domain
            ratio = values.get("smsp__cycles_elapsed.avg.per_second", 1.0) / values.get("sm__cycles_elapsed.avg.per_second", 1.0)
            fp32 = 100.0 * per_cycle * ratio / (2.0 * peak)
        figures[kernel_name] = {
            "dram_sol_pct": values.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            "sm_sol_pct": values.get("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            "fp32_roofline_pct": fp32,
        }
    return figures


def compare(out: Path, session: Path, task: Path) -> list[dict[str, Any]]:
    from engine.profile.summary import roofline_position
    from sessions.repo import SessionRepo

    rows: list[dict[str, Any]] = []
    if not session.is_dir():
        return rows
    for it in SessionRepo.open(str(session)).history():
        profile = it.profile or {}
        kernels = ((profile.get("summary") or {}).get("data") or {}).get("kernels") or []
        if not kernels:
            continue
        kernel_file = out / f"{session.name}_iter{it.number}.py"
        kernel_file.write_text(it.kernel_source)
        names = [k["name"] for k in kernels]
        theirs = ncu_sol(task, kernel_file, names, out / f"{session.name}_iter{it.number}_ncu.txt")
        for k in kernels:
            position = roofline_position(k)
            ncu = next((v for n, v in theirs.items() if base_name(n) == base_name(k["name"])), {})
            # ncu's own DRAM speed-of-light figure from the loop's profile pass itself (the same launch)
            same_pass = ((profile.get("metrics") or {}).get(k["name"]) or {}).get(
                "dram__throughput.avg.pct_of_peak_sustained_elapsed"
            )
            row: dict[str, Any] = {"session": session.name, "iteration": it.number, "kernel": k["name"],
                                   "roof": position[0] if position else None, "ours_pct": position[1] if position else None,
                                   "dram_pct_of_peak": k.get("dram_pct_of_peak"), "tflops": k.get("tflops"),
                                   "arithmetic_intensity": k.get("arithmetic_intensity"),
                                   "same_pass_dram_sol_pct": same_pass[0] if same_pass else None, **ncu}  # fmt: skip
            against = ncu.get("dram_sol_pct") if row["roof"] == "memory" else ncu.get("fp32_roofline_pct")
            row["ncu_pct"] = against
            row["delta"] = None if against is None or row["ours_pct"] is None else row["ours_pct"] - against
            rows.append(row)
            with (out / "roofline.jsonl").open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    return rows


def baselines(session: Path) -> list[str]:
    from sessions.repo import SessionRepo

    lines: list[str] = []
    if not session.is_dir():
        return [f"- no session at {session}"]
    for it in SessionRepo.open(str(session)).history():
        got = it.eval_result.get("baselines") or {}
        modes = {
            m: {k: b.get(k) for k in ("compiled_ms", "eager_ms", "compile_seconds", "compiled_matches", "reused", "failed")}
            for m, b in got.items()
            if isinstance(b, dict)
        }
        lines.append(f"- iteration {it.number} ({it.status}, speedup {it.speedup}): baselines {json.dumps(modes)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--assets", type=Path, default=None, help="the leaderboard's docs/assets (adds the matmul session)")
    parser.add_argument(
        "--sessions", type=Path, default=None,
        help="read the sessions of an earlier run (its sessions.tar.gz unpacked) instead of running them",
    )  # fmt: skip
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "roofline.jsonl").unlink(missing_ok=True)
    if args.sessions:
        rows = []
        for session in sorted(p for p in args.sessions.iterdir() if p.is_dir()):
            task = REPO / "examples" / "tasks" / "relu_large.py"  # only used by the own ncu run
            print("\n".join(baselines(session)))
            rows += compare(args.out, session, task)
        return 0 if rows else 1
    work = Path(tempfile.mkdtemp(prefix="cudaforge-visual-"))
    started = time.monotonic()
    demo = run_session(work, args.out, "relu-demo", TASK, DEMO / "coder", 3,
                       '[eval]\ndevice = "cuda"\ncompile_baselines = ["default", "max-autotune"]\n', 300)  # fmt: skip
    summary = ["# Issue 29 on the GPU", "", "## torch.compile baselines of the demo session", *baselines(demo), ""]
    (args.out / "summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary), flush=True)
    rows = compare(args.out, demo, TASK)
    if args.assets:
        entry = next(e for e in json.loads((args.assets / "raw_data.json").read_text()) if e["file"] == MATMUL_FILE)
        from leaderboard import problem_file

        coder = work / "matmul-coder"
        coder.mkdir()
        (coder / "01_seed.md").write_text("A tiled shared-memory SGEMM.\n\n```python\n" + entry["code"] + "\n```\n")
        task = problem_file(args.assets, entry)
        matmul = run_session(work, args.out, "matmul-l1p2", task, coder, 0, '[eval]\ndevice = "cuda"\n', 240)
        rows += compare(args.out, matmul, task)
    summary += ["## Roofline: ours against ncu", "",
                "| session | iter | kernel | roof | ours % | ncu % (own run) | delta | ncu DRAM SOL % (loop's pass) |",
                "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        summary.append(f"| {r['session']} | {r['iteration']} | {r['kernel']} | {r['roof']} | {fmt(r['ours_pct'])} "
                       f"| {fmt(r['ncu_pct'])} | {fmt(r['delta'])} | {fmt(r['same_pass_dram_sol_pct'])} |")  # fmt: skip
    deltas = [abs(r["delta"]) for r in rows if r["delta"] is not None]
    summary += ["", f"{len(deltas)} comparisons; largest |delta| {max(deltas) if deltas else float('nan'):.1f} points "
                f"(goal 5); {time.monotonic() - started:.0f} s"]  # fmt: skip
    (args.out / "summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary), flush=True)
    if (work / "sessions").is_dir():  # the sessions themselves, for the report and a look
        shutil.make_archive(str(args.out / "sessions"), "gztar", work, "sessions")
    return 0 if deltas and max(deltas) <= 5.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
