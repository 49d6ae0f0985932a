"""Issue 44 on the GPU: a user's model from profile to an applied, checked drop-in, beside torch.compile.

For each model: ``cudaforge profile`` and ``cudaforge extract`` (their wall times: the goal is <= 60 s
together), then ``cudaforge apply`` with the hand-written kernels of ``examples/models/kernels`` on the
extracted tasks they fit (each kernel judged on its task, then the whole model checked and timed end to
end, with ``--compile-baseline default`` measured in the same run), and the export re-checked from disk
(``--verify``). Every command's output is kept; one JSON line per step goes to ``OUT/steps.jsonl`` as
soon as it is known, and ``OUT/summary.md`` is rewritten after each model.

    python benchmarks/model_e2e.py --out DIR [--models resnet50,llama]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "examples" / "models" / "kernels"
LLAMA = REPO / "benchmarks" / "models" / "llama_small.py"

MODELS: dict[str, dict[str, Any]] = {
    "resnet50": {
        "model": ["torchvision.models:resnet50", "--input-shape", "64,3,224,224", "--dtype", "bf16"],
        "extract": ["--top", "6"],
        "kernels": {"Bottleneck": KERNELS / "bottleneck_cuda.py"},  # every extracted task of that class
    },
    "llama": {
        "model": [f"{LLAMA}:make_model", "--inputs", f"{LLAMA}:example_inputs", "--dtype", "bf16"],
        "extract": ["--top", "3"],
        "paths": ["model.norm", "model.layers.0.mlp"],  # the tasks the kernels fit, extracted by path
        "kernels": {"LlamaRMSNorm": KERNELS / "llama_rmsnorm_cuda.py", "LlamaMLP": KERNELS / "llama_mlp_cuda.py"},
    },
}


def cudaforge(out: Path, name: str, *args: str, timeout: float = 900) -> tuple[int, float]:
    """Run one command, its output kept in OUT/NAME.out/.err; (exit code, wall seconds)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    with open(out / f"{name}.out", "w") as stdout, open(out / f"{name}.err", "w") as stderr:
        try:
            code = subprocess.run([sys.executable, "-m", "tui.cli", *args], stdout=stdout, stderr=stderr, env=env, timeout=timeout, cwd=REPO).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.monotonic() - started


def record(out: Path, step: dict[str, Any]) -> None:
    with open(out / "steps.jsonl", "a") as handle:
        handle.write(json.dumps(step) + "\n")
    print(json.dumps(step), flush=True)


def run_model(name: str, plan: dict[str, Any], out: Path) -> dict[str, Any]:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    row: dict[str, Any] = {"model": name}
    code, seconds = cudaforge(folder, "profile", "profile", *plan["model"], "--json", str(folder / "profile.json"))
    row["profile"] = {"exit": code, "seconds": round(seconds, 1)}
    if code == 0:
        profile = json.loads((folder / "profile.json").read_text())
        row["eager_ms"] = profile["latency"]["median_ms"]
        row["device_ms"] = profile["device_ms"]
    record(out, {"model": name, "step": "profile", **row["profile"], "eager_ms": row.get("eager_ms")})
    code, seconds = cudaforge(folder, "extract", "extract", *plan["model"], *plan["extract"], "--out", str(folder / "tasks"))
    row["extract"] = {"exit": code, "seconds": round(seconds, 1)}
    record(out, {"model": name, "step": "extract", **row["extract"]})
    if code != 0:
        return row
    manifest = json.loads((folder / "tasks" / "manifest.json").read_text())
    row["tasks"] = [{"name": t["name"], "paths": len(t["paths"]), "share": t["share"], "class": t["class"]} for t in manifest["tasks"]]
    row["skipped"] = [{"paths": s["paths"], "reason": s["reason"]} for s in manifest["skipped"]]
    tasks_dir = folder / "tasks"
    if plan.get("paths"):
        args = [a for p in plan["paths"] for a in ("--path", p)]
        code, _ = cudaforge(folder, "extract_paths", "extract", *plan["model"], *args, "--out", str(folder / "kernel_tasks"))
        tasks_dir = folder / "kernel_tasks"
        manifest = json.loads((tasks_dir / "manifest.json").read_text()) if code == 0 else {"tasks": []}
    pairs = [(t, plan["kernels"][t["class"]]) for t in manifest["tasks"] if t["class"] in plan["kernels"]]
    row["applied"] = [{"task": t["name"], "paths": len(t["paths"]), "kernel": k.name} for t, k in pairs]
    if not pairs:
        return row
    kernels = [a for t, k in pairs for a in ("--kernel", f"{tasks_dir / t['file']}={k}")]
    code, seconds = cudaforge(
        folder, "apply", "apply", *plan["model"], *kernels, "--compile-baseline", "default", "--export",
        str(folder / "optimized.py"), "--verify", "--json", str(folder / "apply.json"), timeout=1500,
    )  # fmt: skip
    row["apply"] = {"exit": code, "seconds": round(seconds, 1)}
    if (folder / "apply.json").is_file():
        report = json.loads((folder / "apply.json").read_text())
        row["apply"]["kernels"] = [{k: v for k, v in entry.items() if k != "result"} for entry in report["kernels"]]
        whole = report.get("whole") or {}
        row["apply"]["whole"] = {k: v for k, v in whole.items() if k != "result"}
        row["apply"]["failure"] = report.get("failure")
    record(out, {"model": name, "step": "apply", **row["apply"]})
    return row


def summary(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | eager ms | profile s | extract s | tasks | kernels applied | whole model | end to end vs eager | torch.compile vs eager | ours vs compile |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        apply = row.get("apply") or {}
        whole = apply.get("whole") or {}
        base = (whole.get("baselines") or {}).get("default") or {}
        compile_x = base["eager_ms"] / base["compiled_ms"] if base.get("eager_ms") and base.get("compiled_ms") else None
        interval = whole.get("interval")
        against = f"{base['speedup']:.2f}x" if base.get("speedup") else "–"
        ours = f"{whole['speedup']:.3f}x ({interval[0]:.3f}–{interval[1]:.3f})" if whole.get("speedup") and interval else "–"
        lines.append(
            f"| {row['model']} | {row.get('eager_ms', 0):.2f} | {row['profile']['seconds']} | {row['extract']['seconds']} | "
            f"{len(row.get('tasks', []))} | {', '.join(a['task'] + ' ×' + str(a['paths']) for a in row.get('applied', []))} | "
            f"{whole.get('status', '–')} | {ours} | {f'{compile_x:.2f}x' if compile_x else '–'} | "
            f"{against} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="resnet50,llama")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        rows.append(run_model(name, MODELS[name], args.out))
        (args.out / "summary.md").write_text(summary(rows))
        (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
