"""``cudaforge sessions``, ``cudaforge branch``, ``cudaforge export`` and ``cudaforge report``.

``SESSION`` is a path or a name under the sessions root; every command takes ``--sessions-dir``.
User errors (no such session, iteration or branch, a branch name taken, a session locked by
another writer, an export of an iteration that is not correct without ``--force``) print one
``cudaforge: error: …`` line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from engine.cli.args import int_at_least
from sessions.errors import SessionError, StaleLockWarning
from sessions.export import choose_iteration, export_text
from sessions.listing import SessionSummary, list_sessions
from sessions.message import format_speedup
from sessions.paths import default_sessions_root
from sessions.repo import SessionRepo

EXIT_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the session commands to the ``cudaforge`` parser."""
    listing = subparsers.add_parser("sessions", help="list the sessions under the sessions root")
    _add_sessions_dir(listing)
    listing.set_defaults(func=run_sessions)

    branch = subparsers.add_parser("branch", help="start a new branch at an iteration of a session")
    branch.add_argument("session", metavar="SESSION", help="a session path or a name under the sessions root")
    branch.add_argument("iteration", metavar="ITERATION", type=int_at_least(0), help="iteration number (the seed is 0)")
    branch.add_argument("--name", help="branch name (default: from-iter-N, made unique)")
    branch.add_argument(
        "--branch", dest="source_branch", help="the branch the iteration is on (default: current)"
    )
    branch.add_argument("--no-switch", action="store_true", help="do not make the new branch the current one")
    _add_sessions_dir(branch)
    branch.set_defaults(func=run_branch)

    export = subparsers.add_parser("export", help="write an iteration's kernel as a standalone ModelNew file")
    export.add_argument("session", metavar="SESSION", help="a session path or a name under the sessions root")
    export.add_argument("--iteration", type=int_at_least(0), help="iteration number (default: the best correct one)")
    export.add_argument("--branch", help="branch (default: the current one)")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="output file, or - for stdout")
    export.add_argument(
        "--force", action="store_true", help="export an iteration that is not correct (its status is in the header)"
    )
    _add_sessions_dir(export)
    export.set_defaults(func=run_export)

    report = subparsers.add_parser(
        "report", help="write a session as one self-contained HTML page (every branch, leaderboard, charts, diff, iterations)"
    )
    report.add_argument("session", metavar="SESSION", help="a session path or a name under the sessions root, or a "
                        "model folder cudaforge extract wrote (the model's page: profile, tasks, end to end)")  # fmt: skip
    report.add_argument("--branch", help="the branch whose best kernel the page details (default: the one "
                        "holding the session's best); every branch's iterations are shown either way")  # fmt: skip
    report.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    _add_sessions_dir(report)
    report.set_defaults(func=run_report)


def _add_sessions_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sessions-dir", type=Path, metavar="DIR", help="sessions root (default: %(default)s)", default=None
    )


def _fail(text: str) -> int:
    print(f"cudaforge: error: {text}", file=sys.stderr)
    return EXIT_ERROR


def run_sessions(args: argparse.Namespace) -> int:
    root = args.sessions_dir or default_sessions_root()
    summaries = list_sessions(root)
    if not summaries:
        print(f"no sessions under {root}")
        return 0
    print(format_table(summaries))
    return 0


def format_table(summaries: list[SessionSummary]) -> str:
    """Fixed-width table: name (what ``open``/``replay``/``branch`` take), task, created, branches,
    iterations, best speedup, guard policy, path."""
    header = ("NAME", "TASK", "CREATED", "BRANCHES", "ITERATIONS", "BEST", "GUARD", "PATH")
    rows = [
        (
            s.name,
            s.task_name,
            s.created.strftime("%Y-%m-%d %H:%M"),
            str(s.branches),
            str(s.iterations),
            format_speedup(s.best_speedup),
            s.guard or "—",
            str(s.path),
        )
        for s in summaries
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    numeric = {3, 4, 5}
    lines = []
    for row in (header, *rows):
        cells = [
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def run_branch(args: argparse.Namespace) -> int:
    try:
        with SessionRepo.open(args.session, args.sessions_dir) as repo, warnings.catch_warnings():
            warnings.simplefilter("ignore", StaleLockWarning)  # shown below as one notice line
            before = repo.current_branch
            name = repo.branch_from(
                args.iteration, name=args.name, branch=args.source_branch, switch=not args.no_switch
            )
            sha = repo.iteration(args.iteration, name).sha
            if repo.lock_notice:
                print(f"cudaforge: notice: {repo.lock_notice}", file=sys.stderr)
    except SessionError as error:
        return _fail(str(error))
    print(f"created branch {name} at iteration {args.iteration} ({sha[:12]}) in {repo.path}")
    print(switch_line(before, name, repo.name, switched=not args.no_switch))
    return 0


def switch_line(before: str, name: str, session: str, *, switched: bool) -> str:
    """What ``branch`` did to the session's current branch, the one ``open``, ``run --session`` and
    ``export`` continue from: a switch is said with the way back, keeping it with the way to switch."""
    if not switched:
        return f"current branch: still {before} (cudaforge open {session} --branch {name} continues the new one)"
    return f"current branch: switched from {before} to {name} (--no-switch keeps {before} current)"


def _model_report(folder: Path, output: Path) -> int:
    from engine.model.report import render
    from engine.model.spec import ModelError

    try:
        page = render(folder)
    except ModelError as error:
        return _fail(str(error))
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as error:
        return _fail(f"cannot write {output}: {error.strerror}")
    print(f"wrote {output}: the model of {folder}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    try:
        with SessionRepo.open(args.session, args.sessions_dir) as repo:
            item = choose_iteration(repo, args.iteration, args.branch)
            text = export_text(repo, item, args.branch)
    except SessionError as error:
        return _fail(str(error))
    if item.status != "correct" and not args.force:  # a file that looks like a kernel but is not one
        return _fail(
            f"iteration {item.number} of session {repo.name} is {item.status}, not correct: "
            "nothing written (--force exports it anyway)"
        )
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as error:
        return _fail(f"cannot write {args.output}: {error.strerror}")
    print(f"wrote iteration {item.number} ({item.status}, {format_speedup(item.speedup)}) to {args.output}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from engine.batch.report import CHARTS_HINT, gather, render_html
    from engine.model.folder import is_model_folder

    if is_model_folder(Path(args.session)):  # a folder cudaforge extract wrote: the model's report
        return _model_report(Path(args.session), Path(args.output))

    try:
        with SessionRepo.open(args.session, args.sessions_dir) as repo:
            if args.branch and args.branch not in repo.branches():
                return _fail(f"session {repo.name} has no branch {args.branch!r}")
            report = gather(repo, args.branch)
            page = render_html(report)
    except SessionError as error:
        return _fail(str(error))
    try:
        Path(args.output).write_text(page, encoding="utf-8")
    except OSError as error:
        return _fail(f"cannot write {args.output}: {error.strerror}")
    best = f"best #{report.best.number} {format_speedup(report.best.speedup)}" if report.best else "no correct kernel"
    print(f"wrote {args.output}: {report.session}, branch {report.branch}, {len(report.rows)} iterations, {best}")
    if CHARTS_HINT in page:
        print(f"cudaforge: notice: {CHARTS_HINT}", file=sys.stderr)
    return 0
