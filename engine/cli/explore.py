"""``cudaforge explore SESSION``: K ideas from one iteration, each on its own branch for R rounds.

The engine is ``engine.explore.runner``; this module wires it to the config, the agents, the terminal
and signals, as ``cudaforge run --headless`` does for one branch. Ctrl-C stops at the next stage
boundary, so the evaluation in flight is committed first. The same command again resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

from engine.batch.ray import RayUnavailable
from engine.cli.args import gpu_list, int_at_least, loop_config, model_name, positive_float, visible_gpus
from engine.cli.guard import add_guard_flags
from engine.cli.heartbeat import Heartbeat
from engine.cli.interrupts import Interrupts
from engine.config import ConfigError, sessions_root
from engine.eval.options import EvaluationError
from engine.events import Event, LLMToken
from engine.llm.bounded import DEFAULT_PER_PROVIDER
from engine.llm.errors import LLMError
from sessions.errors import SessionError, StaleLockWarning
from sessions.repo import SessionRepo

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "explore",
        help="explore K ideas from one iteration, each on its own branch",
        description=(
            "Ask the Judge for K different ideas about one iteration and pursue each on its own branch "
            "(explore/N-k) for R auto-approved rounds; --beam keeps only the best correct branches after "
            "every round. The same command resumes an interrupted exploration."
        ),
    )
    parser.add_argument("session", help="a session path or a name under the sessions root")
    parser.add_argument("--from", dest="start", type=int_at_least(0), help="the iteration to explore from (default: the best correct one, else the tip)")  # fmt: skip
    parser.add_argument("--branch", help="the branch that iteration is on (default: the current one)")
    parser.add_argument(
        "--width", type=int_at_least(1), required=True, help="ideas asked of the Judge, one branch each"
    )
    parser.add_argument("--rounds", type=int_at_least(1), required=True, help="rounds per branch")
    parser.add_argument(
        "--beam", type=int_at_least(1), help="after every round, only this many best correct branches go on"
    )
    parser.add_argument(
        "--max-cost", type=positive_float, help="stop once this many US dollars are spent (all branches)"
    )
    parser.add_argument("--max-tokens", type=int_at_least(1), help="stop once this many tokens are spent")
    parser.add_argument("--coder", type=model_name, help="provider/model of the Coder (scripted/DIR: DIR/branch-k per branch when present)")  # fmt: skip
    parser.add_argument("--judge", type=model_name, help="provider/model of the Judge")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), help="where kernels run")
    parser.add_argument(
        "--gpus", type=gpu_list, help="CUDA: the GPUs the branches share, e.g. 0,1 (default: all)"
    )
    parser.add_argument("--ray", metavar="ADDRESS", help="evaluate and profile as Ray tasks, over the cluster's hosts ('auto': a local Ray instance)")  # fmt: skip
    parser.add_argument("--llm-concurrency", type=int_at_least(1), default=DEFAULT_PER_PROVIDER,
                        help=f"LLM calls in flight at once per provider (default {DEFAULT_PER_PROVIDER})")  # fmt: skip
    parser.add_argument("--sessions-dir", type=Path, help="where sessions live")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every stage of every branch")
    add_guard_flags(parser)
    parser.set_defaults(func=explore_command)


def _usage(message: str) -> int:
    print(f"cudaforge explore: {message}", file=sys.stderr)
    return EXIT_USAGE


def explore_command(args: argparse.Namespace) -> int:
    interrupts = Interrupts().install()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StaleLockWarning)
            return _explore(args, interrupts)
    finally:
        interrupts.restore()


def _explore(args: argparse.Namespace, interrupts: Interrupts) -> int:
    from engine.eval.options import resolve_device
    from engine.explore.loops import branch_loops
    from engine.explore.plan import ExploreSpec, plan_of_branch
    from engine.explore.runner import ExploreError, Explorer

    if args.max_cost is not None and args.max_cost < 0:
        return _usage("--max-cost must not be negative")
    if args.gpus and args.ray:
        return _usage("--gpus and --ray do not mix: Ray gives each evaluation its GPU")
    try:
        root = sessions_root(loop_config(argparse.Namespace()), args.sessions_dir)
        session = SessionRepo.open(args.session, root)
    except (ConfigError, SessionError) as error:
        return _usage(str(error))
    devices: Any = None
    heartbeat: Heartbeat | None = None
    try:
        source = args.branch or session.current_branch
        start = args.start
        left = None if args.branch else plan_of_branch(session.path, source)
        if left is not None:  # HEAD left on an exploration's branch (a kill mid-round): that exploration
            source, start = left.spec.source, left.spec.start if start is None else start
        if source not in session.branches():
            session.close()
            return _usage(f"the session has no branch {source!r}")
        config = loop_config(
            argparse.Namespace(**{**vars(args), "rounds": None}), session.settings(source).get("settings", {})
        )
        start = start if start is not None else _default_start(session, source)
        spec = ExploreSpec(
            start=start, source=source, width=args.width, rounds=args.rounds, beam=args.beam,
            max_cost_usd=args.max_cost, max_tokens=args.max_tokens,
        )  # fmt: skip
        printer = _printer(args.verbose)
        heartbeat = Heartbeat(_say)  # every branch's stage and time, so minutes of building are never silent

        def on_event(event: Event) -> None:
            heartbeat.on_event(event)
            printer(event)

        # the exploration's one resolution: the shared devices and every branch's loop take this value
        device = resolve_device(config.eval.device, gpus_elsewhere=bool(args.ray))
        devices = _devices(args, device)
        explorer = Explorer(session, spec, branch_loops(config, device), on_line=_say, on_event=on_event,
                            devices=devices, llm_concurrency=args.llm_concurrency)  # fmt: skip
    except (ConfigError, SessionError, ExploreError, LLMError, EvaluationError, RayUnavailable) as error:
        if heartbeat is not None:
            heartbeat.stop()
        if devices is not None:
            devices.close()
        session.close()
        return _usage(str(error))
    interrupts.attach(explorer.stop, lambda: "\ninterrupted: stopping once the stage in flight is committed (Ctrl-C again to leave now)",
                      lambda: f"\nleaving now: every committed iteration is kept (cudaforge explore {args.session} ... resumes)\n")  # fmt: skip
    _say(f"exploring {session.name} from iteration {start} of {source}: {spec.width} ideas × {spec.rounds} round(s)"
         + (f", beam {spec.beam}" if spec.beam else "") + f"; {_where(devices)}")  # fmt: skip
    try:
        summary = _run(explorer)
    except (ExploreError, SessionError, LLMError, EvaluationError) as error:
        print(f"cudaforge explore: {error}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        heartbeat.stop()  # type: ignore[union-attr]
        devices.close()
        session.close()
    print(format_summary(summary, session.name), flush=True)
    if args.json:
        args.json.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    if summary.outcome != "finished":
        return interrupts.exit_code or 130
    return EXIT_OK


def _run(explorer: Any) -> Any:
    """The exploration in a worker thread, the main thread free for signals."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            result.append(explorer.run())
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            errors.append(error)

    thread = threading.Thread(target=work, name="cudaforge-explore", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if errors:
        raise errors[0]
    return result[0]


def _devices(args: argparse.Namespace, device: str) -> Any:
    """What the branches' evaluations share on ``device`` (resolved): this machine's GPUs (or its CPU),
    or a Ray cluster."""
    from engine.explore.devices import SharedDevices

    if args.ray:
        from engine.batch.ray import import_ray

        import_ray()  # RayUnavailable, with the install hint, before anything starts
        from engine.explore.ray_devices import RayDevices

        return RayDevices(device, args.ray, workers=max(2, args.width))
    if args.gpus and device != "cuda":
        raise ConfigError("--gpus needs kernels on CUDA (--device cuda)")
    return SharedDevices(device, visible_gpus(device, args.gpus))


def _where(devices: Any) -> str:
    if getattr(devices, "address", None):
        return f"evaluations as Ray tasks at {devices.address}"
    if devices.device == "cuda":
        return f"GPU {','.join(map(str, devices.gpus))} shared (checks side by side, timings alone)"
    return "on the CPU (checks side by side, timings alone)"


def _default_start(session: SessionRepo, branch: str) -> int:
    best = session.best(branch)
    if best is not None:
        return best.number
    history = session.history(branch)
    if not history:
        raise ConfigError(f"branch {branch!r} has no iteration yet: run the seed first (cudaforge run)")
    return history[-1].number


_SAY_LOCK = threading.Lock()


def _say(line: str) -> None:
    """One whole line per call, from any branch's thread: ``print`` writes the text and its newline
    apart, so two branches saying something at once ran together on one line (and a bench reading
    the lines missed both)."""
    with _SAY_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _printer(verbose: bool) -> Any:
    """``-v``: every stage of every branch, each line naming its branch (the branches run at once, so
    the LLM's streamed tokens, which would interleave, are left out)."""
    from engine.cli.run import Printer

    printer = Printer(sys.stdout, verbose=True) if verbose else None

    def on_event(event: Event) -> None:
        if printer is None or isinstance(event, LLMToken):
            return
        text = printer.format(event)
        if text is not None:
            lines = printer.scrubber.text(text).splitlines()
            with printer.lock:
                for line in lines:
                    print(f"[{event.branch}] {line}", flush=True)

    return on_event


def _cost(usd: float | None) -> str:
    """A branch's cost: "unknown" where a call's model has no price, never $0 (README "Models")."""
    return "unknown" if usd is None else f"${usd:.4f}"


def _total_cost(usd: float | None, priced: float) -> str:
    """The exploration's cost as the headless run's total says it (engine.cli.run.total_line)."""
    if usd is not None:
        return f"${usd:.4f}"
    return f"cost unknown (${priced:.4f} priced)" if priced else "cost unknown"


def format_summary(summary: Any, session_name: str) -> str:
    """The table after an exploration: one row per branch, the best kernel and how to export it."""
    from sessions.message import format_speedup

    rows = [["branch", "state", "rounds", "best", "per call", "tokens", "cost", "idea / why it stopped"]]
    for b in summary.branches:
        note = b.idea if not b.why else f"{b.idea} — {b.why}"
        per_call = "—" if b.best_ms is None else f"{b.best_ms:.4g} ms"
        rows.append([b.name, b.state, str(b.rounds), format_speedup(b.best_speedup), per_call, str(b.tokens),
                     _cost(b.cost_usd), note[:90]])  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["", *("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)]
    lines.append(f"total: {summary.tokens} tokens · {_total_cost(summary.cost_usd, summary.priced_usd)}")
    used = summary.devices or {}
    if used.get("windows"):
        evaluations = used["evaluation_seconds"]
        ratio = f" ({evaluations / summary.wall_seconds:.2f}x)" if summary.wall_seconds > 0 else ""
        profiles = (used.get("seconds_by_part") or {}).get("profile") or 0.0
        profiled = f", the profiles {profiles:.1f} s" if profiles else ""
        lines.append(
            f"time: wall {summary.wall_seconds:.1f} s this run; the evaluations took {evaluations:.1f} s "
            f"in all{ratio}{profiled}; timings sharing a GPU: {used['alone_overlaps']}"
        )
    if summary.stopped:
        lines.append(f"stopped early: {summary.stopped}")
    if summary.outcome != "finished":
        lines.append("interrupted: run the same command again to resume")
    best = summary.best
    start = format_speedup(summary.start_speedup)
    if best is None:
        lines.append(f"best: no branch has a correct kernel yet (iteration {summary.spec.start}: {start})")
    elif getattr(summary, "no_gain", False):
        kernel = f" · {best.best_ms:.4g} ms per call" if best.best_ms is not None else ""
        lines.append(
            f"no branch beat iteration {summary.spec.start} ({start}) beyond the timings' spread: the strongest, "
            f"{best.name} iteration {best.best_iteration} · {format_speedup(best.best_speedup)}{kernel}, is no "
            f"better (ranked by {summary.ranked_by}); iteration {summary.spec.start} stays the best, nothing to export"
        )
    else:
        kernel = f" · {best.best_ms:.4g} ms per call" if best.best_ms is not None else ""
        lines.append(
            f"best: {best.name} iteration {best.best_iteration} · {format_speedup(best.best_speedup)}{kernel} "
            f"(iteration {summary.spec.start} was {start}; ranked by {summary.ranked_by})"
        )
        tied = [b for b in summary.branches if b.name in summary.within_spread]
        if tied:
            named = ", ".join(f"{b.name} ({b.best_ms:.4g} ms)" if b.best_ms is not None else b.name for b in tied)
            lines.append(
                f"within its timing spread: {named} (their per-call interquartile ranges overlap the best's: "
                "another run may order them differently)"
            )
        lines.append(
            f"export: cudaforge export {session_name} --branch {best.name} --iteration {best.best_iteration} -o kernel.py"
        )
    return "\n".join(lines)
