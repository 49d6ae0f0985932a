"""A real search on the GPU (issue 28): leaderboard kernels as an exploration's branches, against each alone.

For each KernelBench problem named (``l1_p88`` = level 1, problem 88), the leaderboard corpus
(anneouyang/KernelBenchLeaderboard's ``docs/assets``: see leaderboard.py for its numbering) has up to
seven kernels written by different models. This script, per problem:

1. writes scripted agents: the seed iteration's Coder answers with the first kernel; the Judge's ideas
   call answers with K ideas (K = the number of kernels); branch k's Coder answers with kernel k;
2. makes the seed with ``cudaforge run --rounds 0`` and runs ``cudaforge explore --from 0 --width K
   --rounds 1`` on it (``--gpus`` or ``--ray`` as given), timed from outside;
3. evaluates every kernel alone with ``cudaforge eval`` (one at a time, nothing else on the GPU);
4. compares: the exploration's best branch must hold the kernel that is fastest among those correct
   alone. The timing spread says whether a different answer is within noise: each alone kernel's
   interquartile range of its per-call times (relative to the median), and the gap between the two
   fastest kernels' times alone against the mean of their two ranges. "Fastest" is the lowest kernel
   time, as the exploration ranks (engine/explore/ranking.py); the highest speedup alone is given too. The exploration's
   wall time is set against the sum of its evaluations' times (the summary's ``evaluation_seconds``)
   and against that sum plus the profiles'.

Results are written as they come (``OUT/<problem>/``: the scripted agents, the session, explore.json,
eval-k.json) and the comparison goes to ``OUT/<problem>/report.json`` and one line per problem on
stdout. Nothing of the corpus is copied into the repository.

Usage (device_run.sh's ``explore_lb`` section)::

    python3 benchmarks/explore_leaderboard.py ASSETS OUT --problems l1_p88,l1_p12,l2_p16 [--gpus 0 | --ray auto]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from leaderboard import problem_number  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
JUDGE_AFTER_ROUND = (
    '{"key_metrics": ["speedup"], "bottleneck": "none found", "optimization_method": "keep it", '
    '"modification_plan": "resubmit the kernel as it is"}\n'
)


def parse_problem(name: str) -> tuple[int, int]:
    """``l1_p88`` -> (1, 88): level and KernelBench's 1-based problem number."""
    match = re.fullmatch(r"l(\d)_p(\d+)", name)
    if not match:
        raise ValueError(f"not a problem name like l1_p88: {name!r}")
    return int(match.group(1)), int(match.group(2))


def problem_kernels(assets: Path, problem: str) -> list[dict[str, Any]]:
    """The leaderboard's kernels for one problem, in the corpus's order: model and solution path."""
    level, number = parse_problem(problem)
    raw = json.loads((assets / "raw_data.json").read_text())
    kernels = []
    for entry in raw:
        if int(entry["level"]) == level and problem_number(entry) == number:
            path = assets / "solutions" / f"{entry['file']}.py"
            if path.is_file():
                kernels.append({"model": entry.get("model"), "file": entry["file"], "path": str(path)})
    return kernels


def _reply(source: str) -> str:
    return f"Here is the kernel.\n\n```python\n{source.rstrip()}\n```\n"


def write_agents(work: Path, kernels: list[dict[str, Any]]) -> tuple[Path, Path]:
    """Scripted Coder and Judge folders for the seed and the K branches (see the module docstring)."""
    coder, judge = work / "coder", work / "judge"
    judge.mkdir(parents=True, exist_ok=True)
    coder.mkdir(parents=True, exist_ok=True)
    (coder / "01_seed.md").write_text(_reply(Path(kernels[0]["path"]).read_text()))
    for k, kernel in enumerate(kernels, 1):
        folder = coder / f"branch-{k}"
        folder.mkdir(exist_ok=True)
        (folder / "01_kernel.md").write_text(_reply(Path(kernel["path"]).read_text()))
    ideas = [
        {
            "rank": k,
            "key_metrics": ["speedup of the seed"],
            "bottleneck": f"direction {k}",
            "optimization_method": f"the approach {kernel['model']} took",
            "modification_plan": f"rewrite the kernel as {kernel['model']} would",
        }
        for k, kernel in enumerate(kernels, 1)
    ]
    (judge / "01_ideas.md").write_text("```json\n" + json.dumps(ideas, indent=1) + "\n```\n")
    (judge / "02_after_round.md").write_text(JUDGE_AFTER_ROUND)
    return coder, judge


def _cli(*args: str, timeout: float, log: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    log.write_text(f"$ cudaforge {' '.join(args)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def compare(kernels: list[dict[str, Any]], explored: dict[str, Any], alone: list[dict[str, Any]],
            explore_wall: float) -> dict[str, Any]:  # fmt: skip
    """The report for one problem: branch k against kernel k alone, the best, the spread, the ratios."""
    rows = []
    branches = {b["name"]: b for b in explored.get("branches", [])}
    start = explored["spec"]["start"]
    for k, (kernel, result) in enumerate(zip(kernels, alone, strict=True), 1):
        branch = branches.get(f"explore/{start}-{k}", {})
        candidate = ((result.get("timing") or {}).get("candidate")) or {}
        median, iqr = candidate.get("median_ms"), candidate.get("iqr_ms")
        rows.append({
            "k": k, "model": kernel["model"], "file": kernel["file"],
            "branch_state": branch.get("state"), "branch_speedup": branch.get("best_speedup"),
            "alone_status": result.get("status"), "alone_speedup": result.get("speedup"),
            "alone_median_ms": median, "alone_iqr_ms": iqr,
            "alone_spread": (iqr / median) if median and iqr is not None else None,
        })  # fmt: skip
    # fastest = the lowest kernel time alone (as the exploration ranks: engine/explore/ranking.py);
    # the highest speedup alone is reported beside it (each speedup divides by its own reference timing)
    correct = [r for r in rows if r["alone_status"] == "correct" and r["alone_median_ms"] is not None]
    ranked = sorted(correct, key=lambda r: r["alone_median_ms"])
    fastest = ranked[0] if ranked else None
    by_speedup = max(correct, key=lambda r: r["alone_speedup"] or 0.0) if correct else None
    gap = noise = None
    if len(ranked) >= 2:
        gap = ranked[1]["alone_median_ms"] / ranked[0]["alone_median_ms"] - 1.0
        # the two kernels' own timing noise: the mean of their relative interquartile ranges
        noise = ((ranked[0]["alone_spread"] or 0.0) + (ranked[1]["alone_spread"] or 0.0)) / 2
    best = explored.get("best") or {}
    best_k = int(best["branch"].rsplit("-", 1)[1]) if best.get("branch") else None
    # the branches the exploration itself said it could not tell from its best (engine/explore/ranking.py)
    tied_k = [int(name.rsplit("-", 1)[1]) for name in best.get("within_spread") or []]
    devices = explored.get("devices") or {}
    by_part = devices.get("seconds_by_part") or {}
    evaluations = explored.get("evaluation_seconds")
    profiles = by_part.get("profile")
    wall = explored.get("wall_seconds")
    return {
        "kernels": len(kernels),
        "rows": rows,
        "fastest_alone": fastest and {"k": fastest["k"], "model": fastest["model"]},
        "highest_speedup_alone": by_speedup and {"k": by_speedup["k"], "model": by_speedup["model"]},
        "ranked_by": explored.get("ranked_by", "speedup"),
        "explore_best": best_k and {"k": best_k, "speedup": best.get("speedup")},
        "best_matches": bool(fastest) and best_k == fastest["k"],
        "explore_within_spread": tied_k,
        # the fastest alone is the exploration's best or one it named as within the best's timing spread
        "best_or_within_spread_matches": bool(fastest) and fastest["k"] in [best_k, *tied_k],
        "gap_between_two_fastest": gap,
        "noise_of_two_fastest": noise,
        # the gap is no wider than their noise: either of the two is an answer within noise
        "two_fastest_within_spread": gap is not None and noise is not None and gap <= noise,
        "status_agrees": all(
            (r["branch_speedup"] is not None) == (r["alone_status"] == "correct") for r in rows
        ),
        "wall_seconds": wall,
        "explore_command_seconds": round(explore_wall, 3),
        "evaluation_seconds": evaluations,
        "profile_seconds": profiles,
        "wall_over_evaluations": (wall / evaluations) if wall and evaluations else None,
        "wall_over_evaluations_and_profiles": (wall / (evaluations + profiles))
        if wall and evaluations and profiles
        else None,  # fmt: skip
        "alone_overlaps": devices.get("alone_overlaps"),
        "seconds_by_part": by_part,
    }


def started_ahead(session: Path, start: int, count: int) -> dict[str, dict[str, Any]]:
    """Per branch, from the iteration its round committed: which worker timed it (``spare``: started
    before the GPU was its own, engine/explore/devices.py) and the profile's own seconds against what
    ran before its go (the early start)."""
    from engine.eval.stagetimes import breakdown
    from sessions.repo import SessionRepo

    found: dict[str, dict[str, Any]] = {}
    repo = SessionRepo(session)
    try:
        for k in range(1, count + 1):
            name = f"explore/{start}-{k}"
            if name not in repo.branches():
                continue
            last = repo.history(name)[-1]
            result = last.read_json("eval.json")
            profile = last.read_json("profile.json") if "profile.json" in last.files() else {}
            found[name] = {
                "worker": (result.get("settings") or {}).get("worker"),
                "start_s": breakdown(result.get("durations")).get("start"),  # the worker's own start
                "profile_s": profile.get("duration_s"),
                "profile_before_go_s": (profile.get("phases") or {}).get("before_go"),
            }
    finally:
        repo.close()
    return found


def run_problem(
    assets: Path, out: Path, problem: str, placement: list[str], device: str = "cuda"
) -> dict[str, Any]:
    kernels = problem_kernels(assets, problem)
    if not kernels:
        raise SystemExit(f"no leaderboard kernels for {problem} under {assets}")
    level, number = parse_problem(problem)
    task = assets / "problems" / f"l{level}_p{number}.py"
    work = out / problem
    work.mkdir(parents=True, exist_ok=True)
    coder, judge = write_agents(work, kernels)
    sessions = work / "sessions"
    agents = ["--coder", f"scripted/{coder}", "--judge", f"scripted/{judge}"]
    _cli("run", str(task), "--headless", "--auto-approve", "--rounds", "0", "--device", device,
         *agents, "--sessions-dir", str(sessions), timeout=600, log=work / "seed.log")  # fmt: skip
    session = next(p for p in sorted(sessions.iterdir()) if p.is_dir())
    started = time.monotonic()
    done = _cli("explore", str(session), "--from", "0", "--width", str(len(kernels)), "--rounds", "1",
                "--device", device, *placement, "--json", str(work / "explore.json"), "-v",
                timeout=900, log=work / "explore.log")  # fmt: skip
    explore_wall = time.monotonic() - started
    if done.returncode != 0 or not (work / "explore.json").is_file():
        raise SystemExit(f"{problem}: explore exited {done.returncode}; see {work / 'explore.log'}")
    explored = json.loads((work / "explore.json").read_text())
    alone = []
    for k, kernel in enumerate(kernels, 1):
        result = _cli("eval", str(task), kernel["path"], "--device", device, "--json", timeout=600,
                      log=work / f"eval-{k}.log")  # fmt: skip
        try:
            alone.append(json.loads(result.stdout))
        except json.JSONDecodeError:
            alone.append({"status": f"no result (exit {result.returncode})"})
        (work / f"eval-{k}.json").write_text(json.dumps(alone[-1], indent=1))
    report = {"problem": problem, "placement": placement, **compare(kernels, explored, alone, explore_wall)}
    report["started_ahead"] = started_ahead(session, int(explored["spec"]["start"]), len(kernels))
    (work / "report.json").write_text(json.dumps(report, indent=1))
    return report


def line(report: dict[str, Any]) -> str:
    rows = " | ".join(
        f"{r['k']}:{r['model']}: branch {r['branch_speedup']} alone {r['alone_status']} {r['alone_speedup']}"
        f" (IQR {100 * r['alone_spread']:.1f}%)" if r["alone_spread"] is not None else
        f"{r['k']}:{r['model']}: branch {r['branch_speedup']} alone {r['alone_status']}"
        for r in report["rows"]
    )  # fmt: skip
    ratio = report["wall_over_evaluations"]
    return (
        f"{report['problem']} K={report['kernels']} best branch {report['explore_best']} fastest alone "
        f"{report['fastest_alone']} (highest speedup alone {report['highest_speedup_alone']}) "
        f"ranked by {report['ranked_by']} match={report['best_matches']} "
        f"within_spread_of_best={report['explore_within_spread']} "
        f"match_or_within={report['best_or_within_spread_matches']} gap={report['gap_between_two_fastest']} "
        f"noise={report['noise_of_two_fastest']} "
        f"within_spread={report['two_fastest_within_spread']} status_agrees={report['status_agrees']} "
        f"wall {report['wall_seconds']} s / evaluations {report['evaluation_seconds']} s = {ratio} "
        f"(+profiles {report['profile_seconds']} s: {report['wall_over_evaluations_and_profiles']}) "
        f"alone_overlaps={report['alone_overlaps']} by part {report['seconds_by_part']}\n  {rows}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assets", type=Path, help="the leaderboard's docs/assets folder")
    parser.add_argument("out", type=Path)
    parser.add_argument("--problems", required=True, help="comma-separated, e.g. l1_p88,l1_p12,l2_p16")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--gpus", help="passed to explore --gpus")
    where.add_argument("--ray", help="passed to explore --ray")
    parser.add_argument(
        "--device", default="cuda", help="where kernels run (cpu: a trial of the script itself)"
    )
    parser.add_argument(
        "--recompare",
        action="store_true",
        help="run nothing: compare again from OUT/<problem>/ (explore.json, eval-k.json, report.json)",
    )
    args = parser.parse_args(argv)
    placement = ["--gpus", args.gpus] if args.gpus else ["--ray", args.ray] if args.ray else []
    for problem in args.problems.split(","):
        if args.recompare:
            work = args.out / problem.strip()
            kernels = problem_kernels(args.assets, problem.strip())
            old = json.loads((work / "report.json").read_text())
            explored = json.loads((work / "explore.json").read_text())
            as_run = work / "explore-as-run.json"  # the summary the run wrote, when explore.json was redone
            if as_run.is_file():  # (a finished exploration run again re-ranks only): its times are the run's
                timed = json.loads(as_run.read_text())
                explored.update({k: timed[k] for k in ("wall_seconds", "evaluation_seconds", "devices")})
            alone = [json.loads((work / f"eval-{k}.json").read_text()) for k in range(1, len(kernels) + 1)]
            report = {"problem": old["problem"], "placement": old["placement"],
                      **compare(kernels, explored, alone, old["explore_command_seconds"])}  # fmt: skip
            (work / "report.json").write_text(json.dumps(report, indent=1))
            print(line(report), flush=True)
            continue
        try:
            print(
                line(run_problem(args.assets, args.out, problem.strip(), placement, args.device)), flush=True
            )
        except (SystemExit, subprocess.TimeoutExpired) as error:
            print(f"{problem}: FAILED: {error}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
