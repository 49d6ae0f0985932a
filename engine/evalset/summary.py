"""Per-kernel rows and set-wide statistics of an evalset, read back from ``OUT/results``.

The set statistics are the bench's (:func:`engine.batch.statistics.set_statistics`, same conventions:
correct % and fast_p over *every* pair, speedup averages over the correct ones), so an evalset and a
bench of the same kernels report the same numbers. On top of them:

* ``status_counts``: how many pairs ended in each EvalResult status (``pending``: no verdict yet;
  ``harness_error``: cudaforge itself failed, shown apart and redone by the next run);
* ``kernel_share``: the distribution of the own-kernel share (``EvalResult.kernel_share["share"]``,
  in [0, 1]) over the pairs whose results carry one; results written before that field existed
  simply have none;
* ``review``: how many kernels carry a review flag (``EvalResult.flags``: a speedup above the threshold,
  a time below the hardware floor) and, apart, how many were timed below the floor, by name;
* ``constant_to_rounding``: the pairs whose task's exact answer the float64 arbiter found constant to
  rounding (``EvalResult.arbiter``; ARCHITECTURE.md §3): any output within rounding passes there, so
  their speedups are not evidence; the table marks them ``≈0`` with a legend line;
* ``guard_policy``: the policy asked for and the policies the results record;
* ``timing_spread``: the candidate's relative IQR (IQR / median) over the timed kernels, to compare
  against ``cudaforge eval`` run alone;
* ``time``: this run's wall time against the sum of its evaluations' times, and the same sums over
  every stored result (earlier runs included).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from engine.batch.statistics import FAST_P_THRESHOLDS, TaskRow, set_statistics
from engine.eval.arbiter import CONSTANT_LEGEND, CONSTANT_MARK
from engine.eval.shapes import cell as shapes_cell
from engine.evalset import store
from engine.evalset.pairs import Pair

PENDING = "pending"
SHARE_BINS = 10
_SET_KEYS = ("tasks", "correct", "correct_pct", "mean_speedup", "median_speedup", "geomean_speedup")


@dataclass(frozen=True)
class PairRow:
    """One kernel's outcome, flattened for the CSV."""

    name: str
    status: str
    correct: bool
    speedup: float | None
    kernel_ms: float | None
    reference_ms: float | None
    kernel_spread: float | None  # the candidate's IQR / median
    timing_n: int | None
    kernel_share: float | None
    guard_policy: str | None
    build_cached: bool | None
    phase1_seconds: float | None
    phase2_seconds: float | None
    device: str
    gpu: str
    level: int | None
    problem_id: int | None
    sample_id: int | None
    task: str
    kernel: str
    message: str = ""
    # the issue-25 defences: "2/3" correct at other shapes ("" when not checked), the weak outputs, and
    # which own-kernel test judged it ("ablation" or "share")
    shapes: str = ""
    weak_outputs: str = ""
    own_kernel_test: str = ""
    # review flags (EvalResult.flags): any at all, and whether the time is below the hardware floor
    flagged: bool = False
    implausible: bool = False
    # the float64 arbiter found the exact answer constant to rounding (EvalResult.arbiter)
    constant_to_rounding: bool = False


def share_of(data: dict[str, Any]) -> float | None:
    """The own-kernel share a result records (``{"share": x}``, or a bare number), else None."""
    value = data.get("kernel_share")
    if isinstance(value, dict):
        value = value.get("share")
    return float(value) if isinstance(value, (int, float)) else None


def row_for(out: Path, pair: Pair) -> PairRow:
    """The pair's row from its stored final result, or a ``pending`` row when there is none."""
    data = store.read(store.result_path(out, pair.name))
    base = {"level": pair.level, "problem_id": pair.problem_id, "sample_id": pair.sample_id}
    paths = {"task": str(pair.task), "kernel": str(pair.kernel)}
    if data is None:
        check = store.read(store.check_path(out, pair.name))
        message = (
            "checked correct, not timed yet"
            if check and check.get("status") == "correct"
            else "not evaluated yet"
        )
        return PairRow(pair.name, PENDING, False, None, None, None, None, None, None, None, None,
                       None, None, "", "", **base, **paths, message=message)  # fmt: skip
    meta = data.get("evalset") or {}
    timing = data.get("timing") or {}
    candidate, reference = timing.get("candidate") or {}, timing.get("reference") or {}
    median = candidate.get("median_ms")
    spread = candidate.get("iqr_ms") / median if median and candidate.get("iqr_ms") is not None else None
    build = data.get("build") or {}
    messages = data.get("messages") or []
    return PairRow(
        name=pair.name,
        status=str(data.get("status")),
        correct=data.get("status") == "correct",
        speedup=data.get("speedup"),
        kernel_ms=median,
        reference_ms=reference.get("median_ms"),
        kernel_spread=spread,
        timing_n=candidate.get("n"),
        kernel_share=share_of(data),
        guard_policy=data.get("guard_policy"),
        build_cached=build.get("cached"),
        phase1_seconds=meta.get("phase1_seconds"),
        phase2_seconds=meta.get("phase2_seconds"),
        device=str(data.get("device", "")),
        gpu="" if meta.get("gpu") is None else str(meta.get("gpu")),
        **base,
        **paths,
        message=messages[-1] if messages and data.get("status") != "correct" else "",
        shapes=shapes_cell(data.get("shapes")),
        weak_outputs="; ".join(
            f"{w.get('output')}: {'/'.join(w.get('passes') or [])}" for w in data.get("weak_outputs") or []
        ),
        own_kernel_test=str((data.get("kernel_share") or {}).get("test", "")),
        flagged=bool(data.get("flags")),
        implausible=(data.get("hardware_floor") or {}).get("implausible") is True,
        constant_to_rounding=bool((data.get("arbiter") or {}).get("constant_to_rounding")),
    )


def shapes_counts(rows: Sequence[PairRow]) -> dict[str, int]:
    """Of the correct pairs: how many were checked at other shapes, and how many failed one."""
    checked = [r for r in rows if r.correct and r.shapes]
    specific = [r for r in checked if r.shapes.split("/")[0] != r.shapes.split("/")[1]]
    return {"checked": len(checked), "shape_specific": len(specific), "weak_tasks": sum(bool(r.weak_outputs) for r in rows)}


def _distribution(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    quartiles = (
        statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 3
    )
    return {
        "n": len(ordered),
        "min": ordered[0],
        "p25": quartiles[0],
        "median": quartiles[1],
        "p75": quartiles[2],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def share_distribution(rows: Sequence[PairRow]) -> dict[str, Any]:
    """The own-kernel share over the pairs that have one, with a 10-bin histogram on [0, 1]."""
    shares = [r.kernel_share for r in rows if r.kernel_share is not None]
    result = _distribution(shares)
    if shares:
        bins = [0] * SHARE_BINS
        for share in shares:
            bins[min(SHARE_BINS - 1, max(0, int(share * SHARE_BINS)))] += 1
        result["histogram"] = {
            f"{i / SHARE_BINS:.1f}-{(i + 1) / SHARE_BINS:.1f}": n for i, n in enumerate(bins)
        }
    return result


def set_summary(rows: Sequence[PairRow]) -> dict[str, Any]:
    """Correct %, fast_p and speedup averages exactly as the bench computes them."""
    bench_rows = [
        TaskRow(r.name, r.status, r.correct, r.speedup, None, 0, None,
                ((r.phase1_seconds or 0.0) + (r.phase2_seconds or 0.0)) / 60.0, r.device or "cpu")
        for r in rows
    ]  # fmt: skip
    full = set_statistics(bench_rows)
    keys = [*_SET_KEYS, *(f"fast_{p:.1f}" for p in FAST_P_THRESHOLDS)]
    return {k: full[k] for k in keys}


def summary_document(
    rows: Sequence[PairRow],
    run: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """Everything ``summary.json`` holds (``extra``: settings, skipped inputs, files written…)."""
    spreads = [r.kernel_spread for r in rows if r.kernel_spread is not None]
    policies = Counter(r.guard_policy for r in rows if r.guard_policy)
    stored_p1 = sum(r.phase1_seconds or 0.0 for r in rows)
    stored_p2 = sum(r.phase2_seconds or 0.0 for r in rows)
    return {
        "set": set_summary(rows),
        "status_counts": dict(Counter(r.status for r in rows)),
        "review": review_counts(rows),
        "constant_to_rounding": [r.name for r in rows if r.constant_to_rounding],
        "kernel_share": share_distribution(rows),
        "shapes": shapes_counts(rows),
        "guard_policy": {"requested": extra.pop("guard_policy", None), "in_results": dict(policies)},
        "timing_spread": _distribution(spreads),
        "time": {
            "this_run": run,
            "stored_results": {
                "phase1_sum_seconds": stored_p1,
                "phase2_sum_seconds": stored_p2,
                "sum_evaluation_seconds": stored_p1 + stored_p2,
            },
        },
        **extra,
        "pairs": [asdict(r) for r in rows],
    }


def review_counts(rows: Sequence[PairRow]) -> dict[str, Any]:
    """The kernels flagged for review, and apart those timed below the hardware floor, by name."""
    return {
        "flagged": sum(r.flagged for r in rows),
        "implausible": sum(r.implausible for r in rows),
        "implausible_pairs": [r.name for r in rows if r.implausible],
    }


def review_line(review: dict[str, Any]) -> list[str]:
    """The table's line on flagged kernels (none when nothing is flagged)."""
    if not review.get("flagged"):
        return []
    names = review.get("implausible_pairs") or []
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    implausible = f", {len(names)} below the hardware floor (physically implausible: {shown})" if names else ""
    return [f"flagged for review: {review['flagged']}{implausible} — check them by hand"]


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(PairRow))


def write_csv(rows: Sequence[PairRow], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in asdict(row).items()})


def write_json(document: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, fmt) + suffix


def format_table(rows: Sequence[PairRow], document: dict[str, Any]) -> str:
    """The per-kernel table and the set's statistics, as printed at the end of a run."""
    table = [["pair", "status", "speedup", "shapes", "kernel ms", "IQR", "check s", "time s"]]
    for r in rows:
        table.append([
            r.name, r.status + (f" {CONSTANT_MARK}" if r.constant_to_rounding else ""), _num(r.speedup, ".2f", "x"), r.shapes or "-", _num(r.kernel_ms, ".4g"),
            _num(None if r.kernel_spread is None else 100 * r.kernel_spread, ".1f", "%"),
            _num(r.phase1_seconds, ".1f"), _num(r.phase2_seconds, ".1f"),
        ])  # fmt: skip
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]
    s = document["set"]
    fast = "  ".join(f"fast_{p:.1f}={s[f'fast_{p:.1f}']:.2f}" for p in FAST_P_THRESHOLDS)
    run = document["time"]["this_run"]
    lines += [
        "",
        f"correct {s['correct']}/{s['tasks']} ({s['correct_pct']:.1f}%) · speedup over correct pairs: "
        f"mean {_num(s['mean_speedup'], '.2f')} · median {_num(s['median_speedup'], '.2f')} · "
        f"geomean {_num(s['geomean_speedup'], '.2f')}",
        fast,
        "statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(document["status_counts"].items())),
        *(
            [
                f"harness errors: {document['status_counts']['harness_error']} — cudaforge's own faults, not "
                "verdicts on those kernels; run the same command again to redo them"
            ]
            if document["status_counts"].get("harness_error")
            else []
        ),
        *review_line(document.get("review") or {}),
        *([CONSTANT_LEGEND] if any(r.constant_to_rounding for r in rows) else []),
        f"this run: wall {run['wall_seconds']:.1f} s for {run['phase1_evaluations']} check(s) "
        f"+ {run['phase2_evaluations']} timing(s) summing {run['sum_evaluation_seconds']:.1f} s",
    ]
    share = document["kernel_share"]
    if share.get("n"):
        lines.append(
            f"own-kernel share over {share['n']} pair(s): median {share['median']:.2f} · "
            f"min {share['min']:.2f} · max {share['max']:.2f}"
        )
    shapes = document.get("shapes") or {}
    if shapes.get("checked"):
        lines.append(
            f"shapes: {shapes['checked'] - shapes['shape_specific']} of {shapes['checked']} correct pair(s) "
            f"correct at every other shape checked; {shapes['shape_specific']} shape-specific"
        )
    if shapes.get("weak_tasks"):
        lines.append(f"weak tasks (a degenerate answer passes an output): {shapes['weak_tasks']} pair(s)")
    policy = document["guard_policy"]
    if policy["requested"] or policy["in_results"]:
        lines.append(
            f"guard policy: {policy['requested'] or 'default'}"
            + (
                f" (results: {', '.join(f'{k} {v}' for k, v in policy['in_results'].items())})"
                if policy["in_results"]
                else ""
            )
        )
    return "\n".join(lines)
