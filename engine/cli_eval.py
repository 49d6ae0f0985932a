"""``cudaforge eval TASK.py KERNEL.py``: one evaluation from the command line.

Exit codes (a contract): 0 only when the kernel is correct, 1 when it was evaluated and is not,
2 for usage errors (missing files, a broken task, no CUDA when ``--device cuda`` was asked for).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli_args import int_at_least, positive_float
from engine.evaluate import EvalEvent, EvalOptions, EvaluationError, StageTimeouts, evaluate_files
from engine.result import EvalResult
from engine.tasks import TaskError, load_task
from engine.timing import TimingPlan
from sessions.secrets import Scrubber

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate one kernel against a task: build, check, time",
        description="Build KERNEL.py, check it against the reference Model in TASK.py on fresh random inputs, "
        "and time both. Exit 0 only when correct.",
    )
    parser.add_argument(
        "task", type=Path, help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"
    )
    parser.add_argument("kernel", type=Path, help="candidate file defining ModelNew")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when available"
    )
    parser.add_argument("--json", action="store_true", help="print the EvalResult as JSON on stdout")
    parser.add_argument("--trials", type=int_at_least(1), default=5, help="correctness trials (default 5)")
    parser.add_argument(
        "--timing-trials", type=int_at_least(1), default=100, help="timed calls per model (default 100)"
    )
    parser.add_argument("--timeout", type=positive_float, default=None, help="seconds allowed for each stage")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--atol-fp32", type=positive_float, default=None, help="tolerance for float32 outputs"
    )
    parser.add_argument(
        "--relax",
        action="append",
        default=[],
        metavar="RULE",
        help="report but do not enforce this guard rule (repeatable, or comma-separated)",
    )
    parser.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "landlock", "off"),
        default=None,
        help="what confines the candidate (default: [eval] sandbox of the config, else auto)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="stream the build log and stage changes to stderr"
    )
    parser.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    try:
        load_task(args.task, describe=False)
    except TaskError as error:
        print(f"cudaforge eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not args.kernel.is_file():
        print(f"cudaforge eval: no such kernel file: {args.kernel}", file=sys.stderr)
        return EXIT_USAGE
    timeouts = StageTimeouts()
    if args.timeout:
        timeouts = StageTimeouts(**{name: args.timeout for name in vars(timeouts)})
    options = EvalOptions(
        device=args.device,
        trials=args.trials,
        seed=args.seed,
        timing=TimingPlan(min_trials=args.timing_trials),
        do_timing=not args.no_timing,
        timeouts=timeouts,
        tolerances={"float32": args.atol_fp32} if args.atol_fp32 else {},
        relax=tuple(r.strip() for value in args.relax for r in value.split(",") if r.strip()),
        sandbox=args.sandbox or _configured_sandbox(),
    )
    on_event = _print_event if args.verbose else None
    if not args.json and not args.verbose:
        print(f"evaluating {args.kernel} against {args.task} …", file=sys.stderr)
    try:
        result = evaluate_files(args.task, args.kernel, options, on_event=on_event)
    except EvaluationError as error:
        print(f"cudaforge eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    if result.sandbox == "off":
        print(
            "cudaforge eval: warning: the sandbox is off; candidate code ran with your full rights",
            file=sys.stderr,
        )
    scrub = Scrubber().text  # second line behind the sandbox: a leaked key never reaches the terminal
    if args.json:
        print(scrub(result.to_json()))
    else:
        print(scrub(format_summary(result, args.kernel.name)))
    return EXIT_CORRECT if result.ok else EXIT_NOT_CORRECT


def _configured_sandbox() -> str:
    """``[eval] sandbox`` from the config files, ``auto`` when none says otherwise."""
    try:
        from engine.config import load_config

        return load_config().eval.sandbox
    except Exception:  # noqa: BLE001 - a broken config is reported by the commands that need it
        return "auto"


_SCRUB = Scrubber().text


def _print_event(event: EvalEvent) -> None:
    if event.kind == "stage":
        print(f"── {event.stage}", file=sys.stderr)
    elif event.kind == "log":
        print(f"   {_SCRUB(event.text)}", file=sys.stderr)


def format_summary(result: EvalResult, kernel_label: str = "kernel") -> str:
    """A few readable lines: the verdict, then one line per stage reached, then what went wrong."""
    lines = [
        f"{result.task} · {kernel_label} on {result.device}: {result.status.upper().replace('_', ' ')} (stage {result.stage})"
    ]
    build = result.build
    if build.extensions:
        paths = ", ".join(sorted({e.path for e in build.extensions}))
        state = "cached" if build.cached else "built"
        lines.append(
            f"  build  {build.seconds or 0:.1f} s · {len(build.extensions)} extension(s), {paths} path, {state}"
        )
    if result.trials:
        passed = sum(t.passed for t in result.trials)
        worst = max((t.max_abs_error or 0.0) for t in result.trials)
        lines.append(f"  check  {passed}/{len(result.trials)} trials passed · max abs error {worst:.3g}")
    if result.timing:
        c, r = result.timing.candidate, result.timing.reference
        lines.append(
            f"  time   kernel {c.median_ms:.4f} ms (IQR {c.iqr_ms:.4f}, n={c.n}) · reference {r.median_ms:.4f} ms"
            f" → speedup {result.speedup:.2f}×"
        )
    if result.sandbox:
        lines.append(f"  sandbox {result.sandbox}")
    for message in result.messages:
        lines.append(f"  ! {message}")
    for flag in result.flags:
        lines.append(f"  flag: {flag}")
    for finding in result.findings:
        lines.append(
            f"  {finding.get('severity', '?')}: [{finding.get('rule')}] line {finding.get('line')}: {finding.get('message')}"
        )
    if result.status == "compile_error":
        errors = [line for line in build.log.splitlines() if "error" in line.lower()][:20]
        if errors:
            lines.append("  compiler errors:")
            lines.extend(f"    {line}" for line in errors)
    elif result.status in ("runtime_error", "timeout") and result.stderr_tail:
        lines.append("  last output of the worker:")
        lines.extend(f"    {line}" for line in result.stderr_tail.splitlines()[-10:])
    return "\n".join(lines)
