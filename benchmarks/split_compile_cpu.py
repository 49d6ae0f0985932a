"""Stock against split compile times of real LLM kernels on a machine without a GPU (issue 16, host side).

A build's time is almost all compiling (nvcc and g++ on the host); a GPU only runs the result. This
measures that part where there is no GPU and torch is the CPU build: torch's ``load_inline`` is told
where nvcc is, every object file is compiled exactly as on a CUDA machine (same ninja file, flags and
cudaforge build hook, ``engine.eval.build.extension.BuildRecorder``), and only the final link fails (the CPU torch has
no ``libtorch_cuda``); the benchmark then counts the build as done once every object file exists.
What it reports is the compile wall time from ninja's own log (objects only; the link, about a second
on a CUDA machine, is left out of both sides).

For each corpus kernel the split transform handles (engine/eval/build/split/), one after the other (so each
build has the machine to itself): the stock build in a fresh cache, then the split build in a fresh
cache that shares one precompiled torch header store, as a live cudaforge cache has it. When the
split build's flag set had no header yet (the header is made after a first build, as in cudaforge),
the header is made and the split build is measured again in another fresh cache.

    python benchmarks/split_compile_cpu.py .corpus/lb/docs/assets --out /tmp/split-cpu --limit 12

The equivalence of the outputs and the timing on the H200 need a GPU: benchmarks/split_build.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from split_build import child_row, kernels, splittable, with_shared_header  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def ninja_compile_seconds(build_dir: Path) -> float | None:
    """Wall time of the object compiles in ``build_dir`` (first start to last end), from ``.ninja_log``."""
    log = build_dir / ".ninja_log"
    if not log.is_file():
        return None
    spans = []
    for line in log.read_text().splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[3].endswith(".o"):
            spans.append((int(parts[0]), int(parts[1])))
    if not spans:
        return None
    return (max(end for _, end in spans) - min(start for start, _ in spans)) / 1000.0


def child(solution: Path, cache: Path) -> dict:
    """In a fresh process: import the candidate through cudaforge's build hook; object files count as built."""
    import types

    import torch.utils.cpp_extension as cpp_extension

    from engine.eval.build.extension import BuildRecorder
    from engine.eval.build.pch import wait_for_makers

    if (
        cpp_extension.CUDA_HOME is None
    ):  # the CPU torch does not look for CUDA: tell it, as a CUDA torch finds it
        nvcc = shutil.which("nvcc")
        homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
        homes.append(str(Path(nvcc).resolve().parent.parent) if nvcc else None)
        found = [h for h in homes if h and Path(h, "include", "cuda_runtime.h").is_file()]
        if not found:
            raise SystemExit("needs the CUDA toolkit (nvcc and include/cuda_runtime.h; set CUDA_HOME)")
        cpp_extension.CUDA_HOME = found[0]
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")  # the H200's
    recorder = BuildRecorder(cache)
    recorder.install()
    torch_load_inline = recorder._original

    def compile_then_stop(name: str, *args: object, build_directory: str, **kwargs: object) -> object:
        try:
            return torch_load_inline(name, *args, build_directory=build_directory, **kwargs)
        except Exception:
            ninja = Path(build_directory, "build.ninja").read_text()
            objects = [
                w for line in ninja.splitlines() if line.startswith("build ") for w in line.split()[1:2]
            ]
            objects = [o.rstrip(":") for o in objects if o.rstrip(":").endswith(".o")]
            if objects and all(Path(build_directory, o).is_file() for o in objects):
                return types.SimpleNamespace()  # compiled; only the CUDA link is impossible here
            raise

    recorder._original = compile_then_stop
    error = None
    try:
        exec(compile(solution.read_text(), str(solution), "exec"), {"__name__": "candidate"})  # noqa: S102
    except Exception as caught:  # noqa: BLE001 - reported in the row
        error = f"{type(caught).__name__}: {caught}"[-300:]
    builds = [
        {
            "path": b.path,
            "ok": b.ok,
            "pch": b.pch,
            "split_skipped": b.split_skipped,
            "seconds": round(b.seconds, 2),
            "compile_seconds": ninja_compile_seconds(Path(b.build_dir)),
        }
        for b in recorder.builds
    ]
    wait_for_makers()  # a header queued by this build is ready for the next one
    return {"builds": builds, "error": error}


def run_child(mode: str, solution: Path, cache: Path, pch: Path) -> dict:
    with_shared_header(cache, pch)
    env = dict(os.environ, PYTHONPATH=str(REPO), CUDAFORGE_BUILD_SPLIT="0" if mode == "stock" else "1")
    started = time.monotonic()
    row, error = child_row(
        "benchmarks.split_compile_cpu:child(Path(sys.argv[1]), Path(sys.argv[2]))",
        [str(solution), str(cache)],
        env,
        1800,
    )
    if row is None:
        return {"builds": [], "error": error[-600:]}
    return {**row, "wall_seconds": round(time.monotonic() - started, 1)}


def total(row: dict) -> float | None:
    """The candidate's whole compile time (its extensions one after another, as its import builds them)."""
    values = [b["compile_seconds"] for b in row["builds"]]
    if not values or any(v is None for v in values) or not all(b["ok"] for b in row["builds"]):
        return None
    return round(sum(values), 2)


def measure(name: str, solution: Path, work: Path, pch: Path) -> dict:
    stock = run_child("stock", solution, work / "stock" / name, pch)
    split = run_child("split", solution, work / "split" / name, pch)
    remade = any(b["path"] == "split" and b["pch"] != "used" for b in split["builds"])
    if remade:  # the header for this flag set did not exist yet: now it does, as after a first build
        split = run_child("split", solution, work / "split-again" / name, pch)
    return {"kernel": name, "stock": stock, "split": split, "header_made_first": remade}


def pct(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q * (len(values) - 1))))], 1) if values else None


def split_taken(row: dict) -> bool:
    return bool(row["split"]["builds"]) and all(b["path"] == "split" for b in row["split"]["builds"])


def summarize(rows: list[dict]) -> dict:
    """Times over the kernels both ways compiled and the split path was taken. A split build that fell
    back is counted apart: its record holds only the stock rebuild, not the failed split attempt."""
    both = [(total(r["stock"]), total(r["split"])) for r in rows if total(r["stock"]) and total(r["split"])]
    compared = [(total(r["stock"]), total(r["split"])) for r in rows if split_taken(r)]
    compared = [(a, b) for a, b in compared if a and b]
    return {
        "kernels": len(rows),
        "both_compiled": len(both),
        "split_path_taken": sum(split_taken(r) for r in rows),
        "split_fell_back": sum(bool(r["split"]["builds"]) and not split_taken(r) for r in rows),
        "split_with_header": sum(
            all(b["pch"] == "used" for b in r["split"]["builds"]) for r in rows if split_taken(r)
        ),
        "compared": len(compared),
        "stock_compile_s": {
            "median": pct([a for a, _ in compared], 0.5),
            "p90": pct([a for a, _ in compared], 0.9),
        },
        "split_compile_s": {
            "median": pct([b for _, b in compared], 0.5),
            "p90": pct([b for _, b in compared], 0.9),
        },
        "ratio_median": round(statistics.median(a / b for a, b in compared), 2) if compared else None,
        "ratio_min": round(min(a / b for a, b in compared), 2) if compared else None,
        "cores": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assets", type=Path, help="the leaderboard's docs/assets")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--offset", type=int, default=0)
    options = parser.parse_args()
    out = options.out.resolve()
    work = out / "work"
    pch = work / "shared-pch"
    pch.mkdir(parents=True, exist_ok=True)
    chosen = [k for k in kernels(options.assets) if splittable(k[1])][
        options.offset : options.offset + options.limit
    ]
    rows_path = out / "rows.jsonl"
    for name, solution, _problem in chosen:
        row = measure(name, solution, work, pch)
        with rows_path.open("a") as sink:
            sink.write(json.dumps(row) + "\n")
        print(f"{name}: stock {total(row['stock'])} s, split {total(row['split'])} s "
              f"{[b['path'] + '/' + (b['pch'] or '-') for b in row['split']['builds']]}"
              f"{' (header made first)' if row['header_made_first'] else ''}"
              f"{' ERR ' + str(row['split']['error'] or row['stock']['error']) if row['split']['error'] or row['stock']['error'] else ''}",
              flush=True)  # fmt: skip
    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    summary = summarize(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
