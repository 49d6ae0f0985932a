"""A round's own time on real LLM kernels: build, check, time and profile, split by stage (issue 26).

    python benchmarks/round_time.py ASSETS --out DIR [--per-level K] [--offset N] [--stock-jobs J]
    python benchmarks/round_time.py --report DIR

ASSETS is the leaderboard's ``docs/assets`` folder (anneouyang/KernelBenchLeaderboard). The first K
solutions per level (by file name, after skipping N) whose task exists are measured one after the
other, in this one process, as the loop evaluates (``engine.eval.evaluate.evaluate``):

Before each in-process evaluation the next worker is started and given ``--llm-seconds`` (the Coder's
reply time in the loop; not counted), as the loop does.

- ``first``: the kernel as written, never built before (the precompiled header for its flags is made
  first, once, by ``--warm``);
- ``cuda_edit``: a line added to the first ``__global__`` body (the Coder's usual change: the kernel
  rewritten, the lines below it moved);
- ``binding_edit``: a statement added to the host function that launches the first kernel;
- ``cached``: the CUDA-side edit again, nothing to build; also through the ``cudaforge eval`` command
  line (``cli_cached``), whose wall time includes the interpreter and the parent's own work;
- ``profile``: the loop's profile stage (``engine.profile.candidate.profile_candidate``) on the edited
  kernel, when it is correct.

Before these, beside the header warm-up, the same kernels as written are evaluated the stock way
(``CUDAFORGE_BUILD_SPLIT=0``, no object cache, no prebuild), ``--stock-jobs`` at a time through the
command line, untimed: the figure the split path and the object cache are compared with. Each measurement is one JSON line in ``DIR/rows.jsonl`` the moment
it is known; ``--report`` prints the medians and p90s per stage and the ratios.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import zip_longest
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

STAGES = ("outside", "start", "reference", "build", "check", "time", "late")
STEPS = ("first", "cuda_edit", "binding_edit", "cached")
_KERNEL_BODY = re.compile(r"__global__[^{;]*?\)\s*\{")
_HOST_BODY = re.compile(r"\)\s*(?:const\s*)?\{")


def pick(assets: Path, per_level: int, offset: int) -> list[tuple[str, Path, Path]]:
    """(name, task, kernel) for the first solutions per level by file name whose task exists."""
    from leaderboard import problem_file, problem_number

    raw = json.loads((assets / "raw_data.json").read_text())
    chosen: list[tuple[str, Path, Path]] = []
    for level in (1, 2, 3):
        entries = sorted((e for e in raw if int(e["level"]) == level), key=lambda e: e["file"])
        usable = [
            e for e in entries
            if problem_file(assets, e).is_file() and (assets / "solutions" / f"{e['file']}.py").is_file()
        ]  # fmt: skip
        for entry in usable[offset : offset + per_level]:
            name = f"l{level}_p{problem_number(entry)}_{entry['file'][:8]}"
            chosen.append((name, problem_file(assets, entry), assets / "solutions" / f"{entry['file']}.py"))
    # the levels taken in turn (l1, l2, l3, l1, ...): a run cut short still covers all three
    by_level = [[c for c in chosen if c[0].startswith(f"l{level}_")] for level in (1, 2, 3)]
    return [c for turn in zip_longest(*by_level) for c in turn if c is not None]


def cuda_edit(source: str, n: int) -> str | None:
    """A line added to the first kernel's body (never alters what it computes): the host code below it
    moves down a line, as when the Coder rewrites a kernel."""
    match = _KERNEL_BODY.search(source)
    if match is None:
        return None
    return source[: match.end()] + f"\n    const int cf_round_edit = {n}; (void)cf_round_edit;" + source[match.end() :]


def binding_edit(source: str, n: int) -> str | None:
    """A statement added to the host function that launches the first kernel (its C++ side)."""
    launch = source.find("<<<")
    if launch < 0:
        return None
    bodies = [m for m in _HOST_BODY.finditer(source, 0, launch)]
    if not bodies:
        return None
    at = bodies[-1].end()
    return source[:at] + f" static_cast<void>({n});" + source[at:]


def stage_seconds(result: dict[str, Any], wall: float) -> dict[str, float]:
    """The round's stages from an EvalResult's durations; ``outside``: the wall time no stage explains."""
    d = result.get("durations") or {}
    stages = {
        "start": d.get("process_start", 0.0) + d.get("setup", 0.0),
        "reference": d.get("reference", 0.0),
        "build": d.get("build", 0.0),
        "check": d.get("check", 0.0),
        "time": d.get("time", 0.0),
        "late": d.get("ablation", 0.0) + d.get("shapes", 0.0) + d.get("done", 0.0),
    }
    stages["outside"] = max(0.0, wall - sum(stages.values()))
    return {k: round(v, 3) for k, v in stages.items()}


class Run:
    def __init__(self, out: Path, cache: Path, llm_seconds: float = 0.0) -> None:
        self.out = out
        self.cache = cache
        self.llm_seconds = llm_seconds
        from engine.profile.candidate import LoopProfiler, ProfileOptions

        self.profiler = LoopProfiler(ProfileOptions(cache_root=cache))
        self.rows = out / "rows.jsonl"

    def write(self, row: dict[str, Any]) -> None:
        with self.rows.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        short = {k: row[k] for k in ("kernel", "step", "status", "wall") if k in row}
        print(json.dumps({**short, "stages": row.get("stages"), "units": row.get("units")}), flush=True)

    def evaluate(self, name: str, step: str, task: Path, source: str) -> dict[str, Any]:
        from engine.eval.evaluate import evaluate, warm_worker
        from engine.eval.options import EvalOptions

        options = EvalOptions(device="cuda", cache_root=self.cache)
        if self.llm_seconds:  # as the loop does: the worker starts while the Coder writes (not counted)
            warm_worker(options)
            time.sleep(self.llm_seconds)
        started = time.monotonic()
        result = evaluate(task.read_text(), source, options, task_name=name)
        wall = time.monotonic() - started
        data = result.to_dict()
        units = [
            (u["unit"], "reused" if u["reused"] else u.get("seconds"))
            for e in data["build"]["extensions"]
            for u in e.get("units", [])
        ]
        row = {
            "kernel": name, "step": step, "status": data["status"], "wall": round(wall, 3),
            "stages": stage_seconds(data, wall), "units": units,
            "paths": [(e["path"], e["pch"], e.get("prebuilt")) for e in data["build"]["extensions"]],
            "speedup": data.get("speedup"), "message": (data.get("messages") or [""])[-1][:200],
            "kernel_ms": (data.get("timing") or {}).get("candidate", {}).get("median_ms"),
        }  # fmt: skip
        self.write(row)
        return row

    def cli(
        self, name: str, step: str, task: Path, kernel: Path, env: dict[str, str], flags: list[str], nice: int = 0
    ) -> dict[str, Any]:
        started = time.monotonic()
        done = subprocess.run(
            [*(["nice", "-n", str(nice)] if nice else []), sys.executable, "-m", "tui.cli", "eval", str(task), str(kernel), "--device", "cuda", "--json", *flags],
            capture_output=True, text=True, timeout=900, cwd=REPO,
            env={**os.environ, "CUDAFORGE_CACHE_DIR": str(self.cache), **env},
        )  # fmt: skip
        wall = time.monotonic() - started
        try:
            data = json.loads(done.stdout)
        except ValueError:
            data = {"status": f"no JSON (exit {done.returncode})", "messages": [done.stderr[-300:]]}
        row = {
            "kernel": name, "step": step, "status": data.get("status"), "wall": round(wall, 3),
            "stages": stage_seconds(data, wall) if data.get("durations") else None,
            "build_seconds": (data.get("build") or {}).get("seconds"),
            "message": (data.get("messages") or [""])[-1][:200],
        }  # fmt: skip
        self.write(row)
        return row

    def profile(self, name: str, task: Path, source: str, kernel_ms: float | None) -> None:
        """The loop's profile stage: its process was started when the edited kernel's evaluation began."""
        from types import SimpleNamespace

        started = time.monotonic()
        timing = SimpleNamespace(candidate=SimpleNamespace(median_ms=kernel_ms)) if kernel_ms else None
        data = self.profiler(task.read_text(), source, SimpleNamespace(timing=timing))
        wall = time.monotonic() - started
        self.write({
            "kernel": name, "step": "profile", "status": data.get("kind"), "wall": round(wall, 3),
            "phases": data.get("phases"), "why": str(data.get("unavailable") or "")[:200],
        })  # fmt: skip


def warm(run: Run, kernels: list[tuple[str, Path, Path]]) -> None:
    """Make the precompiled header for each flag set the kernels use, as on a machine that has built
    before: with the example stock-layout ReLU given those flags, so no measured kernel is built here."""
    from engine.eval.build import makers
    from engine.eval.build.pch import _words
    from engine.eval.build.prebuild import read_calls

    example = (REPO / "examples" / "kernels" / "relu_cuda_stock.py").read_text()
    task = REPO / "examples" / "tasks" / "relu_large.py"
    flag_sets = {tuple(_words(c.kwargs.get("extra_cflags"))) for _, _, k in kernels for c in read_calls(k.read_text())}
    started = time.monotonic()

    def one(flags: tuple[str, ...]) -> None:  # the flag sets' headers are made side by side (not measured)
        source = example.replace("    verbose=True,\n", f"    verbose=True,\n    extra_cflags={list(flags)!r},\n")
        run.evaluate(f"warm{list(flags)}", "warm", task, source)

    with concurrent.futures.ThreadPoolExecutor(max(1, len(flag_sets))) as pool:
        list(pool.map(one, sorted(flag_sets)))
    makers.wait(timeout_s=600)
    run.write({"kernel": "warm", "step": "header", "wall": round(time.monotonic() - started, 3)})


def measure(args: argparse.Namespace) -> None:
    kernels = pick(args.assets, args.per_level, args.offset)[: args.limit or None]
    run = Run(args.out, args.cache, args.llm_seconds)
    # The stock builds of the same kernels (the comparison, not a stage measured here) run first, --stock-jobs
    # at a time beside the header warm-up, and are done before the first measured kernel: builds beside the
    # measurements, even at the lowest priority, doubled g++'s time in them (call B of RESULTS.md).
    # Their own cache: in call 2 of the third session they shared the measured path's, and the flag-less
    # header was never ready for the measured kernels (each build asked for it again: ``queued``). No header
    # either: the stock figure is torch's own build, and each command line would wait to make one.
    stock = {
        "CUDAFORGE_BUILD_SPLIT": "0", "CUDAFORGE_OBJECT_CACHE": "0", "CUDAFORGE_PREBUILD": "0",
        "CUDAFORGE_CACHE_DIR": str(args.cache / "stock-cache"), "CUDAFORGE_PCH": "0",
    }  # fmt: skip
    pool = concurrent.futures.ThreadPoolExecutor(max(1, args.stock_jobs))
    if args.stock_jobs:
        for name, task, kernel in kernels:
            pool.submit(run.cli, name, "stock", task, kernel, stock, ["--no-timing"])
    if args.warm:
        warm(run, kernels)
    pool.shutdown(wait=True)
    run.write({"kernel": "warm", "step": "headers", "wall": 0.0, "status": "", "headers": header_state(args.cache)})
    stamp = int(time.time()) % 100000
    levels_seen: set[str] = set()
    command_line: list[tuple[str, Path, Path]] = []
    for name, task, kernel in kernels:
        source = kernel.read_text()
        run.evaluate(name, "first", task, source)
        edited = cuda_edit(source, stamp)
        if edited is None:
            continue
        run.profiler.prepare(task.read_text(), edited)  # as the loop does: its process starts meanwhile
        row = run.evaluate(name, "cuda_edit", task, edited)
        if row["status"] != "correct":
            run.profiler.cancel()
        host = binding_edit(edited, stamp)
        if host is not None:
            run.evaluate(name, "binding_edit", task, host)
        run.evaluate(name, "cached", task, edited)
        if name[:2] not in levels_seen:  # the command line once per level: its own start is the same each time
            levels_seen.add(name[:2])
            path = args.cache / "kernels" / f"{name}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(edited)
            command_line.append((name, task, path))
        if row["status"] == "correct":
            run.profile(name, task, edited, row["kernel_ms"])
    # `cudaforge eval` with nothing to build: as a person runs it, on a machine not busy with other builds
    # (its cold worker's start is what it measures).
    for name, task, path in command_line:
        run.cli(name, "cli_cached", task, path, {}, [])
    run.write({"kernel": "end", "step": "headers", "wall": 0.0, "status": "", "headers": header_state(args.cache)})


def header_state(cache: Path) -> dict[str, dict[str, Any]]:
    """Each precompiled-header set in the cache: made or not, its marker, its maker's last words."""
    from engine.eval.build.pch import HeaderStore

    def tail(path: Path) -> str:
        try:
            return path.read_text(errors="replace")[-400:]
        except OSError:
            return ""

    store = HeaderStore(cache)
    return {
        f.name: {"ready": store.ready(f.name), "making": tail(f / "making"), "log": tail(f / "make.log")}
        for f in sorted(p for p in store.root.glob("*") if p.is_dir())
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def report(out: Path) -> str:
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line.strip()]
    by = {(r["kernel"], r["step"]): r for r in rows}
    kernels = sorted({r["kernel"] for r in rows if r["step"] == "first"})
    lines = [f"{len(kernels)} kernels: " + ", ".join(kernels), ""]
    lines.append("| step | n | " + " | ".join(f"{s} (median / p90)" for s in (*STAGES, "wall")) + " |")
    lines.append("|---" * (len(STAGES) + 3) + "|")
    for step in STEPS:
        got = [by[(k, step)] for k in kernels if (k, step) in by and by[(k, step)].get("stages")]
        if not got:
            continue
        cells = []
        for stage in STAGES:
            values = [r["stages"][stage] for r in got]
            cells.append(f"{statistics.median(values):.2f} / {_quantile(values, 0.9):.2f}")
        walls = [r["wall"] for r in got]
        cells.append(f"{statistics.median(walls):.2f} / {_quantile(walls, 0.9):.2f}")
        lines.append(f"| {step} | {len(got)} | " + " | ".join(cells) + " |")
    lines.append("")

    def figure(step: str, k: str) -> float | None:
        row, prof = by.get((k, step)), by.get((k, "profile"))
        if not row or not row.get("stages") or not prof or prof["status"] != "ncu":
            return None
        s = row["stages"]
        return s["build"] + s["check"] + s["time"] + s["late"] + prof["wall"]

    for step, goal in (("cuda_edit", 15.0), ("binding_edit", 20.0)):
        values = [v for k in kernels if (v := figure(step, k)) is not None]
        if values:
            lines.append(
                f"build + check + time + profile after {step}: median {statistics.median(values):.2f} s, "
                f"p90 {_quantile(values, 0.9):.2f} s over {len(values)} correct kernels (goal <= {goal:g} s)"
            )
    for step, label in (("cached", "nothing to build, in-process (the loop)"), ("cli_cached", "nothing to build, `cudaforge eval`")):
        walls = [by[(k, step)]["wall"] for k in kernels if (k, step) in by]
        if walls:
            lines.append(f"{label}: wall median {statistics.median(walls):.2f} s, p90 {_quantile(walls, 0.9):.2f} s (goal <= 5 s)")
    profiles = [by[(k, "profile")]["wall"] for k in kernels if (k, "profile") in by and by[(k, "profile")]["status"] == "ncu"]
    if profiles:
        lines.append(f"profile stage: median {statistics.median(profiles):.2f} s, p90 {_quantile(profiles, 0.9):.2f} s")
    ratios, builds = [], []
    for k in kernels:
        stock, first = by.get((k, "stock")), by.get((k, "first"))
        if stock and first and stock.get("build_seconds") and first.get("stages"):
            ratios.append(stock["build_seconds"] / max(first["stages"]["build"], 1e-3))
            builds.append(stock["build_seconds"])
    if ratios:
        lines.append(
            f"stock build (same kernels, same run): median {statistics.median(builds):.1f} s; "
            f"stock / split first build: median {statistics.median(ratios):.1f}x, lowest {min(ratios):.1f}x"
        )
    same = [k for k in kernels if (k, "stock") in by and by[(k, "stock")]["status"] == by[(k, "first")]["status"]]
    lines.append(f"statuses: split first = stock on {len(same)} of {sum((k, 'stock') in by for k in kernels)} kernels")
    for k in kernels:
        steps = [f"{s}={by[(k, s)]['status']}" for s in ("first", "cuda_edit", "binding_edit", "stock") if (k, s) in by]
        lines.append(f"  {k}: " + ", ".join(steps))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assets", type=Path, nargs="?")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-level", type=int, default=4)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="at most this many kernels in all (0: no limit)")
    parser.add_argument("--stock-jobs", type=int, default=10, help="stock builds at a time, before the measured kernels")
    parser.add_argument(
        "--llm-seconds", type=float, default=3.0,
        help="the Coder's time before each in-process evaluation, while its worker starts (0: a cold worker)",
    )  # fmt: skip
    parser.add_argument("--cache", type=Path, default=None, help="the build cache (default: a fresh one)")
    parser.add_argument("--no-warm", dest="warm", action="store_false", help="the header is made already")
    parser.add_argument("--report", action="store_true", help="print the figures of an earlier run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        if args.assets is None:
            parser.error("ASSETS is needed to measure")
        args.cache = args.cache or Path(tempfile.mkdtemp(prefix="cudaforge-round-"))
        measure(args)
    text = report(args.out)
    (args.out / "report.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
