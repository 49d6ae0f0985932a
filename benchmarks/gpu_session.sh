#!/usr/bin/env bash
# One batched device session: GPU tests, timing fidelity, eval overhead, NCU fixtures.
# Run on the GPU machine from the repository root, after the wheel install line from
# ../shared/tools/device-wheels.sh; results go to $OUT.
set -uo pipefail
export CUDAFORGE_TEST_CACHE=/tmp/cf-test-cache CUDAFORGE_CACHE_DIR=/tmp/cf-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)" | tee -a "$OUT/gpu.txt"
python3 -m pytest -p no:cacheprovider -m "gpu and not timing" -n 4 tests/test_evaluate_gpu.py -q -rA 2>&1 | tail -40 | tee "$OUT/gpu_tests.log"
python3 -m pytest -p no:cacheprovider -m "gpu and timing" tests/test_evaluate_gpu.py -q -s -rA 2>&1 | tail -30 | tee "$OUT/gpu_timing.log"
python3 benchmarks/eval_overhead.py --device cuda --json "$OUT/eval_overhead.json" 2>&1 | tee "$OUT/eval_overhead.txt"
bash tests/fixtures/ncu/capture.sh "$OUT/ncu" 2>&1 | tee "$OUT/ncu_capture.txt"
