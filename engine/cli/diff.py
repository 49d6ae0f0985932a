"""``cudaforge diff SESSION OLD NEW``: what changed in a file between two iterations of a session.

The headless counterpart of the workbench's ``d`` (README "Commands"): a unified diff of one
committed file (``kernel.py`` by default) between two iterations, each ``N`` (on ``--branch``, else
the current branch) or ``BRANCH:N``, so branches compare too (ARCHITECTURE.md §5: every kernel
version is a commit). Both sides naming the same commit (the same iteration twice, or an iteration
and a branch made at it) is refused: an empty diff there would read as "nothing changed" when
nothing was compared. Errors are one ``cudaforge: error: …`` line and exit 2, as the other session
commands'; the exit code is 0 whether or not the files differ.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from engine.cli.args import OneLineParser
from sessions.errors import SessionError
from sessions.records import Iteration
from sessions.repo import SessionRepo

EXIT_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff", help="a unified diff of a file between two iterations of a session"
    )
    add_arguments(parser)
    parser.set_defaults(func=run_diff)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="a session path or a name under the sessions root")
    parser.add_argument("old", metavar="OLD", help="iteration N, or BRANCH:N")
    parser.add_argument("new", metavar="NEW", help="iteration N, or BRANCH:N")
    parser.add_argument("--branch", help="the branch of a bare N (default: the current one)")
    parser.add_argument(
        "--file", default="kernel.py", help="the committed file to compare (default kernel.py)"
    )
    parser.add_argument("--sessions-dir", type=Path, metavar="DIR", help="sessions root")


def _fail(text: str) -> int:
    print(f"cudaforge: error: {text}", file=sys.stderr)
    return EXIT_ERROR


def parse_side(text: str, default_branch: str) -> tuple[str, int]:
    """``N`` or ``BRANCH:N`` (a branch name may hold ``/``, never ``:``) as (branch, number)."""
    branch, sep, number = text.rpartition(":")
    if not number.isdigit() or (sep and not branch):
        raise ValueError(f"{text!r} is not an iteration: give N or BRANCH:N (e.g. 2 or main:2)")
    return (branch if sep else default_branch), int(number)


def run_diff(args: argparse.Namespace) -> int:
    try:
        with SessionRepo.open(args.session, args.sessions_dir) as repo:
            default = args.branch or repo.current_branch
            try:
                old_side, new_side = parse_side(args.old, default), parse_side(args.new, default)
            except ValueError as error:
                return _fail(str(error))
            old, new = (repo.iteration(number, branch) for branch, number in (old_side, new_side))
            if old.sha == new.sha:
                return _fail(_same(old_side, new_side, old))
            texts = [_text(item, args.file) for item in (old, new)]
    except SessionError as error:
        return _fail(str(error))
    labels = [f"{branch}:{number}/{args.file}" for branch, number in (old_side, new_side)]
    sys.stdout.writelines(difflib.unified_diff(texts[0].splitlines(True), texts[1].splitlines(True), *labels))
    return 0


def _same(old: tuple[str, int], new: tuple[str, int], item: Iteration) -> str:
    sides = f"{old[0]}:{old[1]}" if old == new else f"{old[0]}:{old[1]} and {new[0]}:{new[1]}"
    return (
        f"OLD and NEW are the same iteration ({sides}, commit {item.sha[:12]}): nothing to compare; "
        "name two different iterations"
    )


def _text(item: Iteration, filename: str) -> str:
    if filename not in item.files():
        raise SessionError(f"iteration {item.number} has no {filename} (it has {', '.join(item.files())})")
    return item.read_text(filename)


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.cli.diff …``: the command alone."""
    parser = OneLineParser(prog="cudaforge diff")
    add_arguments(parser)
    return run_diff(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
