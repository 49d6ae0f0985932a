"""What the adversarial defences (issue 25) cost and decided, read from a finished evalset run.

``python benchmarks/defence_cost.py OUT [--json FILE]``: OUT is an ``cudaforge evalset --out`` folder.
For each pair it reads the final result (and the phase-1 check, where the shape re-check ran) and
reports the verdict, the own-kernel test used (ablation or share) with its outcome, the shapes summary,
the weak outputs, and the seconds the defences added: the NaN fill and the weak-output analysis
(``durations["defence_*"]``) plus the ablation and shapes stages, against the pair's whole evaluation
time (phase 1 + phase 2 wall seconds). The issue's target: at most 10 % of an evaluation, or 2 s.
It also reports issue 45's measure: the replay defence's seconds (``durations["defence_replay"]``) against
the timing stage's (``durations["time"]``) over the correct pairs (target: at most 3 %), with the median
of each of its parts (``settings.replay.parts_ms``) where the results have them. And what
``timing-disagreement`` compared on each timed pair: the candidate's median gap beyond the reference's
(``timing.*.gap_median_ms``, engine.eval.timing) against the rule's allowance, so an honest set shows how
much room the allowance leaves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.eval.shapes import summary as shapes_summary  # noqa: E402

DEFENCE_KEYS = ("defence_nan_fill", "defence_weak_outputs", "ablation", "shapes")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def row(out: Path, name: str) -> dict | None:
    final = _read(out / "results" / f"{name}.json")
    check = _read(out / "checks" / f"{name}.json") or {}
    if final is None:
        return None
    meta = final.get("evalset") or {}
    whole = sum(v for v in (meta.get("phase1_seconds"), meta.get("phase2_seconds")) if v)
    added = 0.0
    for result in {id(final): final, id(check): check}.values():
        durations = result.get("durations") or {}
        added += sum(float(durations.get(k) or 0.0) for k in DEFENCE_KEYS)
    share = final.get("kernel_share") or {}
    return {
        "name": name,
        "status": final.get("status"),
        "test": share.get("test", ""),
        "ablation": (share.get("ablation") or {}).get("outcome", ""),
        "share": share.get("share"),
        "shapes": shapes_summary(final.get("shapes")),
        "weak": [w["output"] + ":" + "/".join(w["passes"]) for w in final.get("weak_outputs") or []],
        "added_s": added,
        "whole_s": whole,
        "fraction": added / whole if whole else None,
        "within_target": added <= 2.0 or (whole and added / whole <= 0.10),
        "rules": sorted({f["rule"] for f in final.get("findings") or [] if f.get("source") == "runtime"}),
        "replay_s": float((final.get("durations") or {}).get("defence_replay") or 0.0),
        "time_s": float((final.get("durations") or {}).get("time") or 0.0),
        "replay_parts_ms": ((final.get("settings") or {}).get("replay") or {}).get("parts_ms") or {},
        **gap_figures(final.get("timing")),
    }


def gap_figures(timing: dict | None) -> dict:
    """The candidate's median gap beyond the reference's and the allowance it was held to (ms), both None
    where the result has no gaps (CPU, where one clock times everything, or written before gaps were measured)."""
    from engine.guard.runtime import disagreement_allowance

    candidate, reference = (timing or {}).get("candidate") or {}, (timing or {}).get("reference") or {}
    if candidate.get("gap_median_ms") is None or reference.get("gap_median_ms") is None:
        return {"gap_excess_ms": None, "gap_allowance_ms": None}
    return {
        "gap_excess_ms": candidate["gap_median_ms"] - max(0.0, reference["gap_median_ms"]),
        "gap_allowance_ms": disagreement_allowance(candidate["median_ms"]),
    }


def gap_summary(rows: list[dict]) -> str | None:
    """One line over the timed pairs: the gaps' excess beyond the reference's against the allowance."""
    timed = [r for r in rows if r["gap_excess_ms"] is not None]
    if not timed:
        return None
    excess = sorted(r["gap_excess_ms"] for r in timed)
    room = min(r["gap_allowance_ms"] - r["gap_excess_ms"] for r in timed)
    return (
        f"timing gaps: {len(timed)} timed pairs, the candidate's median gap beyond the reference's "
        f"{excess[0]:+.4f} to {excess[-1]:+.4f} ms (median {statistics.median(excess):+.4f}); least room "
        f"left under the allowance {room:.4f} ms"
    )


def replay_share(rows: list[dict]) -> dict | None:
    """The replay defence's share of the timing stage over the correct pairs, and its parts' medians;
    None when no correct pair was timed."""
    timed = [r for r in rows if r["status"] == "correct" and r["time_s"] > 0]
    if not timed:
        return None
    replay, stage = sum(r["replay_s"] for r in timed), sum(r["time_s"] for r in timed)
    parts: dict[str, list[float]] = {}
    for r in timed:
        for part, ms in r["replay_parts_ms"].items():
            parts.setdefault(part, []).append(float(ms))
    return {
        "pairs": len(timed),
        "replay_s": replay,
        "time_s": stage,
        "share": replay / stage,
        "per_pair": sorted(r["replay_s"] / r["time_s"] for r in timed),
        "part_medians_ms": {part: statistics.median(values) for part, values in sorted(parts.items())},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = sorted(p.stem for p in (args.out / "results").glob("*.json"))
    rows = [r for r in (row(args.out, n) for n in names) if r]
    print(f"{'pair':44s} {'status':14s} {'test':9s} {'ablation':9s} {'share':>7s} {'added s':>8s} {'of eval':>8s}  shapes / weak / rules")
    for r in rows:
        share = f"{r['share']:.3f}" if isinstance(r["share"], float) else "-"
        frac = f"{100 * r['fraction']:.1f}%" if r["fraction"] is not None else "-"
        extra = "; ".join(x for x in (r["shapes"], ",".join(r["weak"]), ",".join(r["rules"])) if x)
        print(f"{r['name'][:44]:44s} {r['status']:14s} {r['test']:9s} {r['ablation']:9s} {share:>7s} {r['added_s']:8.2f} {frac:>8s}  {extra}")
    added = [r["added_s"] for r in rows]
    if added:
        within = sum(1 for r in rows if r["within_target"])
        print(
            f"\n{len(rows)} pairs; defences added median {statistics.median(added):.2f} s, max {max(added):.2f} s; "
            f"{within}/{len(rows)} within the target (<= 2 s or <= 10 % of the evaluation)"
        )
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        print("statuses:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    replay = replay_share(rows)
    if replay is not None:
        parts = ", ".join(f"{k} {v:.2f} ms" for k, v in replay["part_medians_ms"].items()) or "not recorded"
        print(
            f"replay defence: {replay['replay_s']:.3f} s of {replay['time_s']:.3f} s of the timing stage over "
            f"{replay['pairs']} correct pairs, {100 * replay['share']:.2f}% (issue 45: <= 3%); per pair "
            f"{100 * replay['per_pair'][0]:.1f}-{100 * replay['per_pair'][-1]:.1f}%; parts (medians): {parts}"
        )
    gaps = gap_summary(rows)
    if gaps:
        print(gaps)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
