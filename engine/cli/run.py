"""``cudaforge run TASK.py --headless``: the optimisation loop without a TUI.

``cudaforge run --session SESSION [--branch NAME] --headless`` continues a session (after a
crash, a Ctrl-C, or to add rounds): the loop's state comes from the session repo, so nothing done
is redone. ``cudaforge run TASK.py --session S`` names the session of a task: S is resumed when it
holds that very task, made when there is none, and refused (exit 2) when it holds another. For a new session ``--rounds N`` means N rounds after the seed (iteration 0); on a
resume it means N *more* rounds after the branch's tip. A resume without ``--rounds`` finishes the
round target the session was started with, and keeps its models unless flags say otherwise. The
run says what it will do before it starts and what it did at the end, including "nothing".

It prints one line per stage while it runs, then a table of the branch's iterations and the best
kernel. Ctrl-C, a hang-up (SIGHUP: the SSH connection dropped) and SIGTERM stop it cleanly
(:mod:`engine.cli.interrupts`): it says what it waits for, an LLM call in flight is cancelled, a
running evaluation finishes and is committed; a second Ctrl-C leaves at once, and the interrupted
stage is redone by the next ``--session`` run. The session stays consistent either way, and a
resume reaches the same history as a run that was never interrupted (ARCHITECTURE §2).

Exit codes: 0 the rounds ended, 1 an error stopped the loop, 2 usage errors or a broken task (its
reference fails on its own inputs: checked before any LLM call), 3 cudaforge's own fault stopped it
(``harness_error``: nothing of it committed; the same command resumes), 128 + the signal when
stopped by one: 130 Ctrl-C (also the terminal's ``[s]top``), 129 hang-up, 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from engine.cli.args import OneLineParser, add_loop_flags, loop_config, rounds_target
from engine.cli.eval import finish_headers
from engine.cli.guard import add_guard_flags
from engine.cli.interrupts import HANDLED, Interrupts, exit_code
from engine.config import ConfigError, sessions_root
from engine.eval import stagetimes
from engine.eval.options import EvaluationError
from engine.events import (
    AwaitingApproval,
    EvalFinished,
    Event,
    IterationCommitted,
    LoopError,
    LoopFinished,
    LoopNotice,
    StageStarted,
    SuggestionReady,
)
from engine.guard.report import format_share, settings_guard_label, share_of_iteration
from engine.llm.errors import LLMError
from engine.loop.machine import AWAITING, FINISHED, PAUSED, Loop
from engine.tasks import TaskError, load_task
from sessions import ranking
from sessions.errors import SessionError, StaleLockWarning
from sessions.message import format_speedup
from sessions.repo import SessionRepo
from sessions.secrets import Scrubber

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
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
    parser.add_argument(
        "--session",
        help="continue this session (a name under the sessions dir, or a path); with TASK.py: resume it "
        "when it holds that task, else start a new session of that name",
    )
    parser.add_argument("--branch", help="with --session: continue on this branch")
    parser.add_argument("--headless", action="store_true", help="run without the TUI, printing progress")
    add_loop_flags(parser)
    parser.add_argument("--auto-approve", action="store_true", help="approve every Judge suggestion")
    parser.add_argument("--sessions-dir", type=Path, help="where sessions live")
    parser.add_argument("--name", help="name of a new session (default: task name and time)")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print build logs and streamed tokens"
    )
    add_guard_flags(parser)


def _usage(message: str) -> int:
    print(f"cudaforge run: {message}", file=sys.stderr)
    return EXIT_USAGE


def run_command(args: argparse.Namespace) -> int:
    """Signals are handled from the start (a Ctrl-C during set-up stops the run before its first stage)."""
    interrupts = Interrupts().install()
    try:
        with warnings.catch_warnings():  # a stale lock taken over is printed as a note (loop.notices)
            warnings.simplefilter("ignore", StaleLockWarning)
            code = _run(args, interrupts)
    finally:
        interrupts.restore()
    if code == 0:  # a header still being made ends with this process: finish it (Ctrl-C skips it)
        finish_headers("cudaforge run")
    return code


def _run(args: argparse.Namespace, interrupts: Interrupts) -> int:
    problem = _flags_problem(args)
    if problem:
        return _usage(problem)
    tip: int | None = None
    try:
        config = loop_config(args)
        root = sessions_root(config, args.sessions_dir)
        if args.task is not None and args.session is not None:
            args = task_into_session(args, root)
        if args.session:
            session = SessionRepo.open(args.session, root)
            config = loop_config(args, session.settings(args.branch).get("settings", {}))
            history = session.history(args.branch) if args.branch else session.history()
            tip = history[-1].number if history else None
            config.loop.rounds = rounds_target(args.rounds, tip, config.loop.rounds)
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
        from engine.eval.options import resolve_device
        from engine.loop.factory import check_models, loop_profiler_for, make_loop
        from engine.loop.session_settings import session_settings

        created = session is None
        if created:
            check_models(config)  # a model that cannot run must not leave an empty session behind
        device = resolve_device(config.eval.device)  # the run's one resolution: the loop takes it as it is
        if session is None:  # the settings go in at once: a run stopped before its seed resumes as it began
            session = SessionRepo.create(root, args.task, name=args.name, settings=session_settings(config, device))
        elif args.branch:
            session.switch_branch(args.branch)
        loop = make_loop(session, config, device=device, on_event=printer, profiler=loop_profiler_for(config, device))
    except (SessionError, LLMError, EvaluationError, ConfigError) as error:
        if session is not None:
            session.close()
        print(f"cudaforge run: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(  # the guard settings every evaluation of this run carries (EvalOptions.guard), as they are
        f"session {session.name} · branch {loop.branch} · {session.path} · {loop.options.eval_options.guard.label()}",
        flush=True,
    )
    print(plan_line(tip, config.loop.rounds), flush=True)
    for notice in loop.notices:
        print(f"note: {notice}", flush=True)
    resume = resume_command(session, loop.branch, auto_approve=config.loop.approval == "auto")
    interrupts.attach(loop.stop, lambda: stopping_line(loop), lambda: leaving_line(loop, resume))
    try:
        code = drive(loop, printer, interrupts)
        print_summary(session, loop.branch, sys.stdout)
        print(ran_line(session, loop.branch, tip), flush=True)
        stopped = code in (EXIT_INTERRUPTED, *(exit_code(s) for s in HANDLED))
        if stopped:  # say how to go on
            print(f"resume: {resume}", flush=True)
        elif created and code not in (EXIT_OK, EXIT_HARNESS) and not session.history(loop.branch):
            remove_empty(session)  # cudaforge's own fault keeps it: the same session goes on once fixed
        return code
    finally:
        session.close()


def remove_empty(session: SessionRepo) -> None:
    """A session this run made whose first step failed (an unreachable server, a broken task) holds
    nothing worth resuming: it is removed rather than left to fill the session list. One a signal
    stopped is kept, since it resumes with its settings (ARCHITECTURE.md §5), and so is one that
    cudaforge's own fault stopped (exit 3), which says the same session goes on once that is fixed."""
    import shutil

    session.close()
    shutil.rmtree(session.path, ignore_errors=True)
    print(
        f"cudaforge run: removed session {session.name}: it stopped before its first iteration, "
        "with nothing recorded",
        file=sys.stderr,
        flush=True,
    )


def _flags_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line's flags together, said before anything is made."""
    if not args.headless:
        return "only --headless is available here; the TUI opens with `cudaforge new TASK.py`"
    if args.task is None and args.session is None:
        return "give a TASK.py for a new session, or --session SESSION to continue one"
    if args.branch and not args.session:
        return "--branch needs --session"
    if args.task is not None and args.session is not None and args.name is not None:
        return "--name and --session both name the session: give one"
    return None


def task_into_session(args: argparse.Namespace, root: Path) -> argparse.Namespace:
    """``run TASK.py --session S``: S resumed when it holds this task, a new session named S when
    there is none, a SessionError when S holds another task (README "Commands")."""
    from sessions.errors import NoSuchSession

    if not args.task.is_file():
        raise TaskError(f"no such task file: {args.task}")
    try:
        existing = SessionRepo.open(args.session, root)
    except NoSuchSession:
        if Path(args.session).name != args.session:  # a path that is no session: nothing to name
            raise
        if args.branch:
            raise SessionError(f"no session {args.session} yet: --branch needs one that exists") from None
        return argparse.Namespace(**{**vars(args), "name": args.session, "session": None})
    with existing:
        held, task_name = existing.task_source, existing.task_name
    scrub = Scrubber()  # the session stores its task scrubbed of secrets
    if scrub.text(args.task.read_text(encoding="utf-8")) != held:
        raise SessionError(
            f"session {existing.name} holds another task ({task_name}), not {args.task}: "
            f"name a new session, or resume it without the task (--session {existing.name})"
        )
    return argparse.Namespace(**{**vars(args), "task": None})


def stopping_line(loop: Loop) -> str:
    """Said on the first Ctrl-C: what the run waits for before it stops (read when the signal came)."""
    activity = loop.activity
    what = activity.stopping() if activity is not None else "stopping at the next stage boundary"
    return f"\ninterrupted: {what} (Ctrl-C again to leave now)"


def leaving_line(loop: Loop, resume: str) -> str:
    """Said on the second Ctrl-C, just before the process leaves."""
    activity = loop.activity
    left = f"; {activity.describe()} is redone on resume" if activity is not None else ""
    return f"\nleaving now: every committed iteration is kept{left}\nresume: {resume}\n"


def resume_command(session: SessionRepo, branch: str, *, auto_approve: bool) -> str:
    """The exact command that goes on with this run's session and branch, said when a signal stops
    it (ARCHITECTURE.md §2, "Interruption is an ordinary event"): the sessions root is named unless
    it is the default one, the branch unless it is the session's current one, and ``--auto-approve``
    when this run approved by policy (without it a run whose stdin is no terminal is refused)."""
    from sessions.paths import default_sessions_root

    words = ["cudaforge", "run", "--session", session.name, "--headless"]
    root = session.path.resolve().parent
    if root.resolve() != default_sessions_root().expanduser().resolve():
        words += ["--sessions-dir", str(root)]
    if branch != session.current_branch:
        words += ["--branch", branch]
    if auto_approve:
        words.append("--auto-approve")
    return shlex.join(words)


def plan_line(tip: int | None, target: int) -> str:
    """What this run sets out to do, said before it starts."""
    if tip is None:
        return f"plan: the seed, then rounds 1–{target}" if target else "plan: the seed only"
    if target <= tip:
        return (
            f"plan: nothing to run — the branch is at iteration {tip} and its target is {target} "
            "(--rounds N adds N rounds)"
        )
    return f"plan: {target - tip} more round(s), iterations {tip + 1}–{target}"


def ran_line(session: SessionRepo, branch: str, tip: int | None) -> str:
    """What this run did, read back from the repo (a killed or stopped run says so too)."""
    history = session.history(branch)
    new = [it.number for it in history if tip is None or it.number > tip]
    if not new:
        return "this run: no new iteration"
    return f"this run: {len(new)} new iteration(s), {new[0]}–{new[-1]}"


def drive(loop: Loop, printer: Printer, interrupts: Interrupts | None = None) -> int:
    """Run the loop in a worker thread, so a signal can stop it at a stage boundary."""
    interrupts = interrupts or Interrupts()

    def stopped() -> int:
        return interrupts.exit_code if interrupts.requested.is_set() else EXIT_INTERRUPTED

    while True:
        if interrupts.requested.is_set():  # a signal between two runs (at the terminal's prompt)
            return stopped()
        outcome = _run_in_thread(loop, interrupts)
        if outcome == AWAITING:
            if interrupts.requested.is_set() or not _ask_human(loop, interrupts):
                return stopped()
            continue
        if outcome == FINISHED:
            return EXIT_OK
        if outcome == PAUSED:
            return stopped()
        if loop.task_problem is not None:  # a broken task, like `cudaforge eval`'s exit 2
            return EXIT_USAGE
        if loop.harness_problem is not None:  # cudaforge's own fault, like `cudaforge eval`'s exit 3
            return EXIT_HARNESS
        return EXIT_ERROR


def _run_in_thread(loop: Loop, interrupts: Interrupts) -> str:
    """``loop.run()`` in a worker thread, the main thread free for signals; says once what a stop waits for.

    A session error in the loop (a repository another program changed, a lost lock) ends the run
    with one line, not a thread's traceback.
    """
    result: list[str] = []
    done = threading.Event()

    def work() -> None:
        try:
            result.append(loop.run())
        except SessionError as error:
            print(f"cudaforge run: the loop stopped: {error}", file=sys.stderr, flush=True)
        finally:
            done.set()

    threading.Thread(target=work, name="cudaforge-loop", daemon=True).start()
    said = False
    while True:
        finished = done.wait(0.1)
        if interrupts.requested.is_set() and not said:
            said = True
            if not interrupts.hung_up:
                print(interrupts.stopping_text or stopping_line(loop), file=sys.stderr, flush=True)
        if finished:
            return result[0] if result else "error"


def _ask_human(loop: Loop, interrupts: Interrupts) -> bool:
    """The terminal's gate: approve, edit (one line of replacement text), reject with a note, or stop."""
    while True:
        interrupts.raise_in_main = True
        try:
            answer = input("[a]pprove  [e]dit  [r]eject  [s]top > ").strip().lower()
        except (EOFError, KeyboardInterrupt):
            return False
        finally:
            interrupts.raise_in_main = False
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
        if isinstance(event, LoopNotice):
            return f"{prefix}   note: {event.message}"
        if self.verbose:
            text = getattr(event, "line", None) or getattr(event, "text", None)
            return f"    {text.rstrip()}" if text else None
        return None


#: the fields that name a suggestion, in its mode's order: an optimize reply may also carry a
#: repair field the Judge filled with a placeholder ("critical_issue": "none found"), which is not
#: what it suggested (ARCHITECTURE.md §7: the two Judge prompts and their fields)
HEADLINE_FIELDS = {
    "optimize": ("bottleneck", "optimization_method", "modification_plan"),
    "repair": ("critical_issue", "minimal_fix_hint", "why_it_matters"),
}


def _headline(suggestion: dict[str, Any]) -> str:
    """The Judge's suggestion in one line: its own mode's fields first, then (a reply with no JSON)
    its free text; when it held neither, say what it did hold rather than print a field of the
    other mode as if it were the suggestion."""
    mode = suggestion.get("mode")
    own = HEADLINE_FIELDS.get(mode, HEADLINE_FIELDS["repair"] + HEADLINE_FIELDS["optimize"])
    parsed = suggestion.get("parsed", True)
    for key in own if parsed else (*own, "text"):
        value = _first_line(suggestion.get(key))
        if value:
            return (value if key in (own[0], "text") else f"{key.replace('_', ' ')}: {value}")[:120]
    others = [
        f"{key.replace('_', ' ')} {value!r}"
        for fields in HEADLINE_FIELDS.values()
        for key in fields
        if key not in own and (value := _first_line(suggestion.get(key)))
    ]
    what = f"no {mode} suggestion" if mode else "no suggestion"
    return f"({what}: the Judge's reply gave only {others[0]})"[:120] if others else f"({what} in the Judge's reply)"


def _first_line(value: Any) -> str:
    return value.strip().splitlines()[0] if isinstance(value, str) and value.strip() else ""


def summary_rows(session: SessionRepo, branch: str) -> list[dict[str, Any]]:
    """One row per iteration of ``branch``, read back from the repo (so resumed runs show everything)."""
    rows = []
    for item in session.history(branch):
        seconds: dict[str, float] = {}
        if "loop.json" in item.files():
            seconds = item.read_json("loop.json").get("stage_seconds", {})
        rows.append(
            {
                "share": share_of_iteration(item),
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


def total_line(rows: list[dict[str, Any]]) -> str:
    """The branch's tokens and cost; "cost unknown" when any iteration had an unpriced call."""
    tokens = sum(int(r["tokens"] or 0) for r in rows)
    costs = [r["cost_usd"] for r in rows]
    if any(c is None for c in costs):
        known = sum(c for c in costs if c is not None)
        cost = f"cost unknown (${known:.4f} priced)" if known else "cost unknown"
    else:
        cost = f"${sum(costs):.4f}"
    return f"total: {tokens} tokens · {cost}"


def print_summary(session: SessionRepo, branch: str, out: TextIO) -> None:
    header = [
        "iter",
        "phase",
        "status",
        "speedup",
        "share",
        "tokens",
        "cost",
        *(f"{s} s" for s in TABLE_STAGES),
    ]
    table = [header]
    rows = summary_rows(session, branch)
    for row in rows:
        cost = "unknown" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        secs = [("" if v is None else f"{v:.1f}") for v in row["seconds"].values()]
        table.append(
            [
                str(row["iteration"]),
                row["phase"],
                row["status"],
                format_speedup(row["speedup"]),
                format_share(row.get("share")),
                str(row["tokens"]),
                cost,
                *secs,
            ]
        )
    print("", file=out)
    _print_table(table, out)
    print(total_line(rows), file=out)
    timings = stage_table(session, branch)
    if len(timings) > 1:
        print("\nwhere each evaluation's time went (seconds; outside: around the worker):", file=out)
        _print_table(timings, out)
    print(settings_guard_label(session.settings(branch).get("settings", {})), file=out)
    best = session.best(branch)
    if best is None:
        print("best: no correct kernel yet", file=out)
    else:
        print(
            f"best: iter {best.number} · {ranking.label(ranking.measured(branch, best))} · "
            f"git -C {session.path} show {best.sha[:10]}:kernel.py",
            file=out,
        )
        print(f"  ({ranking.RULE})", file=out)
    out.flush()


def _print_table(table: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip(), file=out)


def stage_table(session: SessionRepo, branch: str) -> list[list[str]]:
    """Header and one row per evaluated iteration: the evaluation's stages (engine.eval.stagetimes),
    the profile, and the whole evaluation plus profile."""
    rows: list[tuple[Any, dict[str, float], dict[str, float]]] = []
    for item in session.history(branch):
        durations = (item.read_json("eval.json") or {}).get("durations") or {}
        parts = stagetimes.breakdown(durations)
        if parts:
            rows.append((item, durations, parts))
    names = [
        name for name, _ in stagetimes.STAGES
        if name not in stagetimes.OCCASIONAL or any(name in parts for _, _, parts in rows)
    ] + ["outside"]  # fmt: skip
    if any(stagetimes.AFTER in parts for _, _, parts in rows):  # a column only where baselines were measured
        names.insert(-1, stagetimes.AFTER)
    table = [["iter", *names, "profile", "total"]]
    for item, durations, parts in rows:
        profile = None
        if "loop.json" in item.files():
            profile = (item.read_json("loop.json").get("stage_seconds") or {}).get("profile")
        wall = stagetimes.total(durations) or 0.0
        cells = [("" if parts.get(n) is None else f"{parts[n]:.1f}") for n in names]
        table.append([str(item.number), *cells, "" if profile is None else f"{profile:.1f}", f"{wall + (profile or 0.0):.1f}"])
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m engine.cli.run …``: the run command alone (what ``cudaforge run`` calls)."""
    parser = OneLineParser(prog="cudaforge run")
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
