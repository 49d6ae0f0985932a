"""A one-shot ``cudaforge eval`` with nothing to build, as a person types it (issue 47: <= 3 s for small
kernels, <= 4 s for level-3 ones, on the H200).

    python benchmarks/oneshot.py [--device cpu|cuda] [--runs 5] [--pair TASK KERNEL ...] [--json FILE]

Each pair (default: the ReLU example, CUDA C++ on CUDA) is built once, untimed; then, alternating so
that load drifts hit every way alike, ``--runs`` whole commands (``python -m tui.cli eval TASK KERNEL
--json``, timing included) each of:

- ``exec``: every worker a new interpreter (``CUDAFORGE_WORKERS=exec``), as before fork servers;
- ``fork``: workers forked from a server the command starts and ends (``CUDAFORGE_KEEP_SERVER_S=0``);
- ``kept``: workers forked from the server an earlier command left (``CUDAFORGE_KEEP_SERVER_S``
  default), whose own start the untimed first command paid.

With ``--edit``, every command's kernel is a new copy whose CUDA source differs from all before it (a
comment line above its first ``__global__``): the path after a CUDA-side edit (issue 47: <= 8 s), where
the split build compiles the CUDA unit again and reuses the binding's object.

Printed per pair and way: the median wall time of the command and the worker's start as the result
measured it (``process_start`` + ``setup``), each way's ratio to ``exec`` in the same run, and every
verdict (they must all be the same); the JSON also keeps each run's stage times (``durations``). The kept servers are ended at the end.
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
WAYS = {"exec": {"CUDAFORGE_WORKERS": "exec"}, "fork": {"CUDAFORGE_WORKERS": "fork", "CUDAFORGE_KEEP_SERVER_S": "0"}, "kept": {"CUDAFORGE_WORKERS": "fork", "CUDAFORGE_KEEP_SERVER_S": "300"}}


def run_once(task: Path, kernel: Path, device: str, env: dict[str, str]) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "eval", str(task), str(kernel), "--device", device, "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
    )  # fmt: skip
    wall = time.monotonic() - started
    try:
        return wall, json.loads(done.stdout)
    except ValueError:
        return wall, {"status": f"no result (exit {done.returncode}): {done.stderr[-300:]}"}


def edited(kernel: Path, number: int, folder: Path) -> Path:
    """A copy of ``kernel`` in ``folder`` whose CUDA source has a comment line no other copy has, above the
    first line of its ``cuda_sources`` that holds a ``__global__`` (as the source says it, so only the CUDA
    unit changes; a ``__global__`` in a Python comment or the C++ sources is left alone)."""
    if str(REPO) not in sys.path:  # run as a script from anywhere: cudaforge's own reader of the source
        sys.path.insert(0, str(REPO))
    from engine.eval.build.prebuild import read_calls

    text = kernel.read_text()
    lines = [line for call in read_calls(text) for line in str(call.cuda_sources or "").splitlines() if "__global__" in line]
    at = text.find(lines[0]) if lines else -1
    if at < 0:
        raise SystemExit(f"{kernel}: no __global__ line of its cuda_sources found in its text to edit above")
    copy = folder / f"{kernel.stem}_edit{number}{kernel.suffix}"
    copy.write_text(f"{text[:at]}// cudaforge oneshot edit {number}\n{text[at:]}")
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pair", nargs=2, action="append", metavar=("TASK", "KERNEL"), type=Path)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--edit", action="store_true", help="a CUDA-side edit before every command")
    parser.add_argument("--ways", default=",".join(WAYS), help="which of exec,fork,kept to run (exec always: the ratios' base)")
    args = parser.parse_args()
    ways = {way: WAYS[way] for way in WAYS if way == "exec" or way in args.ways.split(",")}
    cuda = args.device.startswith("cuda")
    pairs = args.pair or [
        (REPO / "examples/tasks" / ("relu_large.py" if cuda else "relu.py"), REPO / "examples/kernels" / ("relu_cuda.py" if cuda else "relu_cpu.py"))
    ]
    marker = tempfile.mkdtemp(prefix="cudaforge-oneshot-")  # on PATH: kept servers of this run alone
    base = {**os.environ, "PATH": f"{os.environ['PATH']}{os.pathsep}{marker}", "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    report: list[dict] = []
    edits = iter(range(1 << 30))
    folder = Path(marker)

    def version(kernel: Path) -> Path:
        return edited(kernel, next(edits), folder) if args.edit else kernel

    try:
        for task, kernel in pairs:
            envs = {way: {**base, **extra} for way, extra in ways.items()}
            first = {way: run_once(task, version(kernel), args.device, env) for way, env in envs.items()}  # builds; starts the kept server
            rows: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
            stages: dict[str, list[dict]] = {way: [] for way in ways}  # each run's stage times: where an outlier went
            verdicts = {way: {first[way][1].get("status")} for way in ways}
            for _ in range(args.runs):
                for way, env in envs.items():
                    wall, result = run_once(task, version(kernel), args.device, env)
                    durations = result.get("durations", {})
                    start = durations.get("process_start", 0.0) + durations.get("setup", 0.0)
                    rows[way].append((wall, start))
                    stages[way].append({k: round(v, 3) for k, v in durations.items() if isinstance(v, (int, float))})
                    verdicts[way].add(result.get("status"))
                    started_by = result.get("settings", {}).get("fork_server")
                    if way == "kept" and started_by != "kept-found":
                        print(f"warning: a kept run's server was {started_by!r}, not one found running", file=sys.stderr)
            medians = {way: (statistics.median(w for w, _ in r), statistics.median(s for _, s in r)) for way, r in rows.items()}
            line = {"task": str(task), "kernel": str(kernel), "device": args.device, "runs": args.runs, "edit": args.edit, "verdicts": {w: sorted(map(str, v)) for w, v in verdicts.items()}}
            for way, (wall, start) in medians.items():
                line[way] = {"wall_s": round(wall, 3), "worker_start_s": round(start, 3), "ratio_to_exec": round(wall / medians["exec"][0], 3), "walls": [round(w, 3) for w, _ in rows[way]], "durations": stages[way]}
            report.append(line)
            print(f"{kernel.parent.name}/{kernel.name}: " + " · ".join(f"{way} {wall:.2f} s (start {start:.2f} s, {wall / medians['exec'][0]:.2f}x)" for way, (wall, start) in medians.items()) + f" · verdicts {line['verdicts']}" + (" · a CUDA-side edit before each" if args.edit else ""), flush=True)
            if args.json:
                args.json.write_text(json.dumps(report, indent=1))
    finally:
        _end_kept(marker)
    return 0


def _end_kept(marker: str) -> None:
    """The kept servers this run started (their environment holds its PATH entry), ended."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"engine.eval.zygote" in (entry / "cmdline").read_bytes() and marker.encode() in (entry / "environ").read_bytes():
                    os.kill(int(entry.name), 9)
            except OSError:
                continue


if __name__ == "__main__":
    sys.exit(main())
