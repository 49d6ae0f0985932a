#!/usr/bin/env bash
# Third batched device session: the GPU tests after the runtime-guard changes, the loop on CUDA,
# timing fidelity and guard overhead. Results under $OUT.
set -uo pipefail
export CUDAFORGE_TEST_CACHE=/tmp/cf-test-cache CUDAFORGE_CACHE_DIR=/tmp/cf-cache PYTHONUNBUFFERED=1
mkdir -p "$OUT/all"
python3 -m pytest -p no:cacheprovider -m "gpu and not timing" -n 4 tests/test_evaluate_gpu.py tests/test_guard_gpu.py tests/test_profile_gpu.py tests/test_loop_gpu.py -q -rA -s 2>&1 | tee "$OUT/all/gpu_tests.log" | grep -E "PASSED|FAILED|passed|failed|^E " | head -40
python3 -m pytest -p no:cacheprovider -m "gpu and timing" tests/test_evaluate_gpu.py -q -s -rA 2>&1 | tee "$OUT/all/gpu_timing.log" | grep -E "variant|speedups|passed|failed"
python3 benchmarks/guard_overhead.py --device cuda 2>&1 | tee "$OUT/all/guard_overhead.txt"
tar -C "$OUT" -czf "$OUT/results.tgz" all && rm -rf "$OUT/all"
