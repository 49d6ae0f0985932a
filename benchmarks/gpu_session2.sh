#!/usr/bin/env bash
# Second batched device session: GPU tests (evaluator with runtime guards, guards, profiling),
# timing fidelity, guard overhead, NCU metric names and fixtures. Results under $OUT.
set -uo pipefail
export CUDAFORGE_TEST_CACHE=/tmp/cf-test-cache CUDAFORGE_CACHE_DIR=/tmp/cf-cache PYTHONUNBUFFERED=1
mkdir -p "$OUT/all"
python3 -m pytest -p no:cacheprovider -m "gpu and not timing" -n 4 tests/test_evaluate_gpu.py tests/test_guard_gpu.py tests/test_profile_gpu.py -q -rA -s 2>&1 | tee "$OUT/all/gpu_tests.log" | tail -25
python3 -m pytest -p no:cacheprovider -m "gpu and timing" tests/test_evaluate_gpu.py -q -s -rA 2>&1 | tee "$OUT/all/gpu_timing.log" | tail -8
python3 benchmarks/guard_overhead.py --device cuda 2>&1 | tee "$OUT/all/guard_overhead.txt"
ncu --query-metrics --chip gh100 > "$OUT/all/gh100_metrics.txt" 2>&1
grep -E "pipe_fp32|pipe_fma |pipe_fma\b|stalled_memory|stalled_lg_throttle" "$OUT/all/gh100_metrics.txt" | head
bash tests/fixtures/ncu/capture.sh "$OUT/all/ncu" 2>&1 | tail -5
tar -C "$OUT" -czf "$OUT/results.tgz" all && rm -rf "$OUT/all"
