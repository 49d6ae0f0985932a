"""Issue 45 on a GPU: each trust hole's cheat and its honest twin through the real evaluator.

Usage (on the GPU machine, from the repository root): ``python3 benchmarks/trust_gpu.py --out DIR``.
The cases are ``tests/fixtures/trust/cuda_trust.py``'s: an honest kernel and an ATen fallback after a
failed load; an ATen kernel under the source kernel's name; an honest kernel on a noise-level
reference; an honest naive matmul, a value-keyed memo and a storage replay; an L2-persisting copy under
the default and strict policies. One JSON line per case goes to ``DIR/trust.jsonl`` as it finishes, and
a table to stdout and ``DIR/trust.md``; the exit status is 1 when any verdict is not the expected one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.eval.evaluate import evaluate  # noqa: E402
from engine.eval.options import EvalOptions  # noqa: E402
from engine.guard.policy import GuardSettings  # noqa: E402
from tests.fixtures.trust.cuda_trust import CASES, task  # noqa: E402


def runtime_rules(result: object) -> list[str]:
    return [f["rule"] for f in result.findings if f.get("source") == "runtime"]  # type: ignore[attr-defined]


def _gaps(result: object) -> dict[str, object] | None:
    """Each model's median gap and flush (engine.eval.timing): what ``timing-disagreement`` compared."""
    timing = result.timing  # type: ignore[attr-defined]
    if timing is None:
        return None
    return {
        f"{name}_{what}": getattr(getattr(timing, name), f"{what}_median_ms")
        for name in ("candidate", "reference")
        for what in ("gap", "flush")
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", help="run only the cases whose name contains this text (or the case of that whole name)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, wrong = [], 0
    names = {case[0] for case in CASES}
    with (args.out / "trust.jsonl").open("a") as log:
        for name, task_name, source, policy, status, rule in CASES:
            if args.only and args.only not in name or args.only in names and args.only != name:
                continue  # a case's whole name runs that case alone
            started = time.monotonic()
            result = evaluate(task(task_name), source, EvalOptions(device="cuda", guard=GuardSettings(policy)), task_name=task_name)
            rules = runtime_rules(result)
            static = sorted({f["rule"] for f in result.findings if f.get("source") != "runtime" and f.get("severity") == "refuse"})
            ok = result.status == status and (rule is None or rule in rules)
            wrong += not ok
            share = result.kernel_share or {}
            row = {
                "case": name,
                "policy": policy,
                "expected": f"{status}{' · ' + rule if rule else ''}",
                "status": result.status,
                "runtime_rules": rules,
                "static_refusals": static,
                "ok": ok,
                "message": (result.messages[-1] if result.messages else "")[:400],
                "speedup": result.speedup,
                "own_share": share.get("share"),
                "own_kernels": [k["name"] for k in share.get("kernels", []) if k.get("own")],
                "replay": result.settings.get("replay"),
                "ablation": share.get("ablation"),
                "stages": {k: round(v, 3) for k, v in result.durations.items()},
                "messages": [m if not ok else m[:300] for m in result.messages],  # a wrong verdict's in full
                "l2": result.settings.get("l2"),
                "gaps_ms": _gaps(result),  # what timing-disagreement compared
                "defence_replay_s": result.durations.get("defence_replay"),
                "time_stage_s": result.durations.get("time"),
                "seconds": round(time.monotonic() - started, 1),
            }
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"{'PASS' if ok else 'FAIL'} {name}: {result.status} {rules} ({row['seconds']} s) {row['message'][:160]}", flush=True)
            if not ok:  # its whole last message's end: a compiler's error comes last
                print("  ..." + (result.messages[-1] if result.messages else "")[-1500:], flush=True)
    table = ["| case | policy | expected | verdict | runtime findings | own-kernel share | seconds |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        share = "–" if r["own_share"] is None else f"{r['own_share']:.2f}"
        table.append(
            f"| {r['case']} | {r['policy']} | {r['expected']} | {r['status']}{' ✓' if r['ok'] else ' ✗'} | "
            f"{', '.join(r['runtime_rules']) or '–'} | {share} | {r['seconds']} |"
        )
    text = "\n".join(table)
    (args.out / "trust.md").write_text(text + "\n")
    print(text)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
