#!/usr/bin/env bash
# Fourth device session: compile latency (stock vs cudaforge's path), recording the demo session
# with the real engine and scripted replies, and the evaluator's GPU tests with the precompiled header.
set -uo pipefail
export CUDAFORGE_CACHE_DIR=/tmp/cf-cache CUDAFORGE_TEST_CACHE=/tmp/cf-test-cache PYTHONUNBUFFERED=1
mkdir -p "$OUT/all"
timeout 330 python3 benchmarks/compile_latency.py --out "$OUT/all/compile_latency.json" 2>&1 | tee "$OUT/all/compile_latency.txt" | tail -12
timeout 240 python3 -m engine.cli_run examples/tasks/relu_large.py --headless --auto-approve --rounds 3 --device cuda \
  --sessions-dir /tmp/demo-sessions --name relu-demo \
  --coder scripted/tui/demo/script/coder --judge scripted/tui/demo/script/judge 2>&1 | tee "$OUT/all/demo_run.txt" | tail -12
d=$(ls -d /tmp/demo-sessions/*/ | head -1) && git -C "$d" bundle create "$OUT/all/relu-demo.bundle" --all
timeout 170 python3 -m pytest -p no:cacheprovider -m "gpu and not timing" -n 4 tests/test_evaluate_gpu.py -q 2>&1 | tail -4 | tee "$OUT/all/gpu_tests.log"
tar -C "$OUT" -czf "$OUT/results.tgz" all && rm -rf "$OUT/all"
