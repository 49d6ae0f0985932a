"""``cudaforge eval TASK.py KERNEL.py``: one evaluation from the command line.

Exit codes (a contract): 0 only when the kernel is correct, 1 when it was evaluated and is not,
2 for usage errors (missing files, a broken task, no CUDA when ``--device cuda`` was asked for),
including a task whose reference ``Model`` fails on its own inputs (``task_error`` in the result),
3 when cudaforge itself failed (``harness_error``: no verdict on the kernel; ARCHITECTURE.md §3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.cli.args import int_at_least, integer, positive_float
from engine.cli.guard import add_guard_flags, guard_settings
from engine.config import COMPILE_MODES, SANDBOX_MODES, ConfigError, load_config
from engine.eval import stagetimes
from engine.eval.baselines import speedup_against
from engine.eval.evaluate import check_task, evaluate_files
from engine.eval.options import EvalEvent, EvalOptions, EvaluationError, resolve_device
from engine.eval.plausibility import summary_line
from engine.eval.result import EvalResult
from engine.eval.shapes import summary as shapes_summary
from engine.guard.policy import GuardPolicyError
from engine.tasks import TaskError, check_task_source
from sessions.secrets import Scrubber

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3


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
    # Flags default to None so that unset ones leave the config's [eval] values (defaults < user file
    # < ./cudaforge.toml < flags, as for every command).
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default=None, help="default [eval] device: auto"
    )
    parser.add_argument("--json", action="store_true", help="print the EvalResult as JSON on stdout")
    parser.add_argument("--trials", type=int_at_least(1), help="correctness trials (default [eval] trials: 5)")
    parser.add_argument(
        "--timing-trials", type=int_at_least(1), help="timed calls per model (default [eval] timing_trials: 100)"
    )
    parser.add_argument("--timeout", type=positive_float, default=None, help="seconds allowed for each stage")
    parser.add_argument(
        "--build-budget", type=positive_float, default=None, metavar="SECONDS",
        help="seconds all builds of one evaluation may take together (default [eval] build_budget_s: 180)",
    )  # fmt: skip
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument(
        "--shapes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also check correctness at perturbed sizes (default [eval] shapes: off)",
    )
    parser.add_argument("--seed", type=integer, help="default [eval] seed: 42")
    parser.add_argument(
        "--compile-baseline",
        action="append",
        choices=COMPILE_MODES,
        metavar="MODE",
        help="for a correct kernel, also time torch.compile of the reference in MODE (default, max-autotune;"
        " repeatable) beside eager and give the speedup against it (default [eval] compile_baselines: none)",
    )
    parser.add_argument(
        "--atol-fp32", type=positive_float, default=None, help="tolerance for float32 outputs"
    )
    parser.add_argument(
        "--sandbox",
        choices=SANDBOX_MODES,
        default=None,
        help="what confines the candidate (default: [eval] sandbox of the config, else auto)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="stream the build log and stage changes to stderr"
    )
    add_guard_flags(parser)
    parser.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    # The task is read, not imported: importing it here would load torch in this process too (2-3 s of a
    # one-shot evaluation); the worker imports and runs it first and reports a broken one as a task error.
    try:
        if not args.task.is_file():
            raise TaskError(f"no such task file: {args.task}")
        check_task_source(args.task.read_text(), str(args.task))
    except TaskError as error:
        print(f"cudaforge eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not args.kernel.is_file():
        print(f"cudaforge eval: no such kernel file: {args.kernel}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = load_config(overrides={"eval": eval_flag_overrides(args)})
        guard = guard_settings(args, config)
    except (ConfigError, GuardPolicyError) as error:
        print(f"cudaforge eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:  # the command's one device resolution (no CUDA for --device cuda: a usage error)
        options = EvalOptions.from_config(config, resolve_device(config.eval.device), guard=guard)
    except EvaluationError as error:
        print(f"cudaforge eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    options.do_timing = not args.no_timing
    if args.sandbox:
        options.sandbox = args.sandbox
    from engine.eval import keptserver

    keptserver.for_one_shot_command()  # its fork server is kept for the next command (engine.eval.keptserver)
    on_event = _print_event if args.verbose else None
    if not args.json and not args.verbose:
        print(f"evaluating {args.kernel} against {args.task} …", file=sys.stderr)
    try:
        result = evaluate_files(args.task, args.kernel, options, on_event=on_event)
    except EvaluationError as error:
        print(f"cudaforge eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    if result.stage == "guard" and not result.task_error:
        result = _task_error_first(args.task, options, result)
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
    finish_headers("cudaforge eval")
    if result.task_error:
        return EXIT_USAGE
    if result.harness_failed:
        return EXIT_HARNESS
    return EXIT_CORRECT if result.ok else EXIT_NOT_CORRECT


def finish_headers(command: str) -> None:
    """After the verdict: a precompiled header this evaluation asked for is made before a one-shot command
    exits (it ends with this process); said on stderr, and Ctrl-C leaves without it."""
    from engine.eval.build import makers

    if not makers.running():
        return
    print(
        f"{command}: making the precompiled torch header for these compiler flags (once per machine, about a "
        "minute), so later builds take seconds; Ctrl-C skips it",
        file=sys.stderr,
        flush=True,
    )
    try:
        makers.wait()
    except KeyboardInterrupt:
        print(f"{command}: header skipped; a later build asks for it again", file=sys.stderr)


def eval_flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[eval]`` overrides of the evaluation flags that were given (shared by ``eval``/``check``)."""
    out: dict[str, Any] = {}
    flags = (("device", "device"), ("trials", "trials"), ("timing_trials", "timing_trials"), ("seed", "seed"), ("build_budget", "build_budget_s"))
    for flag, key in flags:
        if getattr(args, flag, None) is not None:
            out[key] = getattr(args, flag)
    if getattr(args, "timeout", None):
        out["timeouts"] = {name: args.timeout for name in ("start", "setup", "build", "check", "time")}
    if getattr(args, "atol_fp32", None):
        out["tolerances"] = {"float32": args.atol_fp32}
    if getattr(args, "shapes", None) is not None:
        out["shapes"] = args.shapes
    if getattr(args, "compile_baseline", None):
        out["compile_baselines"] = list(dict.fromkeys(args.compile_baseline))
    return out


def baseline_text(speedup: float | None, baseline: dict[str, Any]) -> str:
    """One torch.compile baseline as a line: the speedup against it, and both times it came from."""
    if baseline.get("failed"):
        return f"not measured ({baseline['failed']})"
    if not baseline.get("compiled_matches"):
        return f"compiled output differs from eager ({baseline.get('mismatch') or 'mismatch'}); no speedup"
    against = speedup_against(speedup, baseline)
    times = f"compiled {baseline['compiled_ms']:.4f} ms vs eager {baseline['eager_ms']:.4f} ms, same process"
    return (f"speedup {against:.2f}× · " if against is not None else "") + times


def _task_error_first(task: Path, options: EvalOptions, refused: EvalResult) -> EvalResult:
    """A kernel the static guard refused never reached the worker's reference check: run it alone,
    so a broken task is still reported as the task's error (exit 2), not hidden behind the refusal."""
    checked = check_task(task.read_text(), options, task_name=task.stem)
    if not checked.task_error:
        return refused
    checked.findings, checked.kernel_sha256 = refused.findings, refused.kernel_sha256
    return checked


_SCRUB = Scrubber().text


def _print_event(event: EvalEvent) -> None:
    if event.kind == "stage":
        print(f"── {event.stage}", file=sys.stderr)
    elif event.kind == "log":
        print(f"   {_SCRUB(event.text)}", file=sys.stderr)


def failed_side_text(result: EvalResult) -> str:
    """Which side failed, for the verdict line: the task's reference or the candidate kernel."""
    if result.ok:
        return ""
    if result.harness_failed:
        kind = (result.harness_fault or {}).get("kind", "?")
        return f" · cudaforge's own fault ({kind}), NOT a verdict on the kernel: rerun it; `cudaforge doctor` checks the machine"
    if result.task_error or result.failed_side == "reference":
        return " · the REFERENCE failed: a task error, not the kernel's fault"
    return " · the candidate failed"


def format_summary(result: EvalResult, kernel_label: str = "kernel") -> str:
    """A few readable lines: the verdict, then one line per stage reached, then what went wrong."""
    lines = [
        f"{result.task} · {kernel_label} on {result.device}: {result.status.upper().replace('_', ' ')} (stage {result.stage})"
        + failed_side_text(result)
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
    shapes = shapes_summary(result.shapes)
    if result.timing:
        c, r = result.timing.candidate, result.timing.reference
        lines.append(
            f"  time   kernel {c.median_ms:.4f} ms (IQR {c.iqr_ms:.4f}, n={c.n}) · reference {r.median_ms:.4f} ms"
            f" → speedup {result.speedup:.2f}×" + (f" · {shapes}" if shapes else "")
        )
    elif shapes:
        lines.append(f"  shapes {shapes}")
    for mode, baseline in result.baselines.items():
        lines.append(f"  vs torch.compile ({mode}): {baseline_text(result.speedup, baseline)}")
    if result.hardware_floor:
        lines.append(f"  floor  {summary_line(result.hardware_floor)}")
    stages = stagetimes.line(result.durations)
    if stages:
        lines.append(f"  stages {stages}")
    lines.append(f"  {guard_line(result)}")
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


def guard_line(result: EvalResult) -> str:
    """The policy, every changed rule, and the own-kernel share when measured (``guard default · share 42%``)."""
    from engine.guard.policy import guard_label

    text = guard_label(result.guard_policy, result.relaxed_rules, result.guard_refuse)
    share = result.kernel_share
    if share and "share" in share:
        text += f" · own-kernel share {share['share']:.0%} ({share['method']})"
    ablation = (share or {}).get("ablation")
    if ablation:
        text += f" · own kernels {ablation['outcome']} (ablation)"
    return text
