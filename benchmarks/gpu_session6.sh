#!/usr/bin/env bash
# Fifth device session, call 2: the GPU tests this session touched (profile, loop, bench baseline).
set -uo pipefail
export CUDAFORGE_CACHE_DIR=/tmp/cf-cache CUDAFORGE_TEST_CACHE=/tmp/cf-test-cache PYTHONUNBUFFERED=1
mkdir -p "$OUT/all"
timeout 500 python3 -m pytest -p no:cacheprovider -m "gpu and not timing" -n 3 tests/test_profile_gpu.py tests/test_loop_gpu.py tests/test_bench_gpu.py -q -rA -s 2>&1 | tee "$OUT/all/gpu_tests.log" | grep -E "PASSED|FAILED|passed|failed|^E |profile|stage" | head -40
tar -C "$OUT" -czf "$OUT/results.tgz" all && rm -rf "$OUT/all"
