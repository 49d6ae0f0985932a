"""``cudaforge evalset PAIRS… --out DIR``: judge existing kernels against their tasks (ARCHITECTURE.md §8).

PAIRS are a folder of ``<name>/task.py`` + ``<name>/kernel.py``, a KernelBench tasks folder followed
by a kernels folder, or a TSV of task and kernel paths (:mod:`engine.evalset.pairs`). Phase 1 builds
and checks ``--build-workers`` kernels at once (on CUDA within each GPU's free memory); phase 2 times
the correct ones one at a time per GPU of ``--gpus``, or everything runs as Ray tasks with ``--ray``
(:mod:`engine.evalset.scheduler`). Every kernel's EvalResult goes to ``OUT/results/<name>.json`` as
it arrives; a rerun with the same ``--out`` does only what is missing (``--redo``: everything).

At the end: ``OUT/summary.csv`` and ``OUT/summary.json`` (the bench's statistics, the own-kernel
share, the guard policy, wall time against the sum of evaluation times), ``OUT/evalset.png``, and
KernelBench-compatible ``OUT/kernelbench/level_<L>/eval_results.json``.

Evaluation settings resolve as everywhere (defaults → user config → ``cudaforge.toml`` → flags);
``--device``, ``--trials``, ``--timing-trials``, ``--timeout``, ``--guard``, ``--relax``, ``--refuse`` and
``--sandbox`` mean what they mean for ``cudaforge eval``.

Exit codes: 0 every pair has a verdict (whatever it is), 1 some pair has none (an evaluation could
not run, or the run was interrupted: rerun to finish), 2 usage errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.batch.ray import RayUnavailable, import_ray
from engine.cli.args import OneLineParser, gpu_list, int_at_least, positive_float, visible_gpus
from engine.cli.eval import finish_headers
from engine.cli.guard import add_guard_flags
from engine.config import SANDBOX_MODES, EvalConfig

EXIT_OK, EXIT_PENDING, EXIT_USAGE = 0, 1, 2
BUILD_MEMORY_BYTES = 4 << 30  # what one parallel build + check may take of host memory
SKIPPED_SHOWN = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evalset",
        help="judge existing kernels against their tasks: parallel builds, timing one at a time per GPU",
        description="Build and check every (task, kernel) pair in parallel, then time the correct ones "
        "undisturbed; resumable; summary with the bench's statistics and KernelBench-compatible results.",
    )
    add_arguments(parser)
    parser.set_defaults(func=evalset_command)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pairs", nargs="+", type=Path, metavar="PAIRS",
        help="a folder of <name>/task.py + <name>/kernel.py; a KernelBench tasks folder then a kernels "
        "folder; or a TSV of 'task<TAB>kernel[<TAB>name]'",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="where results and the summary go")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default=None, help="default: cuda when available"
    )
    parser.add_argument("--gpus", type=gpu_list, help="CUDA: the GPUs to use, e.g. 0,1 (default: all)")
    parser.add_argument(
        "--gpu-budget", type=positive_float, default=None, metavar="GB",
        help="CUDA: GB of each GPU that concurrent checks may reserve (default: 90%% of its free memory)",
    )  # fmt: skip
    parser.add_argument(
        "--build-workers", type=int_at_least(1), default=None,
        help="phase 1 evaluations at once (default: min(cores, free RAM / 4 GB))",
    )  # fmt: skip
    parser.add_argument(
        "--ray", metavar="ADDRESS", help="run evaluations as Ray tasks ('auto': a local Ray instance)"
    )
    parser.add_argument("--trials", type=int_at_least(1), default=None, help=f"correctness trials (default {EvalConfig.trials})")
    parser.add_argument(
        "--timing-trials", type=int_at_least(1), default=None, help=f"timed calls per model (default {EvalConfig.timing_trials})"
    )
    parser.add_argument("--timeout", type=positive_float, default=None, help="seconds allowed for each stage")
    parser.add_argument(
        "--build-budget", type=positive_float, default=None, metavar="SECONDS",
        help="seconds all builds of one evaluation may take together (default [eval] build_budget_s: 180)",
    )  # fmt: skip
    parser.add_argument(
        "--max-pair-seconds", type=positive_float, default=600.0, metavar="SECONDS",
        help="wall-clock cap on one pair's evaluation, every stage together (default 600): past it, a timeout verdict",
    )  # fmt: skip
    parser.add_argument("--no-timing", action="store_true", help="phase 1 only: correctness, no timing")
    parser.add_argument(
        "--no-shapes", action="store_true", help="skip the correctness re-check at perturbed sizes"
    )
    add_guard_flags(parser)
    parser.add_argument("--sandbox", choices=SANDBOX_MODES, default=None, help="worker sandbox (as for eval)")
    parser.add_argument(
        "--redo", action="store_true", help="ignore stored results and judge every pair again"
    )
    parser.add_argument(
        "--progress", choices=("auto", "bar", "lines"), default="auto",
        help="a live bar (terminal) or one line per event (default: bar on a terminal)",
    )  # fmt: skip


def _usage(message: str) -> int:
    print(f"cudaforge evalset: {message}", file=sys.stderr)
    return EXIT_USAGE


def default_build_workers() -> int:
    """min(cores, available RAM / BUILD_MEMORY_BYTES), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    by_memory = available // BUILD_MEMORY_BYTES if available else cores
    return max(1, min(cores, by_memory))


def build_eval_options(args: argparse.Namespace) -> Any:
    """EvalOptions from the config files and the flags; raises ConfigError / EvaluationError / ValueError.

    The command's one device resolution and its one guard settings: every pair's evaluation (and each
    GPU's copy of the options) carries these as they are."""
    from engine.cli.guard import guard_settings
    from engine.config import load_config
    from engine.eval.options import EvalOptions, EvaluationError, StageTimeouts, resolve_device
    from engine.guard.rules import GuardPolicyError

    overrides: dict[str, Any] = {}
    for key, value in (
        ("device", args.device),
        ("trials", args.trials),
        ("timing_trials", args.timing_trials),
        ("build_budget_s", args.build_budget),
    ):
        if value is not None:
            overrides[key] = value
    if args.timeout:
        overrides["timeouts"] = {name: args.timeout for name in vars(StageTimeouts())}
    config = load_config(overrides={"eval": overrides} if overrides else None)
    device = resolve_device(config.eval.device, gpus_elsewhere=bool(args.ray))
    try:  # an unknown rule id is a usage error now, not N failed evaluations
        guard = guard_settings(args, config)
    except GuardPolicyError as error:
        raise EvaluationError(str(error)) from None
    options = EvalOptions.from_config(config, device, guard=guard)
    options.do_timing = not args.no_timing
    options.max_seconds = args.max_pair_seconds
    options.shapes = not args.no_shapes  # on by default here (issue 25): judged sets say how general
    if args.sandbox:
        options.sandbox = args.sandbox
    return options


def evalset_command(args: argparse.Namespace) -> int:
    from engine.config import ConfigError
    from engine.eval.options import EvaluationError
    from engine.evalset.kernelbench import write_kernelbench
    from engine.evalset.pairs import EvalsetError, discover
    from engine.evalset.plots import INSTALL_HINT, write_plot
    from engine.evalset.scheduler import Evalset, EvalsetOptions
    from engine.evalset.summary import PENDING, format_table, row_for, summary_document, write_csv, write_json

    if args.gpus and args.ray:
        return _usage("--gpus and --ray do not mix: Ray gives each evaluation its GPU")
    try:
        if args.ray:
            import_ray()
        options = build_eval_options(args)
        if args.gpus and options.device != "cuda":
            return _usage("--gpus needs a CUDA device (not --device cpu)")
        found = discover(args.pairs)
    except (EvalsetError, EvaluationError, ConfigError, ValueError, RayUnavailable) as error:
        return _usage(str(error))
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for skipped in found.skipped[:SKIPPED_SHOWN]:
        print(f"skipped {skipped.path}: {skipped.why}", flush=True)
    if len(found.skipped) > SKIPPED_SHOWN:
        print(
            f"… and {len(found.skipped) - SKIPPED_SHOWN} more skipped (all listed in summary.json)",
            flush=True,
        )
    gpus = None if args.ray else visible_gpus(options.device, args.gpus)
    workers = args.build_workers or default_build_workers()
    where = (
        f"Ray at {args.ray}" if args.ray else (f"GPU {','.join(map(str, gpus))}" if gpus else options.device)
    )
    print(f"evalset: {len(found.pairs)} pair(s) · {workers} build worker(s) · {where} · {out}", flush=True)
    settings = EvalsetOptions(
        out=out, eval_options=options, gpus=gpus, build_workers=workers, ray=args.ray, redo=args.redo,
        progress=args.progress, gpu_budget_bytes=int(args.gpu_budget * 2**30) if args.gpu_budget else None,
    )  # fmt: skip
    remote = None
    if args.ray:
        from engine.evalset.ray_runner import RayRunner

        remote = RayRunner
    evalset = Evalset(found.pairs, settings, remote)
    stats = evalset.run()
    for error in stats.errors:
        print(f"error: {error}", flush=True)
    rows = [row_for(out, pair) for pair in found.pairs]
    kb_files, kb_left_out = write_kernelbench(out, found.pairs)
    extra = {
        "guard_policy": options.guard.policy,
        "device": options.device,
        "gpus": gpus,
        "build_workers": workers,
        "ray": args.ray,
        "settings": options.settings(),
        "sandbox": options.sandbox,
        "skipped": [{"path": s.path, "why": s.why} for s in found.skipped],
        "kernelbench_files": [str(p) for p in kb_files],
        "kernelbench_left_out": kb_left_out,
    }
    document = summary_document(rows, stats.to_dict(), extra)
    write_csv(rows, out / "summary.csv")
    write_json(document, out / "summary.json")
    print("", flush=True)
    print(format_table(rows, document), flush=True)
    print(f"\nsummary: {out / 'summary.csv'} · {out / 'summary.json'}", flush=True)
    if kb_files:
        print("KernelBench results: " + " · ".join(str(p) for p in kb_files), flush=True)
    try:
        print(f"plot: {write_plot(rows, out)}", flush=True)
    except ImportError:
        print(f"plot: skipped ({INSTALL_HINT})", flush=True)
    finish_headers("cudaforge evalset")  # a header the evaluations asked for ends with this process
    return EXIT_PENDING if any(r.status == PENDING for r in rows) else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m engine.cli.evalset …``: the evalset command alone."""
    parser = OneLineParser(prog="cudaforge evalset")
    add_arguments(parser)
    return evalset_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
