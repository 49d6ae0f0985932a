"""``cudaforge evalset`` on real LLM kernels: the KernelBench leaderboard corpus, on the device.

Two steps (issue 18's acceptance run):

``build ASSETS DIR [--per-level K]``
    ASSETS is the leaderboard's ``docs/assets`` folder (anneouyang/KernelBenchLeaderboard):
    ``raw_data.json`` maps each solution (``file`` = the stem of ``solutions/<file>.py``) to its
    ``level`` and ``problem_id``; ``problems/l{L}_p{N}.py`` are the tasks (N = problem_id + 1: see leaderboard.py) with KernelBench v0 shapes.
    Writes a pairs folder ``DIR/level_{L}_problem_{N}_sample_{k}/{task,kernel}.py`` with the first K
    solutions per level by file name among those whose problem file exists (deterministic), plus
    ``DIR/manifest.json`` (model, solution file, the leaderboard's own speedup), and prints the
    evalset command to run.

``compare OUT [--n N]``
    After the evalset run: re-times the first N correct kernels (by name) one at a time, alone, with
    the evaluator ``cudaforge eval`` uses and the settings the evalset used, and prints the timing spread (IQR / median of the
    kernel's time) and median under evalset against alone, plus the run's wall time against the sum
    of its evaluations. Writes ``OUT/compare_alone.json``.

Nothing of the corpus is copied into the repository; DIR and OUT are wherever you say.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from leaderboard import problem_file, problem_number  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def build(assets: Path, target: Path, per_level: int) -> int:
    raw = json.loads((assets / "raw_data.json").read_text())
    by_level: dict[int, list[dict]] = defaultdict(list)
    for entry in raw:
        problem = problem_file(assets, entry)
        solution = assets / "solutions" / f"{entry['file']}.py"
        if problem.is_file() and solution.is_file():
            by_level[int(entry["level"])].append(entry)
    manifest = {}
    samples: dict[tuple[int, int], int] = defaultdict(int)
    for level in sorted(by_level):
        chosen = sorted(by_level[level], key=lambda e: e["file"])[:per_level]
        for entry in sorted(chosen, key=lambda e: (int(e["problem_id"]), e["file"])):
            key = (level, problem_number(entry))
            name = f"level_{level}_problem_{key[1]}_sample_{samples[key]}"
            samples[key] += 1
            folder = target / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "task.py").write_text(problem_file(assets, entry).read_text())
            (folder / "kernel.py").write_text((assets / "solutions" / f"{entry['file']}.py").read_text())
            manifest[name] = {
                k: entry.get(k) for k in ("file", "model", "level", "problem_id", "torch_speedup")
            }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    counts = defaultdict(int)
    for item in manifest.values():
        counts[item["level"]] += 1
    print(
        f"{len(manifest)} pairs in {target}: "
        + ", ".join(f"level {k}: {v}" for k, v in sorted(counts.items()))
    )
    out = target.parent / (target.name + "-out")
    print("run (on the GPU machine, from the repository root):")
    print(f"  PYTHONPATH=$PWD {sys.executable} -m engine.cli.evalset {target} --out {out} --device cuda")
    relax = partial_replacement_relaxations()
    if relax:
        print(
            "this cudaforge's guard has no KernelBench-like default policy yet, so kernels that keep PyTorch ops\n"
            "beside their own are refused statically; to judge them as KernelBench does instead, add:\n  "
            + " ".join(f"--relax {r}" for r in relax)
        )
    print("then compare the timing spread with cudaforge eval run alone:")
    print(f"  PYTHONPATH=$PWD {sys.executable} {Path(__file__).relative_to(REPO)} compare {out} --n 10")
    return 0


# Static rules that refuse PyTorch ops kept beside the candidate's own kernels: KernelBench allows them.
PARTIAL_REPLACEMENT_RULES = (
    "submodule-compute-in-forward",
    "torch-compute-in-forward",
    "tensor-arithmetic-in-forward",
    "functional-in-forward",
)


def partial_replacement_relaxations() -> list[str]:
    """The rules to relax for KernelBench's policy, when this cudaforge has no guard policies."""
    sys.path.insert(0, str(REPO))
    from engine.eval.options import EvalOptions
    from engine.guard.rules import RULES

    if hasattr(EvalOptions(), "guard_policy") or hasattr(EvalOptions(), "guard"):  # policies: loose, or one object
        return []
    return [r for r in PARTIAL_REPLACEMENT_RULES if r in RULES]


def _spread(stats: dict) -> float | None:
    median = stats.get("median_ms")
    return stats["iqr_ms"] / median if median else None


def compare(out: Path, n: int, device: str) -> int:
    summary = json.loads((out / "summary.json").read_text())
    correct = sorted(
        (p for p in summary["pairs"] if p["status"] == "correct" and p["kernel_ms"]), key=lambda p: p["name"]
    )
    rows = []
    sys.path.insert(0, str(REPO))
    from engine.eval.evaluate import evaluate_files
    from engine.eval.options import EvalOptions
    from engine.eval.timing import TimingPlan
    from engine.guard.policy import GuardSettings

    for pair in correct[:n]:
        stored = json.loads((out / "results" / f"{pair['name']}.json").read_text())
        settings = stored["settings"]
        # the evaluator alone on the GPU with the settings the evalset used (relaxed rules included)
        options = EvalOptions(
            device=device, trials=settings["trials"], seed=settings["seed"],
            timing=TimingPlan(**settings["timing"]),
            guard=GuardSettings(relax=tuple(settings.get("relax", ()))),
        )  # fmt: skip
        alone = evaluate_files(pair["task"], pair["kernel"], options).to_dict()
        if not alone.get("timing"):
            print(f"{pair['name']}: alone it is {alone.get('status')}, not timed")
            continue
        a, e = alone["timing"]["candidate"], stored["timing"]["candidate"]
        rows.append({
            "name": pair["name"],
            "evalset_median_ms": e["median_ms"], "alone_median_ms": a["median_ms"],
            "evalset_spread": _spread(e), "alone_spread": _spread(a),
            "evalset_speedup": stored.get("speedup"), "alone_speedup": alone.get("speedup"),
        })  # fmt: skip
        r = rows[-1]
        print(
            f"{r['name']:34s} median {r['evalset_median_ms']:.4g} ms vs alone {r['alone_median_ms']:.4g} ms · "
            f"IQR {100 * (r['evalset_spread'] or 0):.2f}% vs alone {100 * (r['alone_spread'] or 0):.2f}%",
            flush=True,
        )
    run = summary["time"]["this_run"]
    result = {
        "pairs": rows,
        "median_spread_evalset": statistics.median([r["evalset_spread"] for r in rows]) if rows else None,
        "median_spread_alone": statistics.median([r["alone_spread"] for r in rows]) if rows else None,
        "median_abs_log2_ratio_of_medians": (
            statistics.median([abs(math.log2(r["evalset_median_ms"] / r["alone_median_ms"])) for r in rows])
            if rows
            else None
        ),
        "evalset_wall_seconds": run["wall_seconds"],
        "evalset_sum_evaluation_seconds": run["sum_evaluation_seconds"],
        "evalset_set": summary["set"],
        "status_counts": summary["status_counts"],
    }
    (out / "compare_alone.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\nmedian kernel IQR/median: evalset {100 * (result['median_spread_evalset'] or 0):.2f}% · "
        f"alone {100 * (result['median_spread_alone'] or 0):.2f}% over {len(rows)} kernel(s); "
        f"median |log2(evalset/alone)| of medians {result['median_abs_log2_ratio_of_medians']}"
    )
    print(
        f"evalset run: wall {run['wall_seconds']:.1f} s for evaluations summing {run['sum_evaluation_seconds']:.1f} s "
        f"(phase 1 {run['phase1_wall_seconds']:.1f} s wall / {run['phase1_sum_seconds']:.1f} s summed, "
        f"phase 2 {run['phase2_wall_seconds']:.1f} s wall / {run['phase2_sum_seconds']:.1f} s summed)"
    )
    print(f"written: {out / 'compare_alone.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="step", required=True)
    b = sub.add_parser("build", help="write a pairs folder from the leaderboard corpus")
    b.add_argument("assets", type=Path, help="the leaderboard's docs/assets folder")
    b.add_argument("target", type=Path, help="the pairs folder to write")
    b.add_argument("--per-level", type=int, default=12, help="solutions per level (default 12: 36 pairs)")
    c = sub.add_parser("compare", help="re-time correct kernels alone and compare the spread")
    c.add_argument("out", type=Path, help="the evalset's --out folder")
    c.add_argument("--n", type=int, default=10, help="how many correct kernels to re-time (default 10)")
    c.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    if args.step == "build":
        return build(args.assets, args.target, args.per_level)
    return compare(args.out, args.n, args.device)


if __name__ == "__main__":
    sys.exit(main())
