#!/usr/bin/env bash
# An exploration on the GPU with scripted agents (issue 28): a seed, then `cudaforge explore --width 2
# --rounds 1`, whose two branches' Coders answer with two different real CUDA kernels of the repo's
# examples; then each of those kernels evaluated alone by `cudaforge eval`, for comparison. It shows the
# shared-GPU path working end to end on CUDA: checks side by side, timings and ncu profiles alone on the
# GPU (the summary's alone_overlaps), and the evaluations' time against the wall time.
# Usage (device_run.sh's `explore` section): bash benchmarks/explore_gpu.sh OUT_DIR
set -uo pipefail
out=$1
work=$out/work
mkdir -p "$work/coder/branch-1" "$work/coder/branch-2" "$work/judge"
wrap() { printf 'Here is the kernel.\n\n```python\n'; cat "$1"; printf '```\n'; }
wrap examples/kernels/relu_cuda_stock.py > "$work/coder/01_seed.md"
wrap examples/kernels/relu_cuda.py > "$work/coder/branch-1/01_kernel.md"
wrap examples/kernels/relu_cuda_stock.py > "$work/coder/branch-2/01_kernel.md"
cp tests/fixtures/scripted/explore/judge/* "$work/judge/"
task=examples/tasks/relu_large.py
python3 -m tui.cli run "$task" --headless --auto-approve --rounds 0 --device cuda \
  --coder "scripted/$work/coder" --judge "scripted/$work/judge" --sessions-dir "$work/sessions" 2>&1 | tail -5
session=$(ls "$work/sessions" | head -1)
/usr/bin/time -f "explore wall %e s" python3 -m tui.cli explore "$work/sessions/$session" --from 0 --width 2 --rounds 1 \
  --device cuda --gpus 0 --json "$out/explore.json" -v 2>&1 | tail -40
for kernel in relu_cuda relu_cuda_stock; do
  python3 -m tui.cli eval "$task" "examples/kernels/$kernel.py" --device cuda --json > "$out/eval-$kernel.json" 2>"$out/eval-$kernel.err"
  python3 - "$out/eval-$kernel.json" "$kernel" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"alone: {sys.argv[2]}: {r['status']} speedup {r.get('speedup')}")
PY
done
python3 - "$out/explore.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
d = s.get("devices") or {}
print("branches:", [(b["name"], b["state"], b["best_speedup"]) for b in s["branches"]])
print("best:", s["best"], "wall_s:", s["wall_seconds"], "evaluation_s:", s["evaluation_seconds"],
      "by part:", d.get("seconds_by_part"), "alone_overlaps:", d.get("alone_overlaps"))
for w in d.get("windows", []):
    print("window:", w["branch"], w["part"], "gpu", w["gpu"], f"{w['seconds']:.2f} s", "alone" if w["alone"] else "")
PY
