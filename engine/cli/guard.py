"""Guard flags shared by ``eval``, ``check``, ``run``, ``bench``, ``new`` and ``open``, and ``cudaforge check``.

``cudaforge check TASK.py KERNEL.py`` runs the static guard alone: no build, no GPU (``--device cuda``
only selects the CUDA rules; it reads the source). Exit codes (a contract, the same verdicts as
``eval``): 0 when ``eval`` would go on to build, 1 when it would refuse or the kernel would not build
because it is not Python that parses (``eval``: a compile error, exit 1), 2 for usage errors (missing
files, unknown rule ids or policy) and for a task that does not parse or lacks its names (``eval``:
a task error, exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.config import ConfigError, load_config
from engine.guard.policy import GuardSettings
from engine.guard.rules import LEFT_TO_BUILD, POLICIES, GuardPolicyError

EXIT_WOULD_BUILD, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def add_guard_flags(parser: argparse.ArgumentParser) -> None:
    """``--guard default|strict``, ``--relax RULE`` and ``--refuse RULE`` (both repeatable)."""
    parser.add_argument(
        "--guard",
        choices=POLICIES,
        default=None,
        help="guard policy: default (KernelBench: PyTorch ops beside own kernels warn) or strict "
        "(full replacement); default: [guard] policy in the config, else default",
    )
    parser.add_argument(
        "--relax", action="append", default=None, metavar="RULE", help="turn a guard rule off (repeatable)"
    )
    parser.add_argument(
        "--refuse",
        action="append",
        default=None,
        metavar="RULE",
        help="turn a guard warning into a refusal (repeatable)",
    )


def guard_settings(args: argparse.Namespace, config: Any = None) -> GuardSettings:
    """The run's guard settings, made once by the command and then carried as they are
    (``EvalOptions.guard``): config ``[guard]`` (when given) overlaid by the flags, by the one rule of
    :func:`guard_overrides`. Raises ``GuardPolicyError`` on unknown ids."""
    section = getattr(config, "guard", None)
    base = {key: value for key in ("policy", "relax", "refuse") if (value := getattr(section, key, None)) is not None}
    table = guard_overrides(args, base)
    return GuardSettings(table.get("policy") or "default", tuple(table.get("relax", ())), tuple(table.get("refuse", ())))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="run the static guard alone (no build, no GPU): exit 0 would build, 1 refused",
        description="Read KERNEL.py and report what the static guard finds, as eval would before building. "
        "Nothing is built or run; --device cuda works without a GPU.",
    )
    parser.add_argument("task", type=Path, help="KernelBench-format task file")
    parser.add_argument("kernel", type=Path, help="candidate file defining ModelNew")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cuda", help="which backend's rules (default cuda)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdict and findings as JSON")
    add_guard_flags(parser)
    parser.set_defaults(func=run_check)


def check_files(task: Path, kernel: Path, device: str, settings: GuardSettings) -> dict[str, Any]:
    """The verdict eval's guard stage would reach, with findings in eval's shape (``source: static``)."""
    from engine.eval.evaluate import static_findings

    findings = static_findings(kernel.read_text(encoding="utf-8"), device, settings)
    blocking = [f for f in findings if f["severity"] == "refuse" and not f["relaxed"]]
    refusals = [f for f in blocking if f["rule"] not in LEFT_TO_BUILD]
    # a kernel that does not parse or defines no ModelNew is eval's compile error, not a guard refusal
    unbuildable = [f for f in findings if f["rule"] in LEFT_TO_BUILD and f["severity"] == "refuse"]
    return {
        "task": str(task),
        "kernel": str(kernel),
        "device": device,
        "guard_policy": settings.policy,
        "guard_refuse": list(settings.refuse),
        "relaxed_rules": sorted(set(settings.relax) | {f["rule"] for f in findings if f["relaxed"]}),
        "refused": bool(refusals),
        "would_build": not refusals and not unbuildable,
        "findings": findings,
    }


def run_check(args: argparse.Namespace) -> int:
    for label, path in (("task", args.task), ("kernel", args.kernel)):
        if not path.is_file():
            print(f"cudaforge check: no such {label} file: {path}", file=sys.stderr)
            return EXIT_USAGE
    from engine.tasks import TaskError, check_task_source

    try:
        check_task_source(args.task.read_text(encoding="utf-8"), str(args.task))  # as eval does first
    except (TaskError, UnicodeDecodeError) as error:
        print(f"cudaforge check: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = load_config()
    except ConfigError as error:  # as eval: a broken cudaforge.toml is a usage error, never ignored
        print(f"cudaforge check: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = guard_settings(args, config)
        verdict = check_files(args.task, args.kernel, args.device, settings)
    except (GuardPolicyError, ValueError) as error:
        print(f"cudaforge check: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(verdict, indent=2))
    else:
        if verdict["refused"]:
            state = "REFUSED"
        elif not verdict["would_build"]:
            state = "would NOT build (eval reports a compile error)"
        else:
            state = "would build"
        print(f"{args.kernel} ({settings.label()}, {args.device}): {state}")
        for f in verdict["findings"]:
            tag = f"{f['severity']}{', relaxed' if f['relaxed'] else ''}"
            print(f"  line {f['line']}: [{f['rule']}] ({tag}) {f['message']}")
    return EXIT_WOULD_BUILD if verdict["would_build"] else EXIT_REFUSED


def guard_overrides(args: argparse.Namespace, stored: dict[str, Any]) -> dict[str, Any]:
    """The ``guard`` table of config overrides: a resumed session's stored table, then the flags on top
    (``--guard`` replaces the policy; ``--relax``/``--refuse`` add to the lists). The one merge rule of
    flags over a guard table: :func:`guard_settings` and the loop's config (``loop_config``) both use it."""
    out: dict[str, Any] = {k: (list(v) if isinstance(v, list) else v) for k, v in stored.items()}
    if getattr(args, "guard", None):
        out["policy"] = args.guard
    for key in ("relax", "refuse"):
        extra = getattr(args, key, None) or []
        if extra:
            out[key] = list(dict.fromkeys([*out.get(key, []), *extra]))
    return out
