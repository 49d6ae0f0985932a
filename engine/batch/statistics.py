"""Per-task rows and set-wide statistics of a bench run, plus the CSV/JSON writers.

Everything here is a pure function of :class:`TaskRow` values so the numbers can be checked by
hand. Conventions (documented because papers differ):

* **correct %** and **fast_p** use *every* task as the denominator, as KernelBench defines
  fast_p: the fraction of all tasks that are correct *and* faster than ``p`` × the reference.
  A task that failed, errored or never ran counts against the set, never out of it.
* **mean / median / geometric-mean speedup** are taken over the *correct* tasks only: a wrong
  kernel has no meaningful speedup, and counting it as 0 would make the geometric mean 0. Read
  them together with correct %.
* A correct task without a measured speedup counts as correct but never as ``> p``.
* ``flagged_tasks`` counts the tasks whose best kernel carries a review flag (a speedup above the
  threshold, a time below the hardware floor); ``implausible_tasks``, apart, those below the floor.
  They are counted, not removed: the verdict is the evaluator's, the flag asks a human to look.
* Totals add what is known; ``cost_unknown_tasks`` says how many tasks had an unpriced model.
* With ``bench --explore K`` a task's best is the best correct iteration over *all* its session's
  branches (``best_branch`` says which); rows, totals and the set say the width (``explore_width``),
  and a bench that did not explore has none of these columns or keys.
* With ``--compile-baseline``, ``speedup_vs_compile`` is the best kernel against ``torch.compile`` of
  the reference (see :mod:`engine.bench.compile_baseline`); the set gets the same mean / median /
  geomean over the tasks that have one, and ``vs_compile_fast_1.0`` over *all* tasks, as fast_p.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 1.0, 1.2, 1.5, 2.0)


@dataclass(frozen=True)
class TaskRow:
    """One task's outcome: its best correct kernel and what reaching it cost.

    ``status`` is ``done`` (rounds finished), ``unfinished`` (a session that can be continued),
    ``error`` (the last attempt exited with an error) or ``pending`` (never started).
    """

    task: str
    status: str
    correct: bool
    best_speedup: float | None
    rounds: int | None
    tokens: int
    cost_usd: float | None
    minutes: float
    device: str = "cpu"
    session: str = ""
    # with --compile-baseline: eager ÷ compiled reference, and the best kernel over the compiled one
    compile_speedup: float | None = None
    speedup_vs_compile: float | None = None
    # best correct speedup so far after each round 0..rounds (None before the first correct one)
    best_by_round: tuple[float | None, ...] = ()
    # the session's guard (engine.guard.policy label) and its best kernel's own-kernel share
    guard: str = ""
    best_share: float | None = None
    # the best kernel's correctness at other shapes ("2/3"; "" when not checked: ``run --shapes``)
    best_shapes: str = ""
    # the best kernel's review flags (EvalResult.flags) and whether its time is below the hardware floor
    best_flagged: bool = False
    best_implausible: bool = False
    # with ``bench --explore K``: the width and beam explored with, the branch of the best kernel,
    # and the exploration's own summary (``cudaforge explore --json``)
    explore_width: int | None = None
    explore_beam: int | None = None
    best_branch: str = ""
    explore_summary: str = ""


def fast_p(rows: Sequence[TaskRow], p: float) -> float:
    """KernelBench's fast_p: correct tasks with speedup > p, over ALL tasks (0.0 for an empty set)."""
    if not rows:
        return 0.0
    hits = sum(1 for r in rows if r.correct and r.best_speedup is not None and r.best_speedup > p)
    return hits / len(rows)


def _fast_key(p: float) -> str:
    return f"fast_{p:.1f}"


def _averages(speedups: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """Mean, median and geometric mean (over the positive values) of ``speedups``."""
    positive = [s for s in speedups if s > 0]
    return (
        statistics.fmean(speedups) if speedups else None,
        statistics.median(speedups) if speedups else None,
        math.exp(statistics.fmean(math.log(s) for s in positive)) if positive else None,
    )


def set_statistics(rows: Sequence[TaskRow]) -> dict[str, Any]:
    """The set-wide numbers of the summary (see the module docstring for the conventions)."""
    speedups = [r.best_speedup for r in rows if r.correct and r.best_speedup is not None]
    mean, median, geomean = _averages(speedups)
    n_correct = sum(1 for r in rows if r.correct)
    known_costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    gpu_minutes = sum(r.minutes for r in rows if r.device == "cuda")
    return {
        "tasks": len(rows),
        "correct": n_correct,
        "correct_pct": 100.0 * n_correct / len(rows) if rows else 0.0,
        "mean_speedup": mean,
        "median_speedup": median,
        "geomean_speedup": geomean,
        **{_fast_key(p): fast_p(rows, p) for p in FAST_P_THRESHOLDS},
        "total_tokens": sum(r.tokens for r in rows),
        "total_cost_usd": sum(known_costs),
        "cost_unknown_tasks": sum(1 for r in rows if r.cost_usd is None and r.status != "pending"),
        "total_minutes": sum(r.minutes for r in rows),
        "gpu_hours": gpu_minutes / 60.0,
        **_compile_statistics(rows),
        **_guard_statistics(rows),
        "flagged_tasks": sum(1 for r in rows if r.correct and r.best_flagged),
        "implausible_tasks": sum(1 for r in rows if r.correct and r.best_implausible),
        **_explore_statistics(rows),
    }


def _explored(rows: Sequence[TaskRow]) -> bool:
    return any(r.explore_width is not None for r in rows)


def _explore_statistics(rows: Sequence[TaskRow]) -> dict[str, Any]:
    """The width (and beam) a ``bench --explore`` ran with; empty for a bench that did not explore."""
    widths = sorted({r.explore_width for r in rows if r.explore_width is not None})
    if not widths:
        return {}
    beams = sorted({r.explore_beam for r in rows if r.explore_beam is not None})
    return {
        "explore_width": widths[0] if len(widths) == 1 else widths,
        "explore_beam": (beams[0] if len(beams) == 1 else beams) if beams else None,
    }


def _guard_statistics(rows: Sequence[TaskRow]) -> dict[str, Any]:
    """The guard settings the set ran under, and the own-kernel share of the best kernels."""
    shares = sorted(r.best_share for r in rows if r.correct and r.best_share is not None)
    return {
        "guards": sorted({r.guard for r in rows if r.guard}),
        "share_tasks": len(shares),
        "share_min": shares[0] if shares else None,
        "share_median": statistics.median(shares) if shares else None,
        "share_max": shares[-1] if shares else None,
    }


def _compile_statistics(rows: Sequence[TaskRow]) -> dict[str, Any]:
    """Speedups against ``torch.compile``; empty when no task has a compile baseline."""
    vs = [r.speedup_vs_compile for r in rows if r.speedup_vs_compile is not None]
    if not vs and all(r.compile_speedup is None for r in rows):
        return {}
    mean, median, geomean = _averages(vs)
    return {
        "vs_compile_tasks": len(vs),
        "vs_compile_mean": mean,
        "vs_compile_median": median,
        "vs_compile_geomean": geomean,
        "vs_compile_fast_1.0": sum(1 for v in vs if v > 1.0) / len(rows) if rows else 0.0,
    }


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TaskRow) if f.name != "best_by_round")
#: only in the summaries of a bench that explored
EXPLORE_COLUMNS: tuple[str, ...] = ("explore_width", "explore_beam", "best_branch", "explore_summary")


def _row_dict(row: TaskRow, explored: bool) -> dict[str, Any]:
    return {k: v for k, v in asdict(row).items() if explored or k not in EXPLORE_COLUMNS}


def write_csv(rows: Sequence[TaskRow], path: Path) -> None:
    """One line per task; empty cells for unknown values."""
    explored = _explored(rows)
    columns = [c for c in COLUMNS if explored or c not in EXPLORE_COLUMNS]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            cells = {k: v for k, v in _row_dict(row, explored).items() if k in columns}
            writer.writerow({k: ("" if v is None else v) for k, v in cells.items()})


def write_json(rows: Sequence[TaskRow], path: Path) -> None:
    """``{"tasks": [...], "set": {...}}``, written atomically (a rerun may read it while it changes)."""
    explored = _explored(rows)
    payload = {"tasks": [_row_dict(r, explored) for r in rows], "set": set_statistics(rows)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(rows: Sequence[TaskRow]) -> str:
    """The per-task table and the set's statistics, as printed at the end of a bench."""
    with_compile = any(r.compile_speedup is not None for r in rows)
    with_shapes = any(r.best_shapes for r in rows)
    explored = _explored(rows)
    header = ["task", "status", "best", *(["branch"] if explored else []), *(["shapes"] if with_shapes else []),
              "rounds", "tokens", "cost", "min"]  # fmt: skip
    if with_compile:
        header += ["compile", "vs compile"]
    table = [header]
    for r in rows:
        compile_cells = [
            _num(r.compile_speedup, ".2f") + ("x" if r.compile_speedup is not None else ""),
            _num(r.speedup_vs_compile, ".2f") + ("x" if r.speedup_vs_compile is not None else ""),
        ]
        table.append(
            [
                r.task,
                r.status if r.correct or r.status != "done" else "done (no correct kernel)",
                _num(r.best_speedup, ".2f") + ("x" if r.best_speedup is not None else ""),
                *([r.best_branch or "-"] if explored else []),
                *([r.best_shapes or "-"] if with_shapes else []),
                "-" if r.rounds is None else str(r.rounds),
                str(r.tokens),
                "unknown" if r.cost_usd is None else f"${r.cost_usd:.4f}",
                f"{r.minutes:.1f}",
                *(compile_cells if with_compile else []),
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]
    s = set_statistics(rows)
    fast = "  ".join(f"{_fast_key(p)}={s[_fast_key(p)]:.2f}" for p in FAST_P_THRESHOLDS)
    lines += [
        "",
        f"correct {s['correct']}/{s['tasks']} ({s['correct_pct']:.1f}%) · speedup over correct tasks: "
        f"mean {_num(s['mean_speedup'], '.2f')} · median {_num(s['median_speedup'], '.2f')} · "
        f"geomean {_num(s['geomean_speedup'], '.2f')}",
        fast,
        f"tokens {s['total_tokens']} · "
        + (  # an unpriced call makes the total unknown: never shown as a smaller dollar figure
            f"cost unknown (${s['total_cost_usd']:.4f} priced; {s['cost_unknown_tasks']} task(s) unpriced)"
            if s["cost_unknown_tasks"]
            else f"${s['total_cost_usd']:.4f}"
        )
        + f" · GPU-hours {s['gpu_hours']:.3f}",
    ]
    if explored:
        beam = f", beam {s['explore_beam']}" if s["explore_beam"] is not None else ""
        lines.append(
            f"explored: width {s['explore_width']}{beam} from each task's seed; "
            "a task's best is its best correct iteration on any branch"
        )
    if s["guards"]:
        lines.append("guard: " + " | ".join(s["guards"]))
    if s["flagged_tasks"]:
        implausible = [r.task for r in rows if r.correct and r.best_implausible]
        lines.append(
            f"best kernels flagged for review: {s['flagged_tasks']}"
            + (f", {len(implausible)} below the hardware floor (physically implausible: {', '.join(implausible)})"
               if implausible else "")
            + " — check them by hand before trusting the speedups"
        )  # fmt: skip
    if s["share_tasks"]:
        lines.append(
            f"own-kernel share of the best kernels ({s['share_tasks']} task(s)): min {s['share_min']:.0%} · "
            f"median {s['share_median']:.0%} · max {s['share_max']:.0%}"
        )
    if with_compile:
        lines.append(
            f"against torch.compile ({s['vs_compile_tasks']} task(s)): mean {_num(s['vs_compile_mean'], '.2f')} · "
            f"median {_num(s['vs_compile_median'], '.2f')} · geomean {_num(s['vs_compile_geomean'], '.2f')} · "
            f"fast_1.0 {s['vs_compile_fast_1.0']:.2f}"
        )
    return "\n".join(lines)
