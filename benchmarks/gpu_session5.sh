#!/usr/bin/env bash
# Fifth device session (nvidia-h200-x2), call 1: the 4-task bench spread over both GPUs with the
# torch.compile baseline (issue 10), then the profile stage's overhead (issue 8).
set -uo pipefail
export CUDAFORGE_CACHE_DIR=/tmp/cf-cache CUDAFORGE_TEST_CACHE=/tmp/cf-test-cache PYTHONUNBUFFERED=1
mkdir -p "$OUT/all"
nvidia-smi -L | tee "$OUT/all/gpus.txt"
ncu --query-metrics --chip gh100 2>&1 | grep -iE "inst_executed_pipe_(fp32|fma)|warp_issue_stalled_(memory_dependency|long_scoreboard|lg_throttle)" > "$OUT/all/ncu_query_gh100.txt"
ncu --query-metrics-mode suffix --metrics sm__inst_executed_pipe_fp32,smsp__warp_issue_stalled_memory_dependency_per_warp_active --chip gh100 >> "$OUT/all/ncu_query_gh100.txt" 2>&1
mkdir -p /tmp/bench-cwd && printf '[eval]\ndevice = "cuda"\n' > /tmp/bench-cwd/cudaforge.toml
start=$(date +%s)
( cd /tmp/bench-cwd && timeout 400 python3 -m engine.cli_bench "$OLDPWD/benchmarks/bench_set" --out /tmp/bench-out \
    --device cuda --gpus 0,1 --rounds 3 --compile-baseline --progress lines \
    --coder "scripted/$OLDPWD/tui/demo/script/coder" --judge "scripted/$OLDPWD/tui/demo/script/judge" ) 2>&1 | tee "$OUT/all/bench.txt" | tail -22
echo "bench wall seconds: $(( $(date +%s) - start ))" | tee -a "$OUT/all/bench.txt"
cp -r /tmp/bench-out/summary.* /tmp/bench-out/*.png /tmp/bench-out/baseline /tmp/bench-out/status /tmp/bench-out/logs "$OUT/all/" 2>/dev/null
timeout 170 python3 benchmarks/profile_overhead.py --repeats 3 --json "$OUT/all/profile_overhead.json" 2>&1 | tee "$OUT/all/profile_overhead.txt" | tail -12
tar -C "$OUT" -czf "$OUT/results.tgz" all && rm -rf "$OUT/all"
