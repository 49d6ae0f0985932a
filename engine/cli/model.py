"""``cudaforge profile`` / ``extract`` / ``apply``: from a user's own model to tasks and back (ARCHITECTURE.md §9).

Exit codes: 0 done; 1 (``apply``) a kernel or the whole model with the kernels is not correct, so nothing
was replaced or exported; 2 bad input (a model, inputs, dtype, flag or output folder that cannot be used,
said in one line; or, in ``apply``, a task or the model failing on its own in the evaluation's sandbox);
3 cudaforge's own fault (a harness error in an evaluation, the model process dying).
Nothing is written half-way: ``--json``, the extraction folder and the export appear whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine.cli.args import int_at_least, integer, number, positive_float
from engine.cli.guard import add_guard_flags, guard_settings
from engine.config import COMPILE_MODES, SANDBOX_MODES, ConfigError, load_config
from engine.eval.options import EvalOptions, EvaluationError, resolve_device
from engine.guard.policy import GuardPolicyError
from engine.model.spec import ModelError, ModelSpec, build_spec

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        help="a KernelBench FILE.py, FILE.py:factory (a callable returning the nn.Module) or package.module:callable "
        "(e.g. torchvision.models:resnet50)",
    )
    parser.add_argument("--inputs", metavar="FILE.py:FUNCTION", help="a function returning an example batch "
                        "(a tensor, a tuple/list of arguments, or a dict of keyword arguments)")  # fmt: skip
    parser.add_argument("--input-shape", action="append", metavar="DIMS[:DTYPE]",
                        help="an example input drawn at random, e.g. 64,3,224,224 or 8,1024:int64 (repeatable)")  # fmt: skip
    parser.add_argument("--dtype", default=None, help="fp32 (default), bf16 or fp16: weights and floating inputs cast to it")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when there is one")
    parser.add_argument("--seed", type=integer, default=0, help="seed for the weights and inputs (default 0)")


def model_spec(args: argparse.Namespace) -> ModelSpec:
    """The checked spec of the model flags; ModelError (or EvaluationError for the device) says what is wrong.
    The command's one device resolution: the spec's device is the one its evaluations use."""
    device = resolve_device(args.device)
    return build_spec(args.model, inputs=args.inputs, input_shapes=args.input_shape, dtype=args.dtype, device=device, seed=args.seed)


def _fail(command: str, message: str, code: int = EXIT_USAGE) -> int:
    print(f"cudaforge {command}: {message}", file=sys.stderr)
    return code


def _progress(command: str) -> Any:
    return lambda text: print(f"cudaforge {command}: {text} …", file=sys.stderr, flush=True)


def write_atomically(path: Path, text: str) -> None:
    """``text`` at ``path``, whole or not at all (a temporary file beside it, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def register(subparsers: argparse._SubParsersAction) -> None:
    profile = subparsers.add_parser("profile", help="where a model's time goes, per module, with headroom",
                                    description="Profile a model: device time per module path (self and total), "
                                    "calls, first-call shapes, and each module's time over its hardware floor.")  # fmt: skip
    add_model_flags(profile)
    profile.add_argument("--json", type=Path, metavar="FILE", help="write the whole profile as JSON")
    profile.add_argument("--min-share", type=number, default=0.01, help="table rows: modules with at least this share (default 0.01)")
    profile.add_argument("--passes", type=int_at_least(1), default=3, help="profiled forwards averaged (default 3)")
    profile.set_defaults(func=_stoppable(run_profile, "profile"))

    extract = subparsers.add_parser("extract", help="the heaviest modules of a model as KernelBench tasks",
                                    description="Write the K heaviest modules (identical ones once) as KernelBench "
                                    "tasks in OUT/tasks, with OUT/manifest.json and OUT/profile.json.")  # fmt: skip
    add_model_flags(extract)
    extract.add_argument("--out", type=Path, required=True, help="a new or empty folder")
    extract.add_argument("--top", type=int_at_least(1), default=5, help="how many tasks (default 5)")
    extract.add_argument("--leaves", action="store_true", help="leaf modules only (single layers)")
    extract.add_argument("--path", action="append", metavar="MODULE", help="extract exactly this module's task (repeatable)")
    extract.set_defaults(func=_stoppable(run_extract, "extract"))

    apply = subparsers.add_parser("apply", help="swap kernels into a model, check the whole model, time it end to end",
                                  description="Replace modules by kernels (their ModelNew), check each kernel against "
                                  "its task and the whole model against the original, and time it end to end.")  # fmt: skip
    add_model_flags(apply)
    apply.add_argument("--kernel", action="append", default=[], metavar="PATH_OR_TASK=KERNEL.py",
                       help="a module path (blocks.0), a task file (OUT/tasks/block.py) or a task name of --tasks, "
                       "and the kernel file for it (repeatable)")  # fmt: skip
    apply.add_argument("--from-session", action="append", default=[], metavar="SESSION[:ITER]",
                       help="the kernel of a session's best correct iteration (or ITER) for the task of that session")  # fmt: skip
    apply.add_argument("--tasks", type=Path, metavar="DIR", help="the folder cudaforge extract wrote (for task names; "
                       "the report is kept there as apply.json)")  # fmt: skip
    apply.add_argument("--sessions-dir", type=Path, default=None, help="sessions root for --from-session names")
    apply.add_argument("--compile-baseline", action="append", choices=COMPILE_MODES, metavar="MODE",
                       help="also time torch.compile of the model (default, max-autotune) beside eager")  # fmt: skip
    apply.add_argument("--export", type=Path, metavar="FILE.py", help="write a drop-in module with optimize(model)")
    apply.add_argument("--verify", action="store_true", help="with --export: import the written file again in a fresh "
                       "sandboxed worker and check the whole model through it")  # fmt: skip
    apply.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    apply.add_argument("--trials", type=int_at_least(1), default=None, help="correctness trials (default [eval] trials)")
    apply.add_argument("--timing-trials", type=int_at_least(1), default=None, help="timed calls per model (default [eval] timing_trials)")
    apply.add_argument("--timeout", type=positive_float, default=None, help="seconds allowed for each stage")
    apply.add_argument("--sandbox", choices=SANDBOX_MODES, default=None)
    add_guard_flags(apply)
    apply.set_defaults(func=_stoppable(run_apply, "apply"))


def _stoppable(command: Any, name: str) -> Any:
    """``command`` that Ctrl-C, a hang-up or SIGTERM stops with one line and exit 128 + the signal. These
    commands keep nothing to resume, so the first signal stops them where they are (the handlers of
    engine/cli/interrupts.py, installed even where the shell started us with SIGINT ignored): the model
    process is killed with them (engine.model.client), an evaluation's worker with its process group,
    and nothing is written half-way (every output appears whole, at the end). A second one leaves at once."""

    def run(args: argparse.Namespace) -> int:
        from engine.cli.interrupts import Interrupts

        interrupts = Interrupts().install()
        interrupts.raise_in_main = True
        try:
            return command(args)
        except KeyboardInterrupt:
            what = {2: "Ctrl-C", 1: "hang-up", 15: "SIGTERM"}.get(interrupts.signum or 2, "a signal")
            print(f"cudaforge {name}: stopped ({what}); nothing was written", file=sys.stderr)
            return interrupts.exit_code or EXIT_INTERRUPTED
        finally:
            interrupts.restore()

    return run


def run_profile(args: argparse.Namespace) -> int:
    from engine.model.client import run_job
    from engine.model.tables import profile_table

    try:
        spec = model_spec(args)
        result = run_job("profile", spec, _progress("profile"), passes=max(1, args.passes))
    except (ModelError, EvaluationError) as error:
        return _fail("profile", str(error))
    profile = result["profile"]
    if args.json:
        write_atomically(args.json, json.dumps(profile, indent=1))
    print(profile_table(profile, args.min_share))
    return EXIT_OK


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ModelError(f"--out {out} exists and is not an empty folder: choose a new one")


def manifest_of(spec: ModelSpec, result: dict[str, Any]) -> dict[str, Any]:
    tasks = []
    for task in result["tasks"]:
        entry = {k: v for k, v in task.items() if k != "source"}
        entry["file"] = f"tasks/{task['name']}.py"
        tasks.append(entry)
    return {
        "model": spec.target, "spec": spec.to_dict(), "device": spec.device, "gpu": result["profile"].get("gpu"),
        "weights": "key K of a task's Model.state_dict() is the model's state_dict key PREFIX + K, per path",
        "tasks": tasks, "skipped": result["skipped"], "seconds": result["seconds"],
    }  # fmt: skip


def run_extract(args: argparse.Namespace) -> int:
    from engine.model.client import run_job
    from engine.model.tables import extraction_table

    try:
        if args.top < 1:
            raise ModelError("--top must be at least 1")
        _check_out(args.out)
        spec = model_spec(args)
        result = run_job("extract", spec, _progress("extract"), top=args.top, leaves=args.leaves, paths=args.path or [])
    except (ModelError, EvaluationError) as error:
        return _fail("extract", str(error))
    manifest = manifest_of(spec, result)
    staging = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.", dir=args.out.parent if args.out.parent.exists() else None))
    try:
        (staging / "tasks").mkdir()
        for task in result["tasks"]:
            (staging / "tasks" / f"{task['name']}.py").write_text(task["source"], encoding="utf-8")
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        (staging / "profile.json").write_text(json.dumps(result["profile"], indent=1), encoding="utf-8")
        if args.out.exists():
            args.out.rmdir()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(args.out))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(extraction_table(manifest))
    print(f"\nwrote {len(result['tasks'])} task(s) to {args.out / 'tasks'} and {args.out / 'manifest.json'}")
    if result["tasks"]:
        first = args.out / "tasks" / f"{result['tasks'][0]['name']}.py"
        print(f"next: cudaforge new {first}   (or: cudaforge run {first} --headless --auto-approve)")
    return EXIT_OK


def _choices(args: argparse.Namespace) -> list[Any]:
    from engine.model.apply import KernelChoice, choice_for_task_file

    choices = []
    manifest = json.loads((args.tasks / "manifest.json").read_text()) if args.tasks else None
    names = {t["name"]: t for t in (manifest or {}).get("tasks", [])}
    for text in args.kernel:
        target, sep, kernel = text.rpartition("=")
        if not sep or not target or not kernel:
            raise ModelError(f"--kernel {text!r} is not PATH_OR_TASK=KERNEL.py")
        kernel_path = Path(kernel)
        if not kernel_path.is_file():
            raise ModelError(f"--kernel {text!r}: no such kernel file: {kernel_path}")
        source = kernel_path.read_text()
        if target.endswith(".py") or Path(target).is_file():
            if not Path(target).is_file():
                raise ModelError(f"--kernel {text!r}: no such task file: {target}")
            choices.append(choice_for_task_file(target, Path(target), source, kernel_path.name))
        elif target in names:
            choices.append(KernelChoice(target, "fingerprint", names[target]["fingerprint"], source, kernel_path.name))
        else:
            choices.append(KernelChoice(target, "path", target, source, kernel_path.name))
    choices += [_session_choice(text, args.sessions_dir) for text in args.from_session]
    if not choices:
        raise ModelError("name at least one kernel: --kernel PATH_OR_TASK=KERNEL.py or --from-session SESSION[:ITER]")
    return choices


def _session_choice(text: str, root: Path | None) -> Any:
    from engine.model.apply import KernelChoice
    from engine.model.taskgen import read_fingerprint
    from sessions.errors import SessionError
    from sessions.export import choose_iteration
    from sessions.repo import SessionRepo

    name, _, number = text.partition(":")
    try:
        with SessionRepo.open(name, root) as repo:
            item = choose_iteration(repo, int(number) if number else None, None)
            task_source = repo.task_source
    except (SessionError, ValueError) as error:
        raise ModelError(f"--from-session {text!r}: {error}") from None
    if item.status != "correct":
        raise ModelError(f"--from-session {text!r}: iteration {item.number} is {item.status}, not correct")
    stamp, intact = read_fingerprint(task_source)
    if stamp is None or not intact:
        raise ModelError(f"--from-session {text!r}: the session's task.py is not a task cudaforge extract wrote (or was edited)")
    return KernelChoice(f"{name}#{item.number}", "fingerprint", stamp, item.kernel_source, f"{name}_{item.number}.py")


def eval_options(args: argparse.Namespace, device: str) -> EvalOptions:
    """The evaluations' options: ``device`` is the spec's, resolved once by :func:`model_spec`."""
    overrides: dict[str, Any] = {}
    if args.trials:
        overrides["trials"] = args.trials
    if args.timing_trials:
        overrides["timing_trials"] = args.timing_trials
    if args.timeout:
        overrides["timeouts"] = {name: args.timeout for name in ("start", "setup", "build", "check", "time")}
    if args.compile_baseline:
        overrides["compile_baselines"] = list(dict.fromkeys(args.compile_baseline))
    config = load_config(overrides={"eval": overrides})
    options = EvalOptions.from_config(config, device, guard=guard_settings(args, config))
    if args.sandbox:
        options.sandbox = args.sandbox
    return options


def run_apply(args: argparse.Namespace) -> int:
    from engine.model import wholemodel
    from engine.model.apply import apply
    from engine.model.tables import apply_table

    if args.verify and not args.export:
        return _fail("apply", "--verify checks the file --export writes: give --export FILE.py too")
    try:
        spec = model_spec(args)
        choices = _choices(args)
        options = eval_options(args, spec.device)
        report, swaps, keywords, whole_options = apply(spec, choices, options, _progress("apply"))
    except (ModelError, EvaluationError, ConfigError, GuardPolicyError, OSError) as error:
        return _fail("apply", str(error))
    if report.ok and args.export:
        text = wholemodel.export(spec, swaps, verified=f"Whole-model check passed: {report.whole and report.whole['status']}.")
        if args.verify:
            report = _verify_export(report, spec, text, keywords, whole_options)
        if report.ok:
            write_atomically(args.export, text)
            report.exported = str(args.export)
    text = json.dumps(report.to_dict(), indent=1, default=str)
    if args.json:
        write_atomically(args.json, text)
    if args.tasks:  # the model folder keeps its last apply (the workbench's model view and the report read it)
        write_atomically(args.tasks / "apply.json", text)
    print(apply_table(report.to_dict()))
    if report.ok:
        return EXIT_OK
    return {"task": EXIT_USAGE, "harness": EXIT_HARNESS}.get(report.failed or "kernel", EXIT_REFUSED)


def _verify_export(report: Any, spec: ModelSpec, text: str, keywords: list[str], options: EvalOptions) -> Any:
    """The export's own text, run as the whole-model candidate in a fresh worker (no timing), at the
    whole-model check's options (its bar from the model's own noise)."""
    import dataclasses

    from engine.eval.evaluate import evaluate
    from engine.model import wholemodel

    _progress("apply")("verifying the export in a fresh sandboxed worker")
    candidate = wholemodel.candidate_from_export(spec, text, keywords)
    check = dataclasses.replace(options, static_guard=False, do_timing=False, compile_baselines=(), shapes=False)
    result = evaluate(wholemodel.whole_task(spec, keywords), candidate, check, task_name="whole_model", kernel_name="export.py")
    if not result.ok:
        from engine.model.apply import whose

        report.failed = whose(result)
        report.failure = f"the written export does not pass the whole-model check: {result.status}: {(result.messages or [''])[0]}"
    return report
