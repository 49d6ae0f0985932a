"""``cudaforge run TASK.py --headless``: the optimisation loop without a TUI.

``cudaforge run --session SESSION [--branch NAME] --headless`` continues a session (after a
crash, a Ctrl-C, or to add rounds): the loop's state comes from the session repo, so nothing done
is redone. ``--rounds N`` counts from the seed (iteration 0); a resumed session keeps the rounds
and models it was started with unless flags say otherwise.

It prints one line per stage while it runs, then a table of the branch's iterations and the best
kernel. Ctrl-C stops cleanly: an LLM call in flight is cancelled, a running evaluation finishes
and is committed; a second Ctrl-C leaves at once (the session stays consistent either way).

Exit codes: 0 the rounds ended, 1 an error stopped the loop, 2 usage errors, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from engine.cli_args import int_at_least
from engine.config import ConfigError, load_config
from engine.evaluate import EvaluationError
from engine.events import (
    AwaitingApproval,
    EvalFinished,
    Event,
    IterationCommitted,
    LoopError,
    LoopFinished,
    StageStarted,
    SuggestionReady,
)
from engine.llm.errors import LLMError
from engine.loop.machine import AWAITING, FINISHED, PAUSED, Loop
from engine.tasks import TaskError, load_task
from sessions.errors import SessionError
from sessions.message import format_speedup
from sessions.paths import default_sessions_root
from sessions.repo import SessionRepo
from sessions.secrets import Scrubber

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
LOOP_STAGES = ("seed", "judge", "gate", "coder", "evaluate", "profile", "commit")
TABLE_STAGES = ("judge", "coder", "evaluate", "profile")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the Coder/Judge loop on a task (--headless: no TUI)",
        description="Run the optimisation loop: seed, evaluate, Judge, approval, Coder … for N rounds.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", nargs="?", type=Path, help="KernelBench-format task file (a new session)")
    parser.add_argument("--session", help="continue this session (a name under the sessions dir, or a path)")
    parser.add_argument("--branch", help="with --session: continue on this branch")
    parser.add_argument("--headless", action="store_true", help="run without the TUI, printing progress")
    parser.add_argument("--rounds", type=int_at_least(0), help="rounds after the seed (default 10)")
    parser.add_argument("--coder", help="provider/model of the Coder (e.g. openai/o3, scripted/DIR)")
    parser.add_argument("--judge", help="provider/model of the Judge")
    parser.add_argument("--auto-approve", action="store_true", help="approve every Judge suggestion")
    parser.add_argument("--sessions-dir", type=Path, help="where sessions live")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), help="where kernels run")
    parser.add_argument("--name", help="name of a new session (default: task name and time)")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print build logs and streamed tokens"
    )


def _usage(message: str) -> int:
    print(f"cudaforge run: {message}", file=sys.stderr)
    return EXIT_USAGE


def _overrides(args: argparse.Namespace, stored: dict[str, Any]) -> dict[str, Any]:
    """Flags beat the session's stored settings, which beat config files (a resume keeps its setup)."""
    models = dict(stored.get("models") or {})
    loop = {k: v for k, v in (stored.get("loop") or {}).items() if k == "rounds"}
    models.update({k: v for k, v in (("coder", args.coder), ("judge", args.judge)) if v})
    if args.rounds is not None:
        loop["rounds"] = args.rounds
    if args.auto_approve:
        loop["approval"] = "auto"
    out: dict[str, Any] = {}
    if models:
        out["models"] = models
    if loop:
        out["loop"] = loop
    if args.device:
        out["eval"] = {"device": args.device}
    return out


def run_command(args: argparse.Namespace) -> int:
    if not args.headless:
        return _usage("only --headless is available here; the TUI opens with `cudaforge new TASK.py`")
    if (args.task is None) == (args.session is None):
        return _usage("give a TASK.py for a new session, or --session SESSION to continue one")
    if args.branch and not args.session:
        return _usage("--branch needs --session")
    try:
        config = load_config(Path.cwd(), os.environ, _overrides(args, {}))
        root = args.sessions_dir or (Path(config.sessions.dir).expanduser() if config.sessions.dir else None)
        root = root or default_sessions_root()
        if args.session:
            session = SessionRepo.open(args.session, root)
            stored = session.settings().get("settings", {})
            config = load_config(Path.cwd(), os.environ, _overrides(args, stored))
        else:
            if not args.task.is_file():
                return _usage(f"no such task file: {args.task}")
            load_task(args.task, describe=False)
            session = None
    except (ConfigError, TaskError, SessionError) as error:
        return _usage(str(error))
    if config.loop.approval != "auto" and not sys.stdin.isatty():
        return _usage(
            f"approval policy is {config.loop.approval!r} but stdin is not a terminal: "
            'pass --auto-approve (or set approval = "auto" under [loop] in cudaforge.toml)'
        )
    printer = Printer(sys.stdout, verbose=args.verbose)
    try:
        if session is None:
            session = SessionRepo.create(root, args.task, name=args.name)
        elif args.branch:
            session.switch_branch(args.branch)
        from engine.evaluate import resolve_device
        from engine.loop.factory import make_loop

        profiler = None
        if resolve_device(config.eval.device) == "cuda" and config.profile.enabled:
            from engine.profile.candidate import loop_profiler

            profiler = loop_profiler(config.profile.metrics, sandbox=config.eval.sandbox)
        loop = make_loop(session, config, device=config.eval.device, on_event=printer, profiler=profiler)
    except (SessionError, LLMError, EvaluationError, ConfigError) as error:
        if session is not None:
            session.close()
        print(f"cudaforge run: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"session {session.name} · branch {loop.branch} · {session.path}", flush=True)
    try:
        code = drive(loop, printer)
        print_summary(session, loop.branch, sys.stdout)
        return code
    finally:
        session.close()


def drive(loop: Loop, printer: Printer) -> int:
    """Run the loop in a worker thread so Ctrl-C can stop it between stages."""
    while True:
        outcome = _run_in_thread(loop)
        if outcome == AWAITING:
            if not _ask_human(loop):
                return EXIT_INTERRUPTED
            continue
        if outcome == FINISHED:
            return EXIT_OK
        if outcome == PAUSED:
            return EXIT_INTERRUPTED
        return EXIT_ERROR


def _run_in_thread(loop: Loop) -> str:
    """``loop.run()`` in a worker thread; Ctrl-C here asks it to stop at the next stage boundary.

    Completion is signalled through an Event rather than ``Thread.join``: a KeyboardInterrupt that
    lands inside ``join`` can leave the thread looking finished while it still runs.
    """
    result: list[str] = []
    done = threading.Event()

    def work() -> None:
        try:
            result.append(loop.run())
        finally:
            done.set()

    threading.Thread(target=work, name="cudaforge-loop", daemon=True).start()
    interrupted = False
    while not done.is_set():
        try:
            done.wait(0.2)
        except KeyboardInterrupt:
            if interrupted:
                print("\nleaving now; the session keeps every committed iteration", file=sys.stderr)
                os._exit(EXIT_INTERRUPTED)
            interrupted = True
            print("\nstopping after the current stage (Ctrl-C again to leave at once) …", file=sys.stderr)
            loop.stop()
    return result[0] if result else "error"


def _ask_human(loop: Loop) -> bool:
    """The terminal's gate: approve, edit (one line of replacement text), reject with a note, or stop."""
    while True:
        try:
            answer = input("[a]pprove  [e]dit  [r]eject  [s]top > ").strip().lower()
        except EOFError:
            return False
        if answer in ("a", "approve"):
            loop.approve()
            return True
        if answer in ("e", "edit"):
            loop.approve(input("replacement suggestion: "))
            return True
        if answer in ("r", "reject"):
            loop.reject(input("note for the Judge: "))
            return True
        if answer in ("s", "stop"):
            return False


class Printer:
    """Turns loop events into one line per stage (plus logs and tokens with ``verbose``)."""

    def __init__(self, out: TextIO, verbose: bool = False) -> None:
        self.out = out
        self.verbose = verbose
        self.lock = threading.Lock()
        self.scrubber = Scrubber()  # a Judge reply that echoes a key must not reach the terminal

    def __call__(self, event: Event) -> None:
        line = self.format(event)
        if line is not None:
            line = self.scrubber.text(line)
            with self.lock:
                print(line, file=self.out, flush=True)

    def format(self, event: Event) -> str | None:
        prefix = f"iter {event.iteration} ·"
        if isinstance(event, StageStarted):
            if event.stage in LOOP_STAGES:
                return f"{prefix} {event.stage} ({event.detail})"
            return f"{prefix}   {event.stage}" if self.verbose else None
        if isinstance(event, EvalFinished):
            r = event.result
            line = f"{prefix}   → {r.get('status')} · {format_speedup(r.get('speedup'))}"
            notes = [
                *(r.get("flags") or []),
                *(m for m in (r.get("messages") or []) if m.startswith("refused")),
            ]
            return "\n".join([line, *(f"{prefix}   ! {note}" for note in notes)])
        if isinstance(event, SuggestionReady):
            return f"{prefix}   judge: {_headline(event.suggestion)}"
        if isinstance(event, AwaitingApproval):
            flag = " (a guard flagged this kernel)" if event.flagged else ""
            return f"{prefix}   awaiting approval{flag}"
        if isinstance(event, IterationCommitted):
            return f"{prefix}   committed {event.commit[:10]} · {event.phase} · {event.status}"
        if isinstance(event, LoopError):
            return f"{prefix}   error in {event.stage}: {event.message}"
        if isinstance(event, LoopFinished):
            return f"loop {event.reason}"
        if self.verbose:
            text = getattr(event, "line", None) or getattr(event, "text", None)
            return f"    {text.rstrip()}" if text else None
        return None


def _headline(suggestion: dict[str, Any]) -> str:
    for key in ("critical_issue", "bottleneck", "optimization_method", "text"):
        value = (suggestion.get(key) or "").strip()
        if value:
            return value.splitlines()[0][:120]
    return "(empty suggestion)"


def summary_rows(session: SessionRepo, branch: str) -> list[dict[str, Any]]:
    """One row per iteration of ``branch``, read back from the repo (so resumed runs show everything)."""
    rows = []
    for item in session.history(branch):
        seconds: dict[str, float] = {}
        if "loop.json" in item.files():
            seconds = item.read_json("loop.json").get("stage_seconds", {})
        rows.append(
            {
                "iteration": item.number,
                "phase": item.phase,
                "status": item.status,
                "speedup": item.speedup,
                "tokens": item.tokens,
                "cost_usd": item.cost_usd,
                "seconds": {s: seconds.get(s) for s in TABLE_STAGES},
            }
        )
    return rows


def print_summary(session: SessionRepo, branch: str, out: TextIO) -> None:
    header = ["iter", "phase", "status", "speedup", "tokens", "cost", *(f"{s} s" for s in TABLE_STAGES)]
    table = [header]
    for row in summary_rows(session, branch):
        cost = "unknown" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        secs = [("" if v is None else f"{v:.1f}") for v in row["seconds"].values()]
        table.append(
            [
                str(row["iteration"]),
                row["phase"],
                row["status"],
                format_speedup(row["speedup"]),
                str(row["tokens"]),
                cost,
                *secs,
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print("", file=out)
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip(), file=out)
    best = session.best(branch)
    if best is None:
        print("best: no correct kernel yet", file=out)
    else:
        print(
            f"best: iter {best.number} · {format_speedup(best.speedup)} · "
            f"git -C {session.path} show {best.sha[:10]}:kernel.py",
            file=out,
        )
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m engine.cli_run …``: the run command alone (what ``cudaforge run`` calls)."""
    parser = argparse.ArgumentParser(prog="cudaforge run")
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
