"""Stock against split builds of real LLM kernels, side by side, on a GPU machine (issue 16).

For each corpus kernel the split transform handles (engine/eval/build/split/), the real evaluator
(``engine.eval.evaluate.evaluate``, device cuda, no timing) runs twice, each in a fresh extension cache:
once with ``CUDAFORGE_BUILD_SPLIT=0`` (the stock build) and once split. Both share one precompiled
torch header, made before the run, as a live cudaforge cache would have it. Then each build (a cache
hit by now) is imported again in-process, the task's ``get_inputs`` run with a fixed seed on CUDA,
and the two outputs are compared. Every build is appended to ``<out>/builds.jsonl`` the moment it
finishes, and a row to ``<out>/rows.jsonl`` when both builds of a kernel are done (a run cut short
keeps what it did, builds included; ``--offset`` continues), and ``<out>/summary.json`` and
``<out>/table.txt`` are rewritten from all rows after each run (``--report`` only rewrites them).

    python benchmarks/split_build.py /path/to/lb/docs/assets --out DIR --limit 20 --jobs 8
    python benchmarks/split_build.py /path/to/lb/docs/assets --out DIR2 --offset 20 --limit 20 --jobs 8
    cat DIR/rows.jsonl DIR2/rows.jsonl > ALL/rows.jsonl; python benchmarks/split_build.py ASSETS --out ALL --report

Each batch of 20 with 8 at a time takes ~6 minutes on the H200 machine (estimate: ~60 s for the header,
then three rounds of a ~90 s stock build racing its split twin).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from leaderboard import problem_file  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SEED = 1234
_write = threading.Lock()


def kernels(assets: Path) -> list[tuple[str, Path, Path]]:
    """(name, solution, problem) for every corpus kernel whose problem file is present, shuffled by a fixed seed."""
    raw = json.loads((assets / "raw_data.json").read_text())
    entries = raw if isinstance(raw, list) else list(raw.values())
    found = []
    for entry in entries:
        solution = assets / "solutions" / f"{entry['file']}.py"
        problem = problem_file(assets, entry)
        if solution.is_file() and problem.is_file():
            found.append((entry["file"], solution, problem))
    found = sorted(set(found))
    random.Random(SEED).shuffle(found)
    return found


def splittable(solution: Path) -> bool:
    from benchmarks.split_coverage import recorded_calls
    from engine.eval.build.split.rewrite import SplitSkipped, split_sources

    calls = [c for c in recorded_calls(solution) if "error" not in c and c["cuda"].strip()]
    if not calls:
        return False
    try:
        for call in calls:
            split_sources(call["cpp"], call["cuda"])
    except SplitSkipped:
        return False
    return True


def one(mode: str, solution: Path, problem: Path, cache: Path, outputs: Path) -> dict:
    """In a child process: evaluate once, then import the (cached) build and save the outputs."""
    import torch

    from engine.eval.build.extension import BuildRecorder
    from engine.eval.evaluate import evaluate
    from engine.eval.options import EvalOptions

    started = time.monotonic()
    result = evaluate(
        problem.read_text(),
        solution.read_text(),
        EvalOptions(device="cuda", cache_root=cache, do_timing=False),
        task_name=problem.stem,
    )
    row = {
        "mode": mode,
        "status": result.status,
        "build_seconds": result.build.seconds,
        "wall_seconds": time.monotonic() - started,
        "extensions": [
            {"path": e.path, "seconds": e.seconds, "pch": e.pch, "split_skipped": e.split_skipped}
            for e in result.build.extensions
        ],
    }
    if result.status in ("correct", "incorrect"):
        try:
            recorder = BuildRecorder(cache)
            recorder.install()
            task: dict = {"__name__": "task"}
            exec(compile(problem.read_text(), str(problem), "exec"), task)  # noqa: S102
            candidate: dict = {"__name__": "candidate"}
            exec(compile(solution.read_text(), str(solution), "exec"), candidate)  # noqa: S102
            torch.manual_seed(SEED)
            init = task["get_init_inputs"]()
            torch.manual_seed(SEED)
            model = candidate["ModelNew"](*init).cuda()
            torch.manual_seed(SEED + 1)
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task["get_inputs"]()]
            with torch.no_grad():
                out = model(*inputs)
            torch.cuda.synchronize()
            out = list(out) if isinstance(out, (tuple, list)) else [out]
            torch.save([o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in out], outputs)
            row["rebuild_cached"] = all(e.cached for e in recorder.builds)
        except Exception as error:  # noqa: BLE001 - reported in the row
            row["output_error"] = f"{type(error).__name__}: {error}"[:300]
    return row


def with_shared_header(cache: Path, pch: Path) -> Path:
    """A fresh extension cache whose precompiled-header store is the run's shared one."""
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / "pch").exists():
        (cache / "pch").symlink_to(pch)
    return cache


def child_row(call: str, args: list[str], env: dict[str, str], timeout: float) -> tuple[dict | None, str]:
    """Run ``call`` (an expression over ``sys.argv[1:]``, its module imported as ``m``) in a fresh
    interpreter; the JSON row it returns, else None and the end of its output."""
    module, _, name = call.partition(":")
    code = (
        f"import json, sys; from pathlib import Path; import {module} as m; "
        f"print('ROW' + json.dumps(m.{name}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("ROW"):
            return json.loads(line[3:]), ""
    return None, (proc.stderr or proc.stdout)[-800:]


def _child(
    mode: str, solution: Path, problem: Path, cache: Path, outputs: Path, pch: Path, builds: Path
) -> dict:
    with_shared_header(cache, pch)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env["CUDAFORGE_BUILD_SPLIT"] = "0" if mode == "stock" else "1"
    row, error = child_row(
        "benchmarks.split_build:one(sys.argv[1], *map(Path, sys.argv[2:]))",
        [mode, str(solution), str(problem), str(cache), str(outputs)],
        env,
        900,
    )
    row = row or {"mode": mode, "status": "bench_error", "error": error}
    with _write, builds.open("a") as out:  # written as soon as it is known
        out.write(json.dumps({"kernel": solution.stem, "problem": problem.stem, **row}) + "\n")
    return row


def compare(stock_out: Path, split_out: Path) -> dict:
    import torch

    if not stock_out.is_file() or not split_out.is_file():
        return {"compared": False}
    a, b = torch.load(stock_out), torch.load(split_out)
    if len(a) != len(b):
        return {"compared": True, "equal": False, "why": "different number of outputs"}
    worst, exact, close = 0.0, True, True
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            exact = close = exact and x == y
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return {"compared": True, "equal": False, "why": "shape or dtype differs"}
        exact = exact and torch.equal(x, y)
        close = close and torch.allclose(x.float(), y.float(), rtol=1e-4, atol=1e-4, equal_nan=True)
        if x.numel():
            worst = max(worst, float((x.float() - y.float()).abs().nan_to_num(0.0).max()))
    return {"compared": True, "equal": close, "bitwise": exact, "max_abs_diff": worst}


def warm_header(pch: Path, scratch: Path) -> float:
    """Make the shared precompiled header with one split build of the stock example, as a live cache has it."""
    from engine.eval.evaluate import evaluate
    from engine.eval.options import EvalOptions

    started = time.monotonic()
    scratch.mkdir(parents=True, exist_ok=True)
    if not (scratch / "pch").exists():
        (scratch / "pch").symlink_to(pch)
    examples = REPO / "examples"
    result = evaluate(
        (examples / "tasks" / "relu.py").read_text(),
        (examples / "kernels" / "relu_cuda_stock.py").read_text(),
        EvalOptions(device="cuda", cache_root=scratch, do_timing=False),
    )
    paths = [e.path for e in result.build.extensions]
    if result.status != "correct" or paths != ["split"]:  # no header will come: say why, do not wait
        print(f"warm-up build: {result.status} {paths} {result.messages[-1:]}", flush=True)
        return time.monotonic() - started
    deadline = time.monotonic() + 180
    while not list(pch.glob("*/torch/extension.h.gch")) and time.monotonic() < deadline:
        time.sleep(2)
    return time.monotonic() - started


def run_kernel(name: str, solution: Path, problem: Path, work: Path, pch: Path, rows: Path) -> None:
    row: dict = {"kernel": name, "problem": problem.stem}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both builds at once: side by side, same load
        futures = {
            mode: pool.submit(
                _child,
                mode,
                solution,
                problem,
                work / mode / name,
                work / f"{name}.{mode}.pt",
                pch,
                rows.with_name("builds.jsonl"),
            )
            for mode in ("stock", "split")
        }
        for mode, future in futures.items():
            row[mode] = future.result()
    row["same_verdict"] = row["stock"]["status"] == row["split"]["status"]
    row["outputs"] = compare(work / f"{name}.stock.pt", work / f"{name}.split.pt")
    with _write, rows.open("a") as out:
        out.write(json.dumps(row) + "\n")
    print(
        f"{name} {problem.stem}: stock {row['stock']['status']} {row['stock'].get('build_seconds') or 0:.1f} s, "
        f"split {row['split']['status']} {row['split'].get('build_seconds') or 0:.1f} s "
        f"({[e['path'] for e in row['split'].get('extensions', [])]}), outputs {row['outputs']}",
        flush=True,
    )


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q * (len(values) - 1))))], 1)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def report(out: Path) -> dict:
    rows = _lines(out / "rows.jsonl")
    builds = _lines(out / "builds.jsonl")
    built = [r for r in rows if r["stock"].get("build_seconds") and r["split"].get("build_seconds")]
    stock = [r["stock"]["build_seconds"] for r in built]
    split = [r["split"]["build_seconds"] for r in built]
    ratios = [a / b for a, b in zip(stock, split, strict=True) if b]
    compared = [r for r in rows if r["outputs"].get("compared")]
    by_mode = {
        mode: sorted(b["build_seconds"] for b in builds if b.get("mode") == mode and b.get("build_seconds"))
        for mode in ("stock", "split")
    }
    summary = {
        "builds_finished": {m: len(v) for m, v in by_mode.items()},
        "builds_median_s": {m: round(statistics.median(v), 1) if v else None for m, v in by_mode.items()},
        "kernels": len(rows),
        "both_built": len(built),
        "split_path_taken": sum(
            all(e["path"] == "split" for e in r["split"].get("extensions", []))
            and bool(r["split"].get("extensions"))
            for r in rows
        ),
        "stock_build_s": {
            "median": round(statistics.median(stock), 1) if stock else None,
            "p90": _pct(stock, 0.9),
        },
        "split_build_s": {
            "median": round(statistics.median(split), 1) if split else None,
            "p90": _pct(split, 0.9),
        },
        "speedup_median": round(statistics.median(ratios), 2) if ratios else None,
        "same_verdict": sum(r["same_verdict"] for r in rows),
        "verdicts": sorted({f"{r['stock']['status']}/{r['split']['status']}" for r in rows}),
        "outputs_compared": len(compared),
        "outputs_equal": sum(bool(r["outputs"].get("equal")) for r in compared),
        "outputs_bitwise": sum(bool(r["outputs"].get("bitwise")) for r in compared),
        "differences": [
            {
                "kernel": r["kernel"],
                "stock": r["stock"]["status"],
                "split": r["split"]["status"],
                **r["outputs"],
            }
            for r in rows
            if not r["same_verdict"] or (r["outputs"].get("compared") and not r["outputs"].get("equal"))
        ],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = [
        f"{'kernel':34} {'problem':10} {'stock s':>8} {'split s':>8} {'stock':>14} {'split':>14} {'outputs':>10}",
    ]
    for r in rows:
        o = r["outputs"]
        verdict = (
            "-"
            if not o.get("compared")
            else ("bitwise" if o.get("bitwise") else ("close" if o.get("equal") else "DIFFER"))
        )
        lines.append(
            f"{r['kernel'][:34]:34} {r['problem']:10} {r['stock'].get('build_seconds') or 0:8.1f} "
            f"{r['split'].get('build_seconds') or 0:8.1f} {r['stock']['status']:>14} {r['split']['status']:>14} {verdict:>10}"
        )
    lines.append(json.dumps({k: v for k, v in summary.items() if k != "differences"}))
    (out / "table.txt").write_text("\n".join(lines) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "assets", type=Path, help="the leaderboard's docs/assets (solutions/, problems/, raw_data.json)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument(
        "--offset", type=int, default=0, help="skip this many splittable kernels (a second batch)"
    )
    parser.add_argument(
        "--jobs", type=int, default=4, help="kernels at once (each builds stock and split together)"
    )
    parser.add_argument("--report", action="store_true", help="only rewrite summary.json and table.txt")
    options = parser.parse_args()
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not options.report:
        chosen = [k for k in kernels(options.assets) if splittable(k[1])][
            options.offset : options.offset + options.limit
        ]
        work = out / "work"
        pch = work / "shared-pch"
        pch.mkdir(parents=True, exist_ok=True)
        print(
            f"{len(chosen)} kernels; precompiled header ready after {warm_header(pch, work / 'warm'):.0f} s",
            flush=True,
        )
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(options.jobs) as pool:
            futures = [pool.submit(run_kernel, *k, work, pch, out / "rows.jsonl") for k in chosen]
            for future in futures:
                future.result()
        print(f"{len(chosen)} kernels in {time.monotonic() - started:.0f} s", flush=True)
    summary = report(out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
