#!/usr/bin/env bash
# Every GPU measurement and GPU test of cudaforge, as named sections of one script.
#
# Usage, on the GPU machine from the repository root:
#   bash benchmarks/device_run.sh SECTION [SECTION ...]
# Each section writes its logs and figures under $RESULTS/<section>/ (default /tmp/cf-results) as it
# goes, and the whole folder is packed into $OUT/results.tgz every 20 s and at the end when $OUT is
# set (the device tool brings back only a few files, and nothing a killed command meant to pack at
# its end). The first call on a bare machine installs cudaforge's core dependencies from .whl/*.whl
# (made here by benchmarks/device_wheels.sh)
# (only those: what a plain `pip install -e .` gives a GPU box) and, for the tests section, the test
# tools from .whl/dev/; it unpacks bubblewrap from .whl/deb/ (apt-get download bubblewrap) when the
# machine has none, so the sandbox can run. Corpus sections read CORPUS (default ./.corpus):
#   $CORPUS/lb  — anneouyang/KernelBenchLeaderboard's docs/assets (solutions, problems, raw_data.json)
#   $CORPUS/kb  — ScalingIntelligence/KernelBench's KernelBench/ tasks and few-shot prompts
# Neither corpus is part of the repository: fetch them yourself and keep them in an ignored folder.
#
# Sections:
#   smoke     every GPU path once, one PASS/FAIL line each, <= 6 minutes on a bare machine (first and last)
#   tests     GPU tests except the timing-fidelity ones, 4 at a time
#   timing    the timing-fidelity GPU tests and those that take the GPU's memory, alone on the GPU
#   fewshot   KernelBench's five few-shot ModelNew examples: eval under default, check under strict
#   corpus    cudaforge evalset over leaderboard kernels of all three levels (+ static check of all)
#   split     stock vs split cold build times side by side, and output equivalence
#   share     the own-kernel share of honest partial kernels vs trivial-but-present ones
#   sandbox   the sandbox's overhead per evaluation (off / bwrap / landlock); CUDA under Landlock variants
#   bench     the 4-task bench set over every GPU with the torch.compile baseline
#   profile   the profile stage's overhead as the loop calls it
#   ncu       re-capture the NCU CSV fixtures of tests/fixtures/ncu
#   weak      which KernelBench level-1 tasks are weak (a degenerate answer passes): benchmarks/weak_tasks.py
#   defences  after corpus: what the issue-25 defences added and decided per pair, and the replay defence's share
#             of the timing stage over the correct pairs (issue 45: <= 3%) (benchmarks/defence_cost.py)
#   round     a round's own time on leaderboard kernels: first build, CUDA-side and binding edits, nothing
#             to build, the profile stage; stock builds first (benchmarks/round_time.py, issue 26)
#   visual    a real scripted session's roofline against ncu's speed-of-light figures, and its torch.compile
#             baselines (benchmarks/visual_evidence.py, issue 29)
#   explore   a scripted exploration of two real CUDA kernels on the GPU, and each kernel alone
#             (benchmarks/explore_gpu.sh, issue 28)
#   explore_lb  a real search: the leaderboard's kernels of each of $PROBLEMS as an exploration's branches
#             (--gpus 0, or --ray $EXPLORE_RAY), against each kernel alone (benchmarks/explore_leaderboard.py)
#   trust     issue 45's cheats and their honest twins through the evaluator (benchmarks/trust_gpu.py): an ATen
#             fallback after a failed load, a kernel named like ATen's, a noise-level reference, a value memo,
#             a storage replay, an L2-persisting copy under default and strict
#   forked    workers forked from one server that imported torch, on CUDA, beside new interpreters
#             (benchmarks/fork_workers.py), then the GPU tests with CUDA workers forked (CUDAFORGE_WORKERS=fork)
#   oneshot   a one-shot `cudaforge eval` with nothing to build (issue 47): workers new, forked, or forked from a
#             server an earlier command kept, for the CUDA ReLU and a level-3 leaderboard kernel (benchmarks/oneshot.py);
#             ONESHOT_EDIT_RUNS=N: then N commands each way after a CUDA-side edit (--edit); ONESHOT_EDIT_WAYS=exec,kept
#             runs only those ways (exec, the ratios' base, always); ONESHOT_PLAIN=0 skips the runs with nothing to build
#   retime    a close call's re-timing with and without the best kernel's sealed library (benchmarks/retime_cost.py)
#   failfast  how fast failing candidates end (issue 47): an error in the kernel's own code, a CUDA-L1-style
#             UNet whose twenty blocks load one failing source, and twenty distinct ones (benchmarks/fail_fast.py)
#   model     a user's model end to end (issue 44): torchvision ResNet-50 and a small transformers Llama in bf16,
#             profile -> extract -> apply the hand-written kernels of examples/models/kernels, beside
#             torch.compile (benchmarks/model_e2e.py; MODELS=resnet50,llama)
set -uo pipefail
RESULTS=${RESULTS:-/tmp/cf-results}
CORPUS=${CORPUS:-$PWD/.corpus}
export CUDAFORGE_CACHE_DIR=${CUDAFORGE_CACHE_DIR:-/tmp/cf-cache}
export CUDAFORGE_TEST_CACHE=${CUDAFORGE_TEST_CACHE:-/tmp/cf-test-cache}
export PYTHONUNBUFFERED=1

setup() {
  mkdir -p "$RESULTS"
  if [ -d .whl ] && [ ! -f /tmp/site/.cudaforge-wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
      && touch /tmp/site/.cudaforge-wheels || { echo "wheel install failed" >&2; exit 1; }
  fi
  export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  if [ -n "${OUT:-}" ]; then  # what a section measured comes back even when the call is cut off
    ( while sleep 20; do pack; done ) &
    PACKER=$!
  fi
  if ! command -v bwrap >/dev/null && [ -z "${CUDAFORGE_BWRAP:-}" ] && ls .whl/deb/bubblewrap_*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/bwrap && dpkg -x .whl/deb/bubblewrap_*.deb /tmp/bwrap && export CUDAFORGE_BWRAP=/tmp/bwrap/usr/bin/bwrap
  fi
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
    python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
    echo "bwrap: ${CUDAFORGE_BWRAP:-$(command -v bwrap)}"; nproc; date -u
  } > "$RESULTS/machine.txt" 2>&1
}

pack() {
  [ -n "${OUT:-}" ] && tar -C "$RESULTS" -czf "$OUT/.results.tgz" . 2>/dev/null && mv "$OUT/.results.tgz" "$OUT/results.tgz"
}

section_smoke() {
  timeout "${SMOKE_TIMEOUT:-360}" python3 benchmarks/smoke.py --out "$1"
}

dev_wheels() {
  # the test tools travel apart from the core wheels (.whl/dev), so the other sections run on a plain install
  if [ -d .whl/dev ] && [ ! -f /tmp/site-dev/.cudaforge-wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-dev .whl/dev/*.whl \
      && touch /tmp/site-dev/.cudaforge-wheels
  fi
  export PYTHONPATH=$PYTHONPATH:/tmp/site-dev
}

section_tests() {
  dev_wheels
  # TESTS narrows the run (default: every test file); the whole output is kept in pytest.log
  timeout "${TESTS_TIMEOUT:-560}" python3 -m pytest -p no:cacheprovider -m "gpu and not timing and not exclusive" -n "${TESTS_WORKERS:-4}" ${TESTS:-tests} \
    -q -rfE --durations=15 > "$1/pytest.log" 2>&1
  tail -60 "$1/pytest.log"
}

section_timing() {
  # the timing-fidelity tests and those that take the GPU's memory, one at a time
  dev_wheels
  timeout "${TIMING_TIMEOUT:-400}" python3 -m pytest -p no:cacheprovider -m "gpu and (timing or exclusive)" tests \
    -q -rA > "$1/pytest.log" 2>&1
  tail -40 "$1/pytest.log"
}

section_fewshot() {
  local dir=$CORPUS/kb/src/kernelbench/prompts/few_shot
  for name in add fuse_gelu mnist2 tiled_matmul flash_attn; do
    echo "== $name"
    timeout 300 python3 -m tui.cli eval "$dir/model_ex_$name.py" "$dir/model_new_ex_$name.py" --device cuda --json \
      > "$1/eval_$name.json" 2> "$1/eval_$name.err"; echo "eval exit $?"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['status'], r.get('speedup'), r.get('kernel_share', {}) and r['kernel_share'].get('share'))" "$1/eval_$name.json" 2>/dev/null
    python3 -m tui.cli check "$dir/model_ex_$name.py" "$dir/model_new_ex_$name.py" --device cuda --guard strict > "$1/strict_$name.txt" 2>&1
    echo "strict check exit $?"
  done
}

section_corpus() {
  # PER_LEVEL leaderboard kernels per level (deterministic: first by file name), judged by evalset
  python3 benchmarks/evalset_leaderboard.py build "$CORPUS/lb/docs/assets" /tmp/lb/pairs --per-level "${PER_LEVEL:-12}"
  local started; started=$(date +%s)
  # CORPUS_FLAGS: more evalset flags (e.g. --no-timing: phase 1 only, every check and defence)
  timeout "${CORPUS_TIMEOUT:-500}" python3 -m tui.cli evalset /tmp/lb/pairs --out /tmp/lb/out --device cuda --progress lines ${CORPUS_FLAGS:-}
  echo "evalset exit $? after $(( $(date +%s) - started )) s"
  cp /tmp/lb/out/summary.* /tmp/lb/out/*.png /tmp/lb/pairs/manifest.json "$1/" 2>/dev/null
  tar -C /tmp/lb/out -czf "$1/results.tgz" results checks 2>/dev/null
  [ "${COMPARE_N:-0}" -gt 0 ] && timeout 200 python3 benchmarks/evalset_leaderboard.py compare /tmp/lb/out --n "$COMPARE_N" \
    && cp /tmp/lb/out/compare_alone.json "$1/"
}

section_round() {
  timeout "${ROUND_TIMEOUT:-540}" python3 benchmarks/round_time.py "$CORPUS/lb" --out "$1" --per-level "${ROUND_PER_LEVEL:-4}" \
    --limit "${ROUND_LIMIT:-10}" --stock-jobs "${ROUND_STOCK_JOBS:-10}" --llm-seconds "${ROUND_LLM_S:-1.5}" 2>&1 | tail -45
  [ -n "${OUT:-}" ] && cp "$1/rows.jsonl" "$1/report.md" "$OUT/" 2>/dev/null
  true
}

section_visual() {
  timeout "${VISUAL_TIMEOUT:-420}" python3 benchmarks/visual_evidence.py --out "$1" --assets "$CORPUS/lb" 2>&1 | tail -40
}

section_weak() {
  timeout "${WEAK_TIMEOUT:-300}" python3 benchmarks/weak_tasks.py "$CORPUS/kb/KernelBench/level1" --device cuda \
    --json "$1/weak_level1.json" 2>&1 | tail -40
}

section_defences() {
  python3 benchmarks/defence_cost.py /tmp/lb/out --json "$1/defence_cost.json" | tee "$1/defence_cost.txt" | tail -60
}

section_split() {
  # stock vs split cold builds of the same corpus kernels, side by side, then their outputs compared
  # A row is written when both builds of a kernel are done: 12 at 6 at a time fit one 10-minute call (a try
  # with 30 at 16 at a time wrote none in 240 s). SPLIT_OFFSET continues where an earlier call stopped.
  timeout "${SPLIT_TIMEOUT:-480}" python3 benchmarks/split_build.py "$CORPUS/lb/docs/assets" --out /tmp/split \
    --offset "${SPLIT_OFFSET:-0}" --limit "${SPLIT_N:-12}" --jobs "${SPLIT_JOBS:-6}"
  python3 benchmarks/split_build.py "$CORPUS/lb/docs/assets" --out /tmp/split --report | tail -20
  cp /tmp/split/summary.json /tmp/split/table.txt /tmp/split/rows.jsonl /tmp/split/builds.jsonl "$1/" 2>/dev/null
}

section_share() {
  # the own-kernel share of the guard fixtures: honest partial kernels against trivial-but-present ones
  timeout 300 python3 benchmarks/guard_share.py --device cuda | tee "$1/share.md"
}

section_sandbox() {
  python3 -m tui.cli doctor 2>&1 | grep -i sandbox
  OUT="$1" timeout 120 python3 benchmarks/landlock_cuda.py  # which Landlock right CUDA's start-up needs
  timeout 300 python3 benchmarks/sandbox_overhead.py --device cuda --rounds "${SANDBOX_ROUNDS:-5}" --json "$1/overhead.json"
}

section_bench() {
  mkdir -p /tmp/bench-cwd && printf '[eval]\ndevice = "cuda"\n' > /tmp/bench-cwd/cudaforge.toml
  local gpus; gpus=$(nvidia-smi -L | awk '{printf "%s%d", NR>1?",":"", NR-1}')
  ( cd /tmp/bench-cwd && timeout 400 python3 -m engine.cli.bench "$OLDPWD/benchmarks/bench_set" --out /tmp/bench-out \
      --device cuda --gpus "$gpus" --rounds 3 --compile-baseline --progress lines \
      --coder "scripted/$OLDPWD/tui/demo/script/coder" --judge "scripted/$OLDPWD/tui/demo/script/judge" ) 2>&1 | tail -22
  cp -r /tmp/bench-out/summary.* /tmp/bench-out/*.png "$1/" 2>/dev/null
}

section_profile() {
  timeout 170 python3 benchmarks/profile_overhead.py --repeats 3 --json "$1/profile_overhead.json" 2>&1 | tail -12
}

section_explore() {
  timeout "${EXPLORE_TIMEOUT:-420}" bash benchmarks/explore_gpu.sh "$1"
}

section_explore_lb() {
  local placement=(--gpus 0)
  [ -n "${EXPLORE_RAY:-}" ] && placement=(--ray "$EXPLORE_RAY")
  timeout "${EXPLORE_LB_TIMEOUT:-560}" python3 benchmarks/explore_leaderboard.py "$CORPUS/lb/docs/assets" "$1" \
    --problems "${PROBLEMS:-l1_p88,l1_p12,l2_p16}" "${placement[@]}"
}

section_trust() {
  # TRUST_ONLY: only the cases whose name contains this text
  timeout "${TRUST_TIMEOUT:-420}" python3 benchmarks/trust_gpu.py --out "$1" ${TRUST_ONLY:+--only "$TRUST_ONLY"} 2>&1 | tail -30
}

section_failfast() {
  # FAILFAST_ONLY: candidates by name, space-separated (default: all three)
  local only=(); for name in ${FAILFAST_ONLY:-}; do only+=(--only "$name"); done
  timeout "${FAILFAST_TIMEOUT:-560}" python3 benchmarks/fail_fast.py --out "$1" --device cuda ${only[@]+"${only[@]}"} 2>&1 | tail -10
}

section_forked() {
  # workers forked from the fork server on CUDA (issue 47): the start's cost beside new interpreters, then
  # the GPU tests with every CUDA worker forked (TESTS narrows them, as for the tests section)
  timeout "${FORKED_TIMEOUT:-560}" python3 benchmarks/fork_workers.py --device cuda --runs "${FORKED_RUNS:-8}" \
    --json "$1/fork_workers.json" 2>&1 | tail -8
  CUDAFORGE_WORKERS=fork section_tests "$1"
}

section_oneshot() {
  local pairs=(--pair examples/tasks/relu_large.py examples/kernels/relu_cuda.py)
  if [ -d "$CORPUS/lb/docs/assets" ]; then
    python3 benchmarks/evalset_leaderboard.py build "$CORPUS/lb/docs/assets" /tmp/oneshot-pairs --per-level 4 >/dev/null 2>&1
    local l3=/tmp/oneshot-pairs/${ONESHOT_L3:-level_3_problem_18_sample_0}
    [ -f "$l3/kernel.py" ] && pairs+=(--pair "$l3/task.py" "$l3/kernel.py")
  fi
  if [ "${ONESHOT_PLAIN:-1}" != 0 ]; then  # ONESHOT_PLAIN=0: the edit runs alone
    timeout "${ONESHOT_TIMEOUT:-400}" python3 benchmarks/oneshot.py --device cuda --runs "${ONESHOT_RUNS:-3}" "${pairs[@]}" \
      --json "$1/oneshot.json" 2>&1 | tail -8
  fi
  if [ -n "${ONESHOT_EDIT_RUNS:-}" ]; then  # the path after a CUDA-side edit (issue 47: <= 8 s)
    timeout "${ONESHOT_EDIT_TIMEOUT:-300}" python3 benchmarks/oneshot.py --device cuda --edit --runs "$ONESHOT_EDIT_RUNS" \
      --ways "${ONESHOT_EDIT_WAYS:-exec,fork,kept}" "${pairs[@]}" --json "$1/oneshot_edit.json" 2>&1 | tail -8
  fi
}

section_retime() {
  timeout "${RETIME_TIMEOUT:-400}" python3 benchmarks/retime_cost.py --device cuda --json "$1/retime.json" 2>&1 | tail -5
}

section_model() {
  timeout "${MODEL_TIMEOUT:-570}" python3 benchmarks/model_e2e.py --out "$1" --models "${MODELS:-resnet50,llama}" 2>&1 | tail -40
}

section_ncu() {
  bash tests/fixtures/ncu/capture.sh "$1" 2>&1 | tail -20
}

[ $# -gt 0 ] || { echo "usage: bash benchmarks/device_run.sh SECTION [SECTION ...] (see the header)" >&2; exit 2; }
for section in "$@"; do
  declare -F "section_$section" >/dev/null || { echo "unknown section: $section" >&2; exit 2; }
done
setup
for section in "$@"; do
  mkdir -p "$RESULTS/$section"
  started=$(date +%s)
  echo "### $section"
  "section_$section" "$RESULTS/$section" 2>&1 | tee "$RESULTS/$section/log.txt"
  echo "### $section took $(( $(date +%s) - started )) s" | tee -a "$RESULTS/$section/log.txt"
done
[ -n "${PACKER:-}" ] && kill "$PACKER" 2>/dev/null
pack
