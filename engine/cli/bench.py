"""``cudaforge bench TASKS… --out DIR``: one headless session per task, then a summary of the set.

TASKS are task files or folders of them (a KernelBench level folder works as is). Sessions live
under ``OUT/sessions``; a rerun with the same ``--out`` skips finished tasks and continues the
others, with the ``--rounds`` and models of the first run unless flags change them
(``OUT/bench.json``). At the end ``OUT/summary.csv`` and ``OUT/summary.json`` are written and a table printed
(statistics as defined in :mod:`engine.batch.statistics`).

Concurrency: on CUDA one worker per GPU of ``--gpus`` (default: every visible GPU), on CPU
``--workers N`` (default 1); or ``--ray ADDRESS`` (``auto``: a local instance), where every task is
a Ray task asking for one GPU (one CPU on CPU). ``--compile-baseline`` also times
``torch.compile`` of each reference and reports speedups against it. Plots (PNG) go next to the
summary when matplotlib is installed. Progress: a live bar with one line per running task on a
terminal, plain lines otherwise (``--progress``); every task's full output is in ``OUT/logs``.

``--explore K`` (``--beam W``): each task's session makes its seed, then explores K ideas from it,
a branch each for ``--rounds`` rounds (``cudaforge explore SESSION --from 0 --width K``); the task's
best is the best correct iteration on any branch, and its exploration summary is ``OUT/explore/<task>.json``.

Exit codes: 0 every task ran without error, 1 some task's run failed, 2 usage errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from engine.batch.plots import INSTALL_HINT as PLOTS_HINT
from engine.batch.plots import write_plots
from engine.batch.progress import make_progress
from engine.batch.ray import RayUnavailable, import_ray
from engine.batch.statistics import format_table, write_csv, write_json
from engine.bench.results import task_row
from engine.bench.runner import Bench, BenchOptions
from engine.bench.settings import merged_settings, stored_settings
from engine.bench.tasks import BenchError, discover
from engine.cli.args import OneLineParser, int_at_least, model_name
from engine.cli.guard import add_guard_flags, guard_settings
from engine.guard.policy import GuardPolicyError, GuardSettings, guard_label

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="run the loop headless on every task of a set and summarise (resumable)",
        description="One auto-approved headless session per task, run concurrently; CSV/JSON summary.",
    )
    add_arguments(parser)
    parser.set_defaults(func=bench_command)


def _gpu_list(text: str) -> list[str]:
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus):
        raise argparse.ArgumentTypeError("a comma-separated list of GPU indices, e.g. 0,1")
    return gpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tasks", nargs="+", type=Path, help="task files or folders of them")
    parser.add_argument("--out", type=Path, required=True, help="where sessions and the summary go")
    parser.add_argument("--rounds", type=int_at_least(0), help="rounds after the seed, per task")
    parser.add_argument("--coder", type=model_name, help="provider/model of the Coder")
    parser.add_argument("--judge", type=model_name, help="provider/model of the Judge")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where kernels run")
    parser.add_argument("--gpus", type=_gpu_list, help="CUDA: one worker per listed GPU (default: all)")
    parser.add_argument(
        "--workers", type=int_at_least(1), default=1, help="CPU: tasks run at once (default 1)"
    )
    parser.add_argument(
        "--ray", metavar="ADDRESS", help="run tasks as Ray tasks, one GPU each ('auto': a local Ray instance)"
    )
    parser.add_argument(
        "--compile-baseline", action="store_true", help="also time torch.compile of each reference"
    )
    parser.add_argument(
        "--no-shapes", action="store_true", help="skip the correctness re-check at perturbed sizes"
    )
    parser.add_argument(
        "--explore", type=int_at_least(1), metavar="K",
        help="after each task's seed, explore K ideas from it, a branch each for --rounds rounds; "
        "the best over all branches is recorded",
    )  # fmt: skip
    parser.add_argument(
        "--beam", type=int_at_least(1), metavar="W",
        help="with --explore: after every round only the W best correct branches go on",
    )  # fmt: skip
    parser.add_argument(
        "--progress", choices=("auto", "bar", "lines"), default="auto",
        help="a live bar (terminal) or one line per event (default: bar on a terminal)",
    )  # fmt: skip
    add_guard_flags(parser)


def _usage(message: str) -> int:
    print(f"cudaforge bench: {message}", file=sys.stderr)
    return EXIT_USAGE


def _gpus(device: str, requested: list[str] | None) -> list[str] | None:
    """On CUDA, the GPU of each worker (``device`` resolved already): a worker's GPU is its
    ``CUDA_VISIBLE_DEVICES``, and its child run gets the same resolved ``--device``."""
    if device != "cuda":
        return None
    if requested:
        return requested
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def _explore_problem(args: argparse.Namespace, stored: dict) -> str | None:
    """What is wrong with ``--explore``/``--beam`` as given (with what an earlier run of ``--out`` stored)."""
    explore = args.explore if args.explore is not None else stored.get("explore")
    rounds = args.rounds if args.rounds is not None else stored.get("rounds")
    if args.beam is not None and explore is None:
        return "--beam needs --explore K: it keeps the best W of an exploration's branches"
    if explore is not None and rounds == 0:
        return "--explore needs --rounds of at least 1: the rounds each branch runs after the seed"
    if explore is not None and rounds is None:
        return "--explore needs --rounds R: the rounds each branch runs after the seed"
    return None


def _explore_label(options: BenchOptions) -> str:
    if options.explore is None:
        return ""
    beam = f", beam {options.beam}" if options.beam is not None else ""
    return f" · explore width {options.explore}{beam}, {options.rounds} round(s) per branch"


def _options(
    args: argparse.Namespace, out: Path, device: str, gpus: list[str] | None, guard: GuardSettings
) -> BenchOptions:
    """The bench's options: the flags given, else what the first run with this ``--out`` stored."""
    stored = merged_settings(
        out,
        {
            "rounds": args.rounds,
            "coder": args.coder,
            "judge": args.judge,
            "guard": args.guard,
            "relax": list(guard.relax) or None,
            "refuse": list(guard.refuse) or None,
            "explore": args.explore,
            "beam": args.beam,
        },
    )
    return BenchOptions(
        out=out,
        rounds=stored["rounds"],
        coder=stored["coder"],
        judge=stored["judge"],
        device=device,
        workers=args.workers,
        gpus=gpus,
        compile_baseline=args.compile_baseline,
        ray=args.ray,
        guard=stored.get("guard"),
        relax=list(stored.get("relax") or []),
        refuse=list(stored.get("refuse") or []),
        shapes=not args.no_shapes,
        explore=stored.get("explore"),
        beam=stored.get("beam"),
    )


def bench_command(args: argparse.Namespace) -> int:
    from engine.eval.options import EvaluationError, resolve_device

    if args.gpus and args.device == "cpu":
        return _usage("--gpus needs a CUDA device (not --device cpu)")
    if args.gpus and args.ray:
        return _usage("--gpus and --ray do not mix: Ray gives each task its GPU")
    try:
        if args.ray:
            import_ray()
        tasks, notes = discover(args.tasks)
        # the bench's one resolution; with Ray the GPUs are on the cluster, not necessarily here: ``auto``
        # means CUDA when this host sees a GPU, and ``--device cuda`` uses a cluster's GPUs from a CPU-only head
        device = resolve_device(args.device, gpus_elsewhere=bool(args.ray))
        gpus = None if args.ray else _gpus(device, args.gpus)
    except (BenchError, EvaluationError, RayUnavailable) as error:
        return _usage(str(error))
    for note in notes:
        print(note, flush=True)
    out: Path = args.out.resolve()
    try:  # the flags alone: each task's run lays them over its own config
        guard = guard_settings(args)
    except GuardPolicyError as error:
        return _usage(str(error))
    problem = _explore_problem(args, stored_settings(out))
    if problem:
        return _usage(problem)
    options = _options(args, out, device, gpus, guard)
    workers = f"Ray at {args.ray}" if args.ray else f"{len(gpus) if gpus else args.workers} worker(s)"
    label = guard_label(options.guard or "default (or [guard] policy)", options.relax, options.refuse)
    print(
        f"bench: {len(tasks)} task(s) · {workers} on {device} · {out} · {label}{_explore_label(options)}",
        flush=True,
    )
    progress = make_progress(args.progress, len(tasks), sys.stdout, options.rounds)
    try:
        backend = None
        if args.ray:
            from engine.bench.ray_backend import run_on_ray

            backend = run_on_ray
        failures = Bench(tasks, options, progress, backend).run()
    finally:
        progress.close()
    rows = [task_row(out, task, options.rounds, options.explore, options.beam) for task in tasks]
    write_csv(rows, out / "summary.csv")
    write_json(rows, out / "summary.json")
    print("", flush=True)
    print(format_table(rows), flush=True)
    print(f"\nsummary: {out / 'summary.csv'} · {out / 'summary.json'}", flush=True)
    try:
        plots = write_plots(rows, out)
        print("plots: " + " · ".join(str(p) for p in plots), flush=True)
    except ImportError:
        print(f"plots: skipped ({PLOTS_HINT})", flush=True)
    return EXIT_ERROR if failures else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m engine.cli.bench …``: the bench command alone."""
    parser = OneLineParser(prog="cudaforge bench")
    add_arguments(parser)
    return bench_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
