"""Mutation test of the code that decides correctness (issue 45 item 5; ARCHITECTURE.md §3, "Defences").

``python benchmarks/mutants.py [--only ID] [--keep]``: each mutant below is a bug a real edit could make
in the weak-output and degenerate checks, the stale-memory fill, the precision pin, the exploration's
ranking or the ablation's decisions. The script copies the repository to a temporary folder (the
working tree is never touched), runs every mutant's killing tests there unmutated first (a test that
fails anyway kills nothing), then applies one mutant at a time, runs its tests (``pytest -x -q``, with
``PYTHONPATH`` set to the copy) and puts the file back. It prints a markdown table and exits non-zero
when a mutant survives or its ``old`` snippet no longer matches the source, so the table cannot rot
silently while the code moves on.

Why: mutating these parts once left 12 of 15 mutants alive with the whole suite green; a defence whose
tests pass with the defence broken is only believed to work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Not copied: version control, environments, caches (the extension builds are shared through
# CUDAFORGE_TEST_CACHE instead, so each mutant does not rebuild them).
SKIP = shutil.ignore_patterns(".git", ".venv", ".cache", "__pycache__", ".pytest_cache", ".ruff_cache", "*.so", "*.o")
PYTEST_TIMEOUT_S = 600
# pytest's exit statuses that a mutant caused: tests failed (1), or their modules failed to collect (2);
# 4 (usage error: no such test) and 5 (no test collected) kill nothing
PYTEST_KILLED = (1, 2)

DEF = "tests/test_defences.py::"
CPU = "tests/test_defences_cpu.py::"
RANK = "tests/test_explore_ranking.py::"
RANKING = "tests/test_ranking.py::"
ABL = "tests/test_ablation.py::"
TRUST = "tests/test_trust_cpu.py::"
ARB = "tests/test_arbiter_cpu.py::"
FORK = "tests/test_forkserver.py::"
KEPT = "tests/test_keptserver.py::"
PCH = "tests/test_build_pch.py::"
PREBUILD = "tests/test_prebuild.py::"


@dataclass(frozen=True)
class Mutant:
    """One bug: ``old`` (exactly once in ``file``) replaced by ``new``; ``tests`` must fail with it."""

    id: str
    file: str
    function: str
    what: str
    old: str
    new: str
    tests: tuple[str, ...]
    gpu: bool = False  # its killing tests need CUDA: run it on the device (elsewhere they skip, killing nothing)


MUTANTS: tuple[Mutant, ...] = (
    # -- degenerate detection: the weak-failure path (a single call's judgement: shapes, ablation) ---------
    Mutant("weak-args-swapped", "engine/eval/degenerate.py", "weak_failure",
           "reference and candidate swapped: a zeros answer is no longer named degenerate",
           "degenerate = first_degenerate(weak, expected, [got], inputs)",
           "degenerate = first_degenerate(weak, got, [expected], inputs)",
           (DEF + "test_a_single_calls_weak_failure_names_zeros_degenerate_and_a_far_off_answer_failing",
            CPU + "test_a_weak_tasks_degenerate_or_far_off_answer_at_another_shape_is_found")),
    Mutant("weak-no-spread", "engine/eval/degenerate.py", "weak_failure",
           "the spread check's failures ignored: a far-off answer inside the tolerance passes",
           "    failed = spread.failures()\n", "    failed = []\n",
           (DEF + "test_a_single_calls_weak_failure_names_zeros_degenerate_and_a_far_off_answer_failing",
            CPU + "test_a_weak_tasks_degenerate_or_far_off_answer_at_another_shape_is_found")),
    Mutant("weak-spread-check-skipped", "engine/eval/degenerate.py", "weak_outputs",
           "no spread check added for an output zeros pass",
           "if passing and _resolvable(ref):", "if passing and not _resolvable(ref):",
           (DEF + "test_a_softmax_of_many_elements_is_weak_for_zeros_and_constants_and_a_relu_is_not",)),
    # -- degenerate detection: the input-blind path ----------------------------------------------------
    Mutant("blind-identical", "engine/eval/degenerate.py", "input_blind_outputs",
           "an output identical for other inputs (it ignores them, rightly) recorded as input-blind",
           "if others[where].shape == ref.shape and _passes(ref, others[where], tolerances) and not bool(\n"
           "            (others[where] == ref).all()\n        ):",
           "if others[where].shape == ref.shape and _passes(ref, others[where], tolerances):",
           (DEF + "test_an_output_that_barely_depends_on_its_inputs_is_recorded_as_weak_without_a_check",)),
    Mutant("blind-tolerance-flipped", "engine/eval/degenerate.py", "input_blind_outputs",
           "recorded where the other inputs' answer fails the tolerance",
           "_passes(ref, others[where], tolerances) and not bool(",
           "not _passes(ref, others[where], tolerances) and not bool(",
           (DEF + "test_an_output_that_barely_depends_on_its_inputs_is_recorded_as_weak_without_a_check",)),
    Mutant("blind-drops-checks", "engine/eval/degenerate.py", "merge_weak",
           "an input-blind record (no checks) removes the spread check another call added",
           '            if record["passes"] != ["other-inputs"]:  # that record adds a kind, never removes a check\n'
           '                entry["checks"]',
           '            if True:\n                entry["checks"]',
           (DEF + "test_an_output_that_barely_depends_on_its_inputs_is_recorded_as_weak_without_a_check",)),
    # -- degenerate detection: the first-degenerate path --------------------------------------------
    Mutant("kind-zeros-reference", "engine/eval/degenerate.py", "degenerate_kind",
           "zeros named degenerate where the reference's output is zeros too",
           "if bool((got == 0).all()) and not bool((expected == 0).all()):", "if bool((got == 0).all()):",
           (DEF + "test_degenerate_kinds_are_named_only_where_the_reference_differs",)),
    Mutant("kind-constant-reference", "engine/eval/degenerate.py", "degenerate_kind",
           "a constant named degenerate where the reference's output is that constant",
           "if bool((got == got.reshape(-1)[0]).all()) and not bool((expected == expected.reshape(-1)[0]).all()):",
           "if bool((got == got.reshape(-1)[0]).all()):",
           (DEF + "test_an_answer_equal_to_a_constant_or_identity_reference_is_not_degenerate",)),
    Mutant("kind-input-reference", "engine/eval/degenerate.py", "degenerate_kind",
           "an input returned unchanged named degenerate where the reference returns it too",
           "if torch.equal(got, x) and not torch.equal(expected, x):", "if torch.equal(got, x):",
           (DEF + "test_an_answer_equal_to_a_constant_or_identity_reference_is_not_degenerate",)),
    Mutant("first-call-only", "engine/eval/degenerate.py", "first_degenerate",
           "only the call before the reference looked at, not the call after it",
           "    for got in outputs:\n", "    for got in outputs[:1]:\n",
           (DEF + "test_the_call_after_the_reference_and_a_nested_output_are_checked_for_degenerate_answers",)),
    # -- the stale-memory filter -------------------------------------------------------------------
    Mutant("fill-zeros", "engine/eval/stale.py", "FILL_BYTE",
           "free memory filled with zeros instead of NaN bytes", "FILL_BYTE = 0xFF", "FILL_BYTE = 0x00",
           ("tests/test_hostheap.py::test_the_cpu_fill_reaches_a_same_sized_allocation_that_follows_it_in_a_worker",)),
    Mutant("fill-one-copy", "engine/eval/stale.py", "poison_free_memory",
           "one filled chunk per size on CPU instead of four (reached about half the time)",
           "copies = CPU_COPIES if device.type == \"cpu\" and size <= CPU_HEAP_LIMIT else 1", "copies = 1",
           (DEF + "test_the_cpu_fill_counts_every_copy_and_sizes_nested_outputs",)),
    Mutant("fill-multi-output-first", "engine/eval/stale.py", "byte_sizes",
           "of several outputs, only the first one's size filled",
           "        return [n for v in value for n in byte_sizes(v)]",
           "        return byte_sizes(value[0]) if value else []",
           (DEF + "test_the_cpu_fill_counts_every_copy_and_sizes_nested_outputs",)),
    Mutant("fill-dict-output", "engine/eval/stale.py", "byte_sizes",
           "a dict output's sizes never filled",
           "        return [n for v in value.values() for n in byte_sizes(v)]", "        return []",
           (DEF + "test_the_cpu_fill_counts_every_copy_and_sizes_nested_outputs",)),
    # -- the precision flags -----------------------------------------------------------------------------
    Mutant("precision-no-bf16", "engine/eval/precision.py", "_flags",
           "the bf16 reduced-precision reduction flag not pinned",
           'for kind in ("fp16", "bf16"):', 'for kind in ("fp16",):',
           (DEF + "test_the_reduced_precision_reduction_flags_are_named_and_put_back",)),
    Mutant("precision-reduction-restore", "engine/eval/precision.py", "_flags",
           "the reduced-precision flags restored with the wrong arity (the restore fails, silently)",
           "lambda put, v: put(v, True) if isinstance(v, bool) else put(*v),", "lambda put, v: put(v),",
           (DEF + "test_the_reduced_precision_reduction_flags_are_named_and_put_back",)),
    Mutant("precision-no-new-api", "engine/eval/precision.py", "_flags",
           "the new API's getter misnamed: the whole fp32_precision block skipped",
           'get_fp32 = getattr(c, "_get_fp32_precision_getter", None)',
           'get_fp32 = getattr(c, "_get_fp32_precision", None)',
           (DEF + "test_a_new_api_precision_is_named_with_the_value_set_and_put_back",
            CPU + "test_a_new_api_precision_set_at_import_is_refused_and_named")),
    Mutant("precision-no-generic", "engine/eval/precision.py", "FP32_PRECISION",
           "torch.backends.fp32_precision (what every op's 'none' falls back to) not pinned",
           '    ("generic", "all"): "torch.backends.fp32_precision",\n', "",
           (DEF + "test_a_new_api_precision_is_named_with_the_value_set_and_put_back",)),
    Mutant("precision-unreadable-unchanged", "engine/eval/precision.py", "PrecisionPin._now",
           "a flag torch refuses to read taken as unchanged",
           '            return f"unreadable ({str(error)[:80]})"', "            return self.pinned.get(name)",
           (DEF + "test_a_flag_torch_refuses_to_read_is_named_unreadable_and_readable_once_put_back",)),
    # -- ranking ---------------------------------------------------------------------------------------
    Mutant("spread-touching", "sessions/ranking.py", "within_spread",
           "ranges that touch at one end counted as apart",
           "and m.kernel_p25_ms <= best.kernel_p75_ms", "and m.kernel_p25_ms < best.kernel_p75_ms",
           (RANK + "test_ranges_that_touch_overlap_and_a_range_wholly_below_the_best_is_apart",)),
    Mutant("spread-one-sided", "sessions/ranking.py", "within_spread",
           "only one end compared: a range wholly below the best's counted as overlapping",
           " and best.kernel_p25_ms <= m.kernel_p75_ms\n", "\n",
           (RANK + "test_ranges_that_touch_overlap_and_a_range_wholly_below_the_best_is_apart",)),
    Mutant("spread-any-ranking", "sessions/ranking.py", "within_spread",
           "speedups compared by a spread they do not have",
           "if how != KERNEL_TIME or best.kernel_p25_ms", "if best.kernel_p25_ms",
           (RANK + "test_branches_the_timing_cannot_tell_from_the_best_are_named_beside_it",)),
    Mutant("tie-later-time", "sessions/ranking.py", "sort_key",
           "equal kernel times: the later iteration wins",
           "return lambda m: (m.kernel_ms, m.number, m.branch)", "return lambda m: (m.kernel_ms, -m.number, m.branch)",
           (RANK + "test_ties_go_to_the_earlier_iteration_and_a_missing_speedup_ranks_last",)),
    Mutant("tie-speedup-branch", "sessions/ranking.py", "sort_key",
           "equal speedups: the branch name decides, not the earlier iteration",
           "m.speedup is not None else 0.0), m.number, m.branch)", "m.speedup is not None else 0.0), m.branch)",
           (RANK + "test_ties_go_to_the_earlier_iteration_and_a_missing_speedup_ranks_last",)),
    Mutant("missing-speedup-first", "sessions/ranking.py", "sort_key",
           "an iteration without a speedup ranked first",
           "    return lambda m: (-(m.speedup if m.speedup is not None else 0.0), m.number, m.branch)\n",
           "    return lambda m: (-(m.speedup if m.speedup is not None else float('inf')), m.number, m.branch)\n",
           (RANK + "test_ties_go_to_the_earlier_iteration_and_a_missing_speedup_ranks_last",)),
    Mutant("missing-device", "sessions/ranking.py", "ranked_by",
           "kernels whose records name no device ranked by their times as if on one GPU",
           "len(devices) == 1 and None not in devices", "len(devices) == 1",
           (RANK + "test_kernels_whose_records_name_no_device_are_ranked_by_speedup",)),
    Mutant("missing-time", "sessions/ranking.py", "ranked_by",
           "ranked by kernel time when only some kernels have one",
           "all(m.kernel_ms is not None for m in every)", "any(m.kernel_ms is not None for m in every)",
           (RANK + "test_a_kernel_without_a_time_makes_the_speedup_decide",)),
    Mutant("leader-point", "sessions/ranking.py", "beats",
           "a faster point estimate inside both spreads takes the lead (best moves on noise)",
           "        return c_high < i_low\n", "        return challenger.kernel_ms < incumbent.kernel_ms  # type: ignore[operator]\n",
           (RANKING + "test_equal_kernels_and_a_slower_one_never_move_best_and_a_clear_win_does",
            RANKING + "test_spread_edges_and_close_calls")),
    Mutant("leader-touching", "sessions/ranking.py", "beats",
           "spreads that touch counted as apart",
           "        return c_high < i_low\n", "        return c_high <= i_low\n",
           (RANKING + "test_spread_edges_and_close_calls",)),
    Mutant("speedup-spread-ignored", "sessions/ranking.py", "beats",
           "by speedup, the point estimates decide",
           "    return c_low > i_high\n", "    return (challenger.speedup or 0) > (incumbent.speedup or 0)\n",
           (RANKING + "test_a_faster_point_estimate_inside_the_spread_is_a_tie_by_speedup_too",)),
    Mutant("duel-ignored", "sessions/ranking.py", "beats",
           "a duel's verdict not read",
           "    if duel is not None and incumbent.sha and duel.against_sha == incumbent.sha:",
           "    if False:",
           (RANKING + "test_a_duel_against_the_incumbent_decides_and_only_against_that_kernel",)),
    Mutant("duel-any-kernel", "sessions/ranking.py", "beats",
           "a duel against another kernel taken as against the incumbent",
           "    if duel is not None and incumbent.sha and duel.against_sha == incumbent.sha:",
           "    if duel is not None:",
           (RANKING + "test_a_duel_against_the_incumbent_decides_and_only_against_that_kernel",)),
    Mutant("repeat-not-found", "engine/loop/duplicates.py", "normalise",
           "comments kept in the comparison (a re-commented kernel counts as new)",
           "        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER):",
           "        if token.type in (tokenize.NL, tokenize.ENDMARKER):",
           ("tests/test_loop_repeats.py::test_comments_and_spacing_do_not_make_a_kernel_new",)),
    Mutant("repeat-cuda-blind", "engine/loop/duplicates.py", "_string",
           "the CUDA source's text ignored (a changed kernel counts as a repeat)",
           "    return f\"{found['prefix'].lower()}<str>{_lines(_C_COMMENT.sub(' ', found['body']))}</str>\"",
           "    return \"<str></str>\"",
           ("tests/test_loop_repeats.py::test_a_change_in_code_in_a_cuda_string_or_in_indentation_is_new",)),
    # -- the ablation ---------------------------------------------------------------------------------
    Mutant("ablate-mixed", "engine/eval/ablation.py", "switches",
           "ablated when only some CUDA extensions were split-built",
           'any(p != "split" for _, p in cuda)', 'all(p != "split" for _, p in cuda)',
           (ABL + "test_only_split_built_cuda_extensions_get_switches_and_any_other_cuda_build_means_none",)),
    Mutant("ablate-fast-not-cuda", "engine/eval/ablation.py", "CUDA_PATHS",
           "the fast path's extensions taken for host-only ones",
           'CUDA_PATHS = ("split", "stock", "fast")', 'CUDA_PATHS = ("split", "stock")',
           (ABL + "test_only_split_built_cuda_extensions_get_switches_and_any_other_cuda_build_means_none",)),
    Mutant("ablate-cpp-switch", "engine/eval/ablation.py", "switches",
           "a C++-only extension asked for a switch",
           "for m, p in zip(modules, paths, strict=True) if p in CUDA_PATHS]",
           "for m, p in zip(modules, paths, strict=True)]",
           (ABL + "test_only_split_built_cuda_extensions_get_switches_and_any_other_cuda_build_means_none",)),
    Mutant("ablate-no-cuda", "engine/eval/ablation.py", "switches",
           "no CUDA extension at all: an empty list of switches instead of None",
           'if not cuda or any(p != "split"', 'if any(p != "split"',
           (ABL + "test_only_split_built_cuda_extensions_get_switches_and_any_other_cuda_build_means_none",)),
    Mutant("ablate-exit-on-error", "engine/eval/ablation.py", "Ablated.__exit__",
           "the switches left on when the ablated forward raised",
           "    def __exit__(self, *exc: object) -> None:\n        for setter in self.setters:",
           "    def __exit__(self, *exc: object) -> None:\n        for setter in self.setters if exc[0] is None else []:",
           (ABL + "test_the_switches_are_on_inside_ablated_and_off_after_even_when_it_raises",)),
    # -- issue 45's own defences: attribution from the binary, failed loads, replay, L2 persistence -------
    Mutant("attribute-by-name", "engine/guard/binary.py", "attribute",
           "a kernel named like a source __global__ credited as own (the name match the binary replaced)",
           "        elif key in compiled:\n",
           "        elif key in compiled or name in by_name:\n",
           (TRUST + "test_a_kernel_is_own_only_when_its_signature_is_in_the_built_library",
            TRUST + "test_a_borrowed_aten_kernel_gets_no_credit_even_when_the_source_names_it")),
    Mutant("attribute-any-function", "engine/guard/binary.py", "Binary.__contains__",
           "any function of the library taken for a kernel: a host function named like cuBLAS's kernel is own",
           "        return any(mark in mangled and (params is None or params == theirs) for mangled, theirs in self.stubs)\n",
           "        return True\n",
           (TRUST + "test_a_kernel_is_own_only_when_its_signature_is_in_the_built_library",)),
    Mutant("attribute-reference-ignored", "engine/guard/binary.py", "attribute",
           "a kernel the reference launches too credited to the candidate",
           "        if key in compiled and key in reference:\n",
           "        if False:\n",
           (TRUST + "test_a_kernel_the_reference_also_launches_is_credited_to_pytorch",)),
    Mutant("load-failure-forgotten", "engine/eval/build/extension.py", "BuildRecorder._build",
           "a load_inline failure the candidate caught is not remembered",
           "                self.failed.append(", "                (lambda *_: None)(",
           (TRUST + "test_a_candidate_that_survives_its_failed_extension_is_refused_by_its_own_rule",)),
    Mutant("replay-time-test-off", "engine/eval/replay.py", "replayed",
           "calls on inputs seen before never compared with first calls on new ones: a value memo passes",
           "        every = all(f > REPLAY_RATIO * least for f in self.fresh_ms)\n",
           "        every = False\n",
           (TRUST + "test_a_value_keyed_memo_is_refused_as_replayed",)),
    Mutant("stub-locals-ignored", "engine/guard/binary.py", "defined_functions",
           "an inlined stub's static locals not read: an -O3 template kernel is not the candidate's own",
           "        elif len(parts) == 3 and parts[1] in _DATA_TYPES:\n", "        elif False:\n",
           (TRUST + "test_a_kernel_is_own_only_when_its_signature_is_in_the_built_library",)),
    Mutant("replay-deferral-ignored", "engine/eval/late.py", "own_kernels_unneeded",
           "the probe's suspect set not used: the ablation takes new tensors and a pointer-keyed memo misses",
           '    suspect = getattr(ev, "replay_suspect", None)\n', "    suspect = None\n",
           ("tests/test_ablation.py::test_a_suspect_the_replay_probe_deferred_is_called_on_the_tensors_it_saw_and_named_a_replay",)),
    Mutant("replay-evidence-ignored", "engine/eval/replay.py", "probe",
           "the seen call's own launches never looked at: time alone decides on CUDA too",
           "    if own_launches is not None and measured.suspect():\n", "    if False:\n",
           (TRUST + "test_where_the_binary_tells_a_seen_call_that_launches_no_own_kernel_is_a_replay_and_one_that_does_is_not",)),
    Mutant("replay-evidence-inverted", "engine/eval/replay.py", "probe",
           "a seen call that launched its own kernels taken for a replay",
           "            if launched:  # its own", "            if not launched:  # its own",
           (TRUST + "test_where_the_binary_tells_a_seen_call_that_launches_no_own_kernel_is_a_replay_and_one_that_does_is_not",)),
    Mutant("samples-unchecked", "engine/eval/replay.py", "check_samples",
           "the timed calls' kept outputs never compared",
           "    samples = candidate.samples()\n", "    samples = []\n",
           (TRUST + "test_timed_outputs_kept_from_other_calls_or_other_sets_are_replays",)),
    Mutant("warmup-unchecked", "engine/eval/replay.py", "check_warmup",
           "the sets the timing cycles over never verified before timing",
           "    got = candidate.first_outputs()\n", "    got = []\n",
           (TRUST + "test_the_warm_up_verifies_every_set_before_any_call_is_timed",)),
    Mutant("l2-not-reset", "engine/eval/l2.py", "PersistingL2.restore",
           "the limit put back but the persisting lines left persisting",
           "        reset = self.driver.cuCtxResetPersistingL2Cache()\n", "        reset = 0\n",
           (TRUST + "test_a_changed_persisting_limit_is_put_back_and_its_lines_reset_before_each_timed_call",)),
    Mutant("arbiter-loose", "engine/eval/arbiter.py", "judge",
           "the allowance a thousand times the float32 reference's own error: noise far past rounding passes",
           "    allowed = ROUNDING_MULTIPLE * reference_error + floor\n",
           "    allowed = 1000 * ROUNDING_MULTIPLE * reference_error + floor\n",
           (ARB + "test_a_wrong_answer_inside_the_tolerance_is_not_rescued_by_the_arbiter",)),
    Mutant("arbiter-never-constant", "engine/eval/arbiter.py", "judge",
           "a task whose exact answer is constant never named so",
           "        constant=deviation <= ROUNDING_MULTIPLE * reference_error,\n",
           "        constant=False,\n",
           (ARB + "test_an_honest_answer_to_a_task_whose_exact_answer_is_constant_passes_by_the_float64_arbiter",)),
    Mutant("l2-static-rule-misfiled", "engine/guard/native.py", "_NATIVE_PATTERNS",
           "the L2-persistence APIs filed under a rule that only warns, under strict too",
           '    (\n        "l2-persistence",\n',
           '    (\n        "native-static-state",\n',
           (TRUST + "test_the_static_guard_names_l2_persistence_warns_by_default_and_refuses_under_strict",)),
    Mutant("probe-wall-clock-on-cpu", "engine/eval/timing_stage.py", "_probe",
           "the CPU probe clocks wall time: a wait on an honest kernel's first call reads as a memo",
           "    clock = timer.busy_time_once  # on CPU, the work done, not the wall time\n",
           "    clock = timer.time_once\n",
           (TRUST + "test_an_honest_kernel_whose_first_call_on_new_inputs_waits_is_not_a_replay",)),
    Mutant("probe-slowest-seen", "engine/eval/replay.py", "Probe.replayed",
           "the slowest seen call counts, not the least: one slowed call hides a replay",
           "        least = min(self.seen_ms)\n", "        least = max(self.seen_ms)\n",
           (TRUST + "test_one_seen_call_slowed_by_a_busy_machine_does_not_hide_a_replay",)),
    Mutant("replay-credited-time-ignored", "engine/eval/replay.py", "Probe.suspect",
           "the timing's credited call not weighed: a memo whose lookup syncs the host is never profiled",
           "        least = seen if self.timed_ms is None else min(seen, self.timed_ms)\n", "        least = seen\n",
           (TRUST + "test_a_fresh_call_far_slower_than_the_timings_credited_call_is_looked_at_in_the_binary",)),
    Mutant("replay-credited-time-not-passed", "engine/eval/timing_stage.py", "_probe",
           "the timing's median never reaches the probe: the gate on the credited call never fires",
           "    timed_ms = ev.result.timing.candidate.median_ms  # set by the timing just before (time_stage)\n",
           "    timed_ms = None\n",
           (TRUST + "test_an_honest_kernel_is_timed_over_several_verified_input_sets",)),
    Mutant("seen-call-unchecked", "engine/eval/replay.py", "probe",
           "the probe's calls on the timing's sets never compared with their answers",
           "        if wrong is None and timed_answers is not None:\n", "        if False:\n",
           (TRUST + "test_a_seen_call_that_returns_another_timing_sets_answer_is_a_replay",)),
    Mutant("probe-storage-unchecked", "engine/eval/replay.py", "_seen_calls",
           "the probe's outputs never compared by storage with the outputs the timing keeps alive",
           "        wrong = _shared_storage([*kept, (name, got[0])], list(timed.sets))\n", "        wrong = None\n",
           (TRUST + "test_a_seen_call_that_hands_back_the_storage_its_timed_call_returned_is_a_replay",)),
    Mutant("ablation-replay-before-unneeded", "engine/eval/late.py", "own_kernels_unneeded",
           "a suspect's seen inputs ablated whatever new inputs showed: work left to PyTorch is named a replay",
           "    replayed = seen_passed and not passed", "    replayed = seen_passed",
           ("tests/test_ablation.py::test_a_suspect_whose_work_is_all_in_pytorch_is_named_for_that_not_for_a_replay",)),
    Mutant("reference-library-unchecked", "engine/eval/build/trust.py", "load_trusted",
           "a re-timing's reference loads whatever library the cache holds, changed or not",
           "    if data is None or hashlib.sha256(data).hexdigest() != expected:\n", "    if data is None:\n",
           ("tests/test_reference_builds.py::test_a_library_changed_since_its_record_is_built_in_a_folder_of_its_own",)),
    Mutant("reference-digest-from-worker", "engine/eval/build/trust.py", "seal",
           "the evaluating process never reads the library: the digest is whatever the worker reported",
           "        ext.digest = library_digest(library_path(ext.build_dir, ext.name)) if ext.ok else None\n",
           "        pass\n",
           ("tests/test_reference_builds.py::test_each_built_library_is_sealed_with_its_digest_by_the_evaluating_process",)),
    Mutant("import-skips-prebuild-outcome", "engine/eval/build/extension.py", "_build_once",
           "the import asks torch for a build the prebuild thread is still running: it builds again or loads nothing",
           "                again = self.ledger.settled(identity)\n", "                again = None\n",
           ("tests/test_build_failures.py::test_a_source_that_failed_is_not_built_again_and_its_first_error_leads_in_its_own_lines",)),
    Mutant("ledger-settled-no-wait", "engine/eval/build/failures.py", "BuildLedger.settled",
           "settled() answers at once: the import goes on before the prebuild thread's build has failed",
           "            while identity in self._running:\n", "            while False:\n",
           ("tests/test_build_failures.py::test_a_build_asked_for_while_the_prebuild_thread_builds_it_waits_for_that_builds_error",)),
    Mutant("ninja-waits-for-other-units", "engine/eval/build/ninja.py", "run_ninja_teed",
           "a failed unit's build waits for every other unit to finish compiling before its error is raised",
           "                _stop(ninja)\n", "                pass\n",
           ("tests/test_build_ninja.py::test_the_first_failed_unit_ends_the_build_without_waiting_for_the_others",)),
    Mutant("sources-failure-forgotten", "engine/eval/build/extension.py", "_build_any_path",
           "a source that failed on the candidate's own error is built again under each new extension name",
           "                self.ledger.remember_sources(sources, name, error, self._failed_record)\n", "                pass\n",
           ("tests/test_build_failures.py::test_a_source_that_failed_is_not_built_again_and_its_first_error_leads_in_its_own_lines",)),
    Mutant("sources-identity-ignores-name-macro", "engine/eval/build/failures.py", "sources_identity",
           "sources that read TORCH_EXTENSION_NAME are taken to fail the same way under any name",
           "    if EXTENSION_NAME_MACRO in cpp_text or EXTENSION_NAME_MACRO in cuda_text:\n", "    if False:\n",
           ("tests/test_build_failures.py::test_sources_that_failed_are_known_by_their_text_and_options_unless_they_read_the_extensions_name",)),
    Mutant("stock-errors-outside-own-code-count", "engine/eval/build/failures.py", "all_in_own_code",
           "an error in torch's generated lines counts as the candidate's own, so its sources fail under any name",
           "    return bool(errors) and all(e.own and not e.moved for e in errors)\n", "    return bool(errors)\n",
           ("tests/test_build_failures.py::test_only_errors_all_in_the_candidates_text_stand_for_its_sources_under_any_name",)),
    Mutant("undefined-names-ignored", "engine/eval/build/torchnames.py", "undefined_is_own",
           "a name torch's headers declare, undefined in a split unit, is taken for the candidate's own error",
           "    if names is None or name in names:\n", "    if names is None:\n",
           ("tests/test_build_failures.py::test_an_undefined_name_torchs_headers_do_not_declare_is_the_candidates_own_so_stock_is_not_tried",)),
    Mutant("undefined-moved-mentions-ignored", "engine/eval/build/torchnames.py", "undefined_is_own",
           "a name whose declaration the split moved out with a host piece is taken for the candidate's own error",
           "    return len(word.findall(sources)) == len(word.findall(split_cuda))\n", "    return True\n",
           ("tests/test_build_failures.py::test_an_undefined_name_some_of_whose_mentions_the_split_moved_out_stays_the_splits_possible_doing",)),
    Mutant("sources-any-failure-remembered", "engine/eval/build/extension.py", "_build_any_path",
           "any failed build stands for its sources under every name, a bad extension name's failure too",
           "            if sources is not None and self._own_failure:\n", "            if sources is not None:\n",
           ("tests/test_build_failures.py::test_a_failure_outside_the_candidates_own_lines_does_not_stand_for_its_sources_under_another_name",)),
    Mutant("sources-shortcut-lists-nothing", "engine/eval/build/extension.py", "_build_any_path",
           "sources failed in the prebuild thread are refused at the import without listing the failed build",
           "            adopted = self._adopt(self.ledger.sources_record(sources))  # the failed build, listed once\n",
           "            adopted = False\n",
           ("tests/test_build_failures.py::test_sources_remembered_by_another_recorder_are_listed_where_they_are_asked_for_again",)),
    # -- workers forked from the fork server (engine/eval/forkserver.py, engine/eval/zygote.py) ----------
    Mutant("forked-worker-unconfined", "engine/sandbox/select.py", "prepare_forked",
           "a forked worker gets no Landlock rules of its own: it shares the server's sandbox with its siblings",
           "    _confine_to(env, job_dir, _readable(parent_env), [job_dir, *writable])\n    return Launch([], env, mechanism)\n",
           "    return Launch([], env, mechanism)\n",
           (FORK + "test_a_forked_worker_cannot_reach_its_server_or_a_sibling",)),
    Mutant("forked-worker-keeps-server-fds", "engine/eval/zygote.py", "_become_worker",
           "a forked worker keeps the server's descriptors: its control socket and the other workers' replies",
           "    _close_all_but(verdict_fd)\n", "",
           (FORK + "test_a_forked_worker_cannot_reach_its_server_or_a_sibling",)),
    Mutant("fork-exit-status-lost", "engine/eval/zygote.py", "_report_exits",
           "the server reports every ended worker as exited 0: a crash loses its signal",
           "code = ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status", "code = 0",
           (FORK + "test_a_forked_worker_gives_the_verdicts_a_started_one_gives",)),
    Mutant("fork-server-started-by-any-thread", "engine/eval/forkserver.py", "server_for",
           "the server is started by whichever thread asks first, and dies with it (bwrap's --die-with-parent)",
           "server = _STARTER.submit(lambda: _start(key, options, cache_root, launched)).result()",
           "server = _start(key, options, cache_root, launched)",
           (FORK + "test_a_server_first_asked_for_by_a_thread_that_ends_outlives_that_thread",)),
    Mutant("stuck-server-kept", "engine/eval/supervisor.py", "start_worker",
           "a server that failed to fork is kept: every later evaluation waits for it again",
           "            forkserver.give_up(server, str(error), stuck=error.stuck)\n", "            pass\n",
           (FORK + "test_a_server_that_stops_answering_is_given_up_and_workers_start_anew",)),
    Mutant("landlock-reads-all-proc", "engine/sandbox/landlock.py", "rules_for",
           "a Landlock worker may read every process's /proc entry: the environment cudaforge was started with",
           "    read = [*SYSTEM_READ, *PROC_READ, *(str(Path(p).resolve()) for p in readable if p)]",
           '    read = [*SYSTEM_READ, "/proc", *(str(Path(p).resolve()) for p in readable if p)]',
           ("tests/test_sandbox_escape.py::test_escape_attempt_has_no_effect",)),
    Mutant("orphans-outlive-forked-worker", "engine/eval/zygote.py", "_watch",
           "what a forked worker leaves behind is not ended by its init: it outlives the evaluation in the server's sandbox",
           "    _end_orphans()\n    code = os.waitstatus_to_exitcode(status)\n",
           "    code = os.waitstatus_to_exitcode(status)\n",
           (FORK + "test_a_workers_init_ends_what_the_worker_left_before_it_ends_itself",
            FORK + "test_what_a_forked_worker_leaves_behind_ends_with_its_evaluation",
            "tests/test_sandbox_escape.py::test_escape_attempt_has_no_effect[daemon-landlock]")),
    Mutant("lost-server-blamed-on-kernel", "engine/eval/supervisor.py", "execute",
           "a worker killed with its dying fork server is read as the candidate's crash",
           "            self._blame_lost_server(result)\n", "            pass\n",
           (FORK + "test_a_worker_lost_with_its_server_is_cudaforges_fault",)),
    Mutant("fork-without-signal-scopes", "engine/sandbox/select.py", "fork_blocker",
           "workers are forked under bwrap where Landlock cannot keep siblings from signalling each other",
           "    if abi < 6:\n", "    if abi < 1:\n",
           (FORK + "test_workers_that_could_not_be_kept_apart_start_as_new_interpreters",)),
    Mutant("kept-server-serves-any-user", "engine/eval/keptserver.py", "peer_is_this_user",
           "a kept fork server forks workers for another local user's process",
           "    return uid == os.getuid()\n", "    return True\n",
           (KEPT + "test_another_user_is_refused_by_a_kept_server",)),
    Mutant("kept-server-reachable-by-workers", "engine/sandbox/landlock.py", "restrict",
           "a confined worker may connect to abstract sockets made outside its domain: its kept server's",
           "        SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if abi >= 6 else 0,\n", "        SCOPE_SIGNAL if abi >= 6 else 0,\n",
           (KEPT + "test_a_forked_worker_cannot_reach_its_kept_server",)),
    Mutant("kept-server-keeps-a-gone-commands-workers", "engine/eval/zygote.py", "_end_client",
           "the workers of a command that went away run on in a kept server",
           "        if child.client is connection:\n", "        if child.client is connection and not child.released:\n",
           (KEPT + "test_the_workers_of_a_command_that_went_away_end_and_the_others_go_on",)),
    Mutant("kept-server-never-leaves", "engine/eval/zygote.py", "main",
           "a kept server with nothing to do stays forever",
           "                if timeout == 0.0:\n", "                if timeout < 0.0:\n",
           (KEPT + "test_a_kept_server_leaves_once_it_has_had_nothing_to_do_for_its_time",)),
    Mutant("stuck-kept-server-left-running", "engine/eval/forkserver.py", "give_up",
           "a kept server that forks nothing holds up every later command for the fork's timeout",
           "        server.end_kept()\n", "        pass\n",
           (KEPT + "test_a_kept_server_that_forks_nothing_is_ended_and_the_next_command_starts_a_new_one",)),
    Mutant("failed-fork-ends-kept-server", "engine/eval/forkserver.py", "give_up",
           "one command's failed fork (a candidate's fork bomb elsewhere) ends every command's kept server",
           "    if stuck:  # never for a fork that failed", "    if True:  # never for a fork that failed",
           (KEPT + "test_a_fork_that_fails_ends_only_this_commands_use_of_a_kept_server",)),
    Mutant("kept-server-trusts-any-listener", "engine/eval/forkserver.py", "_join_kept",
           "a command hands its worker's pipes to whatever process bound the kept server's name",
           "            if refused:  # never handed a pipe", "            if False:  # never handed a pipe",
           (KEPT + "test_a_process_that_took_the_servers_name_is_never_handed_a_worker",)),
    Mutant("kept-server-kills-only-the-group", "engine/eval/zygote.py", "_kill_whole",
           "a gone command's worker's processes in sessions of their own outlive it",
           "    kill_tree(pid)\n", "    os.killpg(pid, signal.SIGKILL)\n",
           (KEPT + "test_the_workers_of_a_command_that_went_away_end_and_the_others_go_on",)),
    Mutant("kept-server-named-without-code", "engine/eval/keptserver.py", "address",
           "a kept server started before the engine's sources changed forks workers of the old code",
           '    text = "\\0".join([repr(key), str(os.getuid()), fingerprint or code_fingerprint()])\n',
           '    text = "\\0".join([repr(key), str(os.getuid())])\n',
           (KEPT + "test_a_changed_engine_source_names_another_server",)),
    Mutant("probe-seen-after-new-inputs", "engine/eval/replay.py", "probe",
           "the probe's seen calls come after the candidate met new inputs, which may push the timing's sets out "
           "of a small memo",
           "    wrong = _seen_calls(candidate, len(sets), time_once, compare, timed, timed_answers, kept, timed_named, measured)\n",
           "    for extra in sets:\n        candidate(*extra)\n"
           "    wrong = _seen_calls(candidate, len(sets), time_once, compare, timed, timed_answers, kept, timed_named, measured)\n",
           (TRUST + "test_a_memo_just_big_enough_for_the_timings_sets_is_refused",)),
    Mutant("ablation-new-inputs-first", "engine/eval/late.py", "own_kernels_unneeded",
           "the ablation asks new inputs before the suspect's tensors: a memo of one answer has let the suspect's go",
           "        seen_passed, seen_how = False, \"\"\n        if suspect is not None:",
           "        _ablated_forward(ev, reference, new, ev.make_inputs(task, ev.job.seed + ABLATION_SEED), fresh=True)\n"
           "        seen_passed, seen_how = False, \"\"\n        if suspect is not None:",
           (ABL + "test_a_memo_of_one_answer_is_asked_on_the_suspect_tensors_before_a_new_input_can_push_them_out",)),
    Mutant("ablation-suspect-slowest-seen", "engine/eval/replay.py", "probe",
           "the ablation is handed the timing set whose seen call took longest, not the one a cache answered",
           "key=measured.seen_ms.__getitem__)", "key=lambda i: -measured.seen_ms[i])",
           (TRUST + "test_where_the_ablation_stage_will_tell_the_probe_defers_and_refuses_nothing_by_time",)),
    Mutant("landlock-one-shot-worker-anew", "engine/eval/forkserver.py", "server_for",
           "under Landlock alone a one-shot command starts its worker anew while its server launches: a setsid'd "
           "daemon it leaves outlives the evaluation",
           "            if mechanism != \"landlock\":\n", "            if True:\n",
           ("tests/test_sandbox_escape.py::test_escape_attempt_has_no_effect[daemon-landlock]",)),
    Mutant("hang-up-output-unwrapped", "tui/app.py", "get_driver_class",
           "Textual's writer thread dies of the first write to a hung-up terminal: the app freezes on its full queue",
           "        return hang_up_proof(super().get_driver_class())\n", "        return super().get_driver_class()\n",
           ("tests/test_tui_hangup.py::test_a_hang_up_while_the_screen_is_stuck_on_a_stalled_terminal_still_quits_with_129",)),
    Mutant("any-failure-ends-the-screen", "tui/terminal_output.py", "HangUpProofOutput._attempt",
           "one EAGAIN on a terminal made non-blocking blanks the screen for the rest of the session",
           "                self.gone = error.errno in HUNG_UP\n", "                self.gone = True\n",
           ("tests/test_tui_hangup.py::test_the_output_is_gone_only_when_the_terminal_is",)),
    Mutant("hidden-work-never-found", "engine/eval/timing_stage.py", "hidden_work",
           "timing-disagreement never fires: work on a side stream is timed as free",
           "    return timing_disagreement(candidate.median_ms, candidate.gap_median_ms, reference.gap_median_ms)\n",
           "    return None\n",
           ("tests/test_guard_runtime.py::test_work_hidden_from_the_events_in_every_call_is_still_found",)),
    Mutant("gap-against-own-flush", "engine/eval/timing.py", "_stats",
           "each model's gap measured against its own flush: work put ahead of the flush at a higher priority "
           "stretches the flush, not the gap, and passes",
           "    stats.gap_median_ms = _median(gaps(calls, flush_ms))\n",
           "    stats.gap_median_ms = _median(gaps(calls, stats.flush_median_ms))\n",
           ("tests/test_guard_runtime.py::test_work_put_ahead_of_the_flush_is_found_by_the_flush_it_stretched",)),
    # -- the precompiled header: the harness's fault, never the kernel's (session 25) ----------------------
    Mutant("header-fault-blamed-on-kernel", "engine/eval/build/extension.py", "_header_suspect",
           "a build the precompiled header broke is not built again without it: compile_error on the kernel",
           "        if record is None or record.pch != \"used\" or path == \"split\":\n",
           "        if True:\n",
           (PCH + "test_a_build_the_header_breaks_is_built_again_without_it_and_the_header_set_aside",)),
    Mutant("own-error-blamed-on-header", "engine/eval/build/extension.py", "_header_suspect",
           "an error in the candidate's own code, with torch's cascade after it, blamed on the header: built twice",
           "        if not errors or any(placed.own for placed in errors):",
           "        if not errors or all(placed.own for placed in errors):",
           (PCH + "test_a_candidates_own_error_with_the_header_is_its_own_after_one_build",)),
    Mutant("header-set-aside-before-its-retry", "engine/eval/build/extension.py", "_build_without_header",
           "the header put aside before the build without it proves it at fault: a candidate's binding error takes "
           "the shared header from every other build",
           "        try:\n            module = build(use_header=False)\n",
           "        self._header_was_at_fault(header, error)\n        try:\n            module = build(use_header=False)\n",
           (PCH + "test_a_build_that_fails_without_the_header_too_keeps_the_header",)),
    Mutant("header-retry-under-new-name", "engine/eval/build/extension.py", "_build_without_header",
           "the build without the header runs under torch's new name (name_v1): after a prebuild the import "
           "compiles it all over again under its own name (session 27)",
           "        forget_version(name)\n", "",
           (PCH + "test_a_build_the_header_breaks_is_built_again_without_it_and_the_header_set_aside",)),
    # -- a candidate whose own code fails to compile ends without waiting for the reference (session 27) --
    Mutant("reference-never-cut-short", "engine/eval/worker.py", "Evaluation.reference_sound",
           "the reference is checked to its end while the import that will fail waits",
           "        own_error = None if after_import or self.prebuild is None else (lambda: self.ledger.own_error_seen)\n",
           "        own_error = None\n",
           (PREBUILD + "test_a_compile_error_in_the_candidates_own_code_ends_the_evaluation_without_waiting_for_the_reference",)),
    Mutant("prebuild-split-own-error-unnoted", "engine/eval/build/extension.py", "BuildRecorder._build_split_or_stock",
           "the prebuild thread's split failing in the candidate's own code goes unnoted: the reference waits",
           "                self.own_error_last = candidate_own_error(str(error), split.host_lines, undefined_is_own)\n",
           "                self.own_error_last = False\n",
           (PREBUILD + "test_on_the_gpu_a_split_build_failing_in_the_candidates_own_code_cuts_the_reference_short",), gpu=True),
    Mutant("own-error-unnoted", "engine/eval/build/extension.py", "BuildRecorder._build_any_path",
           "a build failing in the candidate's own code goes unnoted: the reference waits for nothing",
           "            self.own_error_last = self.own_error_last or self._own_failure  # (a prebuild's split said so)\n",
           "            self.own_error_last = self.own_error_last\n",
           (PREBUILD + "test_a_compile_error_in_the_candidates_own_code_ends_the_evaluation_without_waiting_for_the_reference",)),
    Mutant("uncertain-call-cuts-reference-short", "engine/eval/build/prebuild.py", "Prebuild._run",
           "a failed call the import may never make (in a try) cuts the reference short: an honest fallback then "
           "has its task's failure blamed on it",
           "                    if call.certain and self.recorder.own_error_last:",
           "                    if self.recorder.own_error_last:",
           (PREBUILD + "test_a_candidate_that_catches_its_own_failed_build_in_a_try_has_the_reference_checked_first",)),
    Mutant("reference-not-checked-after-import", "engine/eval/worker.py", "Evaluation.run",
           "a candidate whose import succeeds after the check was cut short is never checked against a sound reference",
           "        if sound is None and not self.reference_sound(task, after_import=True):\n            return self.result\n",
           "",
           (PREBUILD + "test_a_candidate_that_fools_the_reading_of_its_source_has_the_reference_checked_after_its_import",)),
    Mutant("reference-after-import-blamed-on-task", "engine/eval/worker.py", "Evaluation.reference_sound",
           "a reference that fails after the candidate's code ran is called the task's fault",
           "        if after_import:  # the candidate's import ran before it: not known to be the task's\n",
           "        if False:\n",
           (PREBUILD + "test_a_candidate_that_fools_the_reading_of_its_source_has_the_reference_checked_after_its_import",)),
    Mutant("after-import-check-under-reference-stage", "engine/eval/worker.py", "Evaluation.reference_sound",
           "a crash in the reference checked after the candidate's import is blamed on the task (by the stage's name)",
           "        self.stage(\"check\" if after_import else \"reference\")\n",
           "        self.stage(\"reference\")\n",
           (PREBUILD + "test_a_candidate_that_fools_the_reading_of_its_source_has_the_reference_checked_after_its_import",)),
)


def pytest(copy: Path, tests: list[str]) -> subprocess.CompletedProcess:
    """The tests run in ``copy``, with its code first on the path and no bytecode kept from an earlier run:
    a mutated file put back within the same second, at the same size, could otherwise be read from a stale
    .pyc. The run's own processes write bytecode (tests/conftest.py drops ``PYTHONDONTWRITEBYTECODE`` for
    them), so each run writes it under a folder of its own (``PYTHONPYCACHEPREFIX``), deleted after it."""
    with tempfile.TemporaryDirectory(prefix="cf-mutant-pyc-") as pycache:
        env = {
            **os.environ,
            # the copy first; what the path held after it (the device's wheels) still found
            "PYTHONPATH": os.pathsep.join(filter(None, [str(copy), os.environ.get("PYTHONPATH")])),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPYCACHEPREFIX": pycache,
            "CUDAFORGE_TEST_CACHE": os.environ.get("CUDAFORGE_TEST_CACHE", str(REPO / ".cache" / "test-extensions")),
        }
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
        return subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=PYTEST_TIMEOUT_S)


def run(mutant: Mutant, copy: Path) -> str:
    """"killed", "survived", "no match" (the ``old`` snippet is not in the file exactly once) or "no test"
    (pytest ran no test: a killing test renamed or moved kills nothing)."""
    path = copy / mutant.file
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return "no match"
    if mutant.gpu and not _cuda():
        return NEEDS_GPU
    path.write_text(original.replace(mutant.old, mutant.new))
    try:
        status = pytest(copy, list(mutant.tests)).returncode
        return "killed" if status in PYTEST_KILLED else "survived" if status == 0 else "no test"
    finally:
        path.write_text(original)


NEEDS_GPU = "needs a GPU"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def table(rows: list[tuple[Mutant, str]]) -> str:
    lines = ["| mutant | file:function | what it changes | killed by | result |", "|---|---|---|---|---|"]
    for m, outcome in rows:
        killers = "<br>".join(t.split("/")[-1] for t in m.tests)
        lines.append(f"| {m.id} | {m.file.split('/')[-1]}:{m.function} | {m.what} | {killers} | {outcome} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run one mutant, by id")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is printed)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only in (None, m.id)]
    if not chosen:
        print(f"no mutant {args.only!r}; ids: {', '.join(m.id for m in MUTANTS)}", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="cf-mutants-"))
    copy = folder / "repo"
    try:
        shutil.copytree(REPO, copy, ignore=SKIP, symlinks=True)
        tests = list(dict.fromkeys(t for m in chosen for t in m.tests))
        baseline = pytest(copy, tests)
        if baseline.returncode != 0:  # a killing test that fails unmutated kills nothing
            print(baseline.stdout[-4000:] + baseline.stderr[-2000:], file=sys.stderr)
            print("the unmutated copy fails its mutants' tests: no mutant was run", file=sys.stderr)
            return 1
        rows = []
        for mutant in chosen:
            rows.append((mutant, run(mutant, copy)))
            print(f"{mutant.id}: {rows[-1][1]}", file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"kept {copy}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(table(rows))
    killed = sum(outcome == "killed" for _, outcome in rows)
    gpu_only = sum(outcome == NEEDS_GPU for _, outcome in rows)
    alive = len(rows) - killed - gpu_only
    print(f"\n{killed} of {len(rows)} mutants killed", end="")
    print(f"; {alive} survived or no longer match" if alive else "", end="")
    print(f"; {gpu_only} need a GPU (on the device: python benchmarks/mutants.py --only ID)" if gpu_only else "")
    return 1 if alive else 0


if __name__ == "__main__":
    raise SystemExit(main())
