"""The static guard over a public corpus of real LLM-written KernelBench kernels, under both policies.

Usage (corpus: a checkout of anneouyang/KernelBenchLeaderboard; never copied into this repo):

    PYTHONPATH=$PWD python benchmarks/guard_corpus.py /path/to/KernelBenchLeaderboard [--list-refusals]
    PYTHONPATH=$PWD python benchmarks/guard_corpus.py CORPUS --evaluate N --device cuda [--guard default]

The first form prints, per level, how many kernels each policy refuses and which rules refused them
(``--list-refusals``: every refusal under ``default`` with its rules and messages, to read by hand).
The second evaluates N corpus kernels spread over the three levels on the device (build, check, time)
and prints status counts, the own-kernel share distribution and every refusal / ``incorrect``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from engine.guard.rules import POLICIES
from engine.guard.static import check_source

sys.path.insert(0, str(Path(__file__).resolve().parent))
from leaderboard import problem_file  # noqa: E402


def load_corpus(root: Path) -> list[dict[str, Any]]:
    """Each kernel with its level, problem and the path of its (v0-shaped) problem file."""
    assets = root / "docs" / "assets"
    entries = json.loads((assets / "raw_data.json").read_text())
    out = []
    for entry in entries:
        path = assets / "solutions" / f"{entry['file']}.py"
        if not path.is_file():
            continue
        out.append(
            {
                "file": entry["file"],
                "level": int(entry["level"]),
                "problem_id": int(entry["problem_id"]),
                "model": entry.get("model", ""),
                "kernel": path,
                "task": problem_file(assets, entry),
            }
        )
    return sorted(out, key=lambda e: (e["level"], e["problem_id"], e["file"]))


def static_scan(corpus: list[dict[str, Any]], device: str = "cuda") -> dict[str, dict[str, Any]]:
    """For each kernel and policy: the refusing findings (empty when the guard would let it build)."""
    backend = "cuda" if device == "cuda" else "cpu"
    result: dict[str, dict[str, Any]] = {}
    for entry in corpus:
        source = entry["kernel"].read_text(encoding="utf-8", errors="replace")
        per_policy = {}
        for policy in POLICIES:
            findings = check_source(source, backend, policy=policy)
            per_policy[policy] = [f for f in findings if f.blocks]
        result[entry["file"]] = per_policy
    return result


def report_static(corpus: list[dict[str, Any]], scan: dict[str, dict[str, Any]], list_refusals: bool) -> str:
    lines = ["| level | kernels | refused (default) | refused (strict) |", "|---|---|---|---|"]
    by_level: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for entry in corpus:
        by_level[entry["level"]].append(entry)
    levels = sorted(by_level)
    totals = Counter()
    for level in [*levels, None]:
        entries = corpus if level is None else by_level[level]
        n = len(entries)
        counts = {p: sum(1 for e in entries if scan[e["file"]][p]) for p in POLICIES}
        label = "all" if level is None else str(level)
        lines.append(
            f"| {label} | {n} | {counts['default']} ({100 * counts['default'] / n:.0f}%) "
            f"| {counts['strict']} ({100 * counts['strict'] / n:.0f}%) |"
        )
        totals[label] = n
    for policy in POLICIES:
        rules = Counter(r for e in corpus for r in {f.rule for f in scan[e["file"]][policy]})
        lines.append(
            f"\nrules refusing under {policy}: "
            + (", ".join(f"{r} {c}" for r, c in rules.most_common()) or "none")
        )
    if list_refusals:
        lines.append("\nrefusals under default:")
        for entry in corpus:
            for f in scan[entry["file"]]["default"]:
                lines.append(f"  l{entry['level']}_p{entry['problem_id']} {entry['file']}: {f}")
    return "\n".join(lines)


def pick_spread(corpus: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """N kernels spread evenly over the levels (round-robin by level, then by problem)."""
    by_level: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for entry in corpus:
        if entry["task"].is_file():
            by_level[entry["level"]].append(entry)
    picked: list[dict[str, Any]] = []
    index = 0
    while len(picked) < n and any(index < len(v) for v in by_level.values()):
        for level in sorted(by_level):
            entries = by_level[level]
            step = max(1, len(entries) // max(1, n // len(by_level)))
            if index * step < len(entries) and len(picked) < n:
                picked.append(entries[index * step])
        index += 1
    return picked


def evaluate_on_device(entries: list[dict[str, Any]], device: str, policy: str) -> str:
    from engine.eval.evaluate import evaluate_files
    from engine.eval.options import EvalOptions
    from engine.guard.policy import GuardSettings

    statuses: Counter[str] = Counter()
    shares: list[float] = []
    lines = []
    for entry in entries:
        options = EvalOptions(device=device, guard=GuardSettings(policy))
        result = evaluate_files(entry["task"], entry["kernel"], options)
        statuses[result.status] += 1
        share = (result.kernel_share or {}).get("share")
        if share is not None:
            shares.append(share)
        tag = f"l{entry['level']}_p{entry['problem_id']} {entry['file'][:10]}"
        speed = f"{result.speedup:.2f}x" if result.speedup else "-"
        lines.append(
            f"{tag}: {result.status} speedup {speed} share {share if share is None else f'{share:.3f}'}"
        )
        if result.status != "correct":
            lines.extend(f"    {m}" for m in result.messages[:3])
    lines.append("status counts: " + ", ".join(f"{k} {v}" for k, v in statuses.most_common()))
    if shares:
        lines.append(
            f"own-kernel share: n={len(shares)} min {min(shares):.3f} median {statistics.median(shares):.3f} "
            f"max {max(shares):.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpus", type=Path, help="KernelBenchLeaderboard checkout")
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--list-refusals", action="store_true")
    parser.add_argument("--evaluate", type=int, default=0, help="evaluate N kernels on the device")
    parser.add_argument("--guard", default="default", choices=POLICIES)
    parser.add_argument("--files", nargs="*", default=None, help="evaluate these solution stems instead")
    args = parser.parse_args(argv)
    corpus = load_corpus(args.corpus)
    if not corpus:
        print(f"no kernels under {args.corpus}", file=sys.stderr)
        return 2
    if args.evaluate or args.files:
        chosen = (
            [e for e in corpus if e["file"] in set(args.files)]
            if args.files
            else pick_spread(corpus, args.evaluate)
        )
        print(evaluate_on_device(chosen, args.device, args.guard))
        return 0
    print(report_static(corpus, static_scan(corpus, args.device), args.list_refusals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
