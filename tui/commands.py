"""The TUI's subcommands: ``new TASK.py`` (``new OUT``, a folder ``cudaforge extract`` wrote: the model
view), ``open SESSION``, ``replay SESSION``, and the bare
``cudaforge`` (the session browser, through :func:`launch_browser`), and ``demo``.

Textual is imported only when a command runs, so ``cudaforge --help`` and the engine commands
stay fast. ``--serve`` re-runs the same command line (without ``--serve`` and ``--port``) inside
textual-serve, an optional extra, on ``http://localhost:PORT`` (``--port``, default 8000; a test
or a second user on the machine picks another); every browser connection gets its own process,
which is fine because all state lives in the session repository.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.cli.guard import add_guard_flags, guard_overrides

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
SERVE_HOST, SERVE_PORT = "localhost", 8000


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1–65535."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return port


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """``--no-mouse``, ``--serve`` and ``--port``: how the TUI is shown (terminal or browser)."""
    parser.add_argument("--no-mouse", action="store_true", help="do not capture the mouse (slow SSH links)")
    parser.add_argument(
        "--serve", action="store_true", help=f"serve the TUI to a browser on http://{SERVE_HOST}:PORT"
    )
    parser.add_argument(
        "--port", type=port_number, default=SERVE_PORT, help=f"port for --serve (default {SERVE_PORT})"
    )


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options every TUI entry point takes (also used by the bare ``cudaforge``)."""
    parser.add_argument("--sessions-dir", type=Path, default=None, help="where sessions live")
    add_serve_options(parser)


def _guard_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[guard]`` overrides the flags ask for (empty when none were given)."""
    return guard_overrides(args, {})


def register(subparsers: Any) -> None:
    from engine.cli.args import add_loop_flags

    new = subparsers.add_parser(
        "new", help="start a session from a task file, or show a folder cudaforge extract wrote, in the TUI"
    )
    new.add_argument("task", type=Path, metavar="TASK.py|OUT")
    add_common_options(new)
    add_loop_flags(new)
    add_guard_flags(new)
    new.set_defaults(func=run_new)

    open_ = subparsers.add_parser("open", help="resume a session in the TUI")
    open_.add_argument("session", metavar="SESSION")
    add_common_options(open_)
    add_loop_flags(open_)
    open_.add_argument("--branch", help="continue on this branch")
    add_guard_flags(open_)
    open_.set_defaults(func=run_open)

    replay = subparsers.add_parser("replay", help="step through a past session, read-only")
    replay.add_argument("session", metavar="SESSION")
    add_common_options(replay)
    replay.set_defaults(func=run_replay)

    demo = subparsers.add_parser("demo", help="replay the bundled demo session (no GPU or API key needed)")
    add_serve_options(demo)
    demo.set_defaults(func=run_demo, sessions_dir=None)


def _serve(argv: Sequence[str], port: int = SERVE_PORT) -> int:
    """Serve ``cudaforge ARGV`` to browsers until interrupted (Ctrl-C or SIGTERM end it cleanly)."""
    try:
        from textual_serve.server import Server
    except ImportError:
        print("cudaforge: --serve needs textual-serve: pip install 'textual-serve'", file=sys.stderr)
        return EXIT_ERROR
    command = shlex.join([sys.executable, "-m", "tui.cli", *[a for a in argv if a != "--serve"]])
    Server(command, host=SERVE_HOST, port=port, title="cudaforge").serve()
    return EXIT_OK


def _argv_for(args: argparse.Namespace, *words: str) -> list[str]:
    argv = list(words)
    if args.sessions_dir is not None:
        argv += ["--sessions-dir", str(args.sessions_dir)]
    for flag in ("rounds", "coder", "judge", "device", "branch"):
        if getattr(args, flag, None) is not None:
            argv += [f"--{flag}", str(getattr(args, flag))]
    if args.no_mouse:
        argv.append("--no-mouse")
    guard = _guard_flags(args)
    if guard.get("policy"):
        argv += ["--guard", guard["policy"]]
    for key in ("relax", "refuse"):
        for rule in guard.get(key, []):
            argv += [f"--{key}", rule]
    return argv


def _settings(args: argparse.Namespace, session: Any = None) -> tuple[Any, Path]:
    """The one settings resolution (defaults < user < project < flags) and the sessions root.

    For ``open``, the session's stored models and round target come between the files and the
    flags, as for ``run --session``; ``--rounds N`` then means N more rounds after the tip.
    """
    from engine.cli.args import loop_config, rounds_target
    from engine.config import sessions_root

    config = loop_config(args)
    root = sessions_root(config, args.sessions_dir)
    if session is not None:
        branch = getattr(args, "branch", None)
        config = loop_config(args, session.settings(branch).get("settings", {}))
        history = session.history(branch) if branch else session.history()
        tip = history[-1].number if history else None
        config.loop.rounds = rounds_target(getattr(args, "rounds", None), tip, config.loop.rounds)
    return config, root


def _session_config(args: argparse.Namespace, repo: Any) -> Any:
    """The settings of a session opened from the browser: config files < its stored ``session.toml``
    (models, round target, guard) < this command line's flags, as ``cudaforge open`` resolves them,
    except ``--rounds``, which counts from the tip of the session the command line named only."""
    from engine.cli.args import loop_config

    flags = argparse.Namespace(**{**vars(args), "rounds": None})
    return loop_config(flags, repo.settings().get("settings", {}))


def _app(args: argparse.Namespace, **kwargs: Any) -> Any:
    from tui.app import CudaforgeApp

    return CudaforgeApp(session_config=lambda repo: _session_config(args, repo), **kwargs)


def _run_app(args: argparse.Namespace, app: Any) -> int:
    """Run the app; when it was left with a stage still running, say what and leave the process now.

    The loop runs in a daemon thread (``tui/live.py``): leaving without waiting for it is the point
    of "ctrl+q again to leave now". Its journal keeps the stage, which the next run redoes.
    """
    import warnings

    from sessions.errors import StaleLockWarning

    with warnings.catch_warnings():  # a stale lock taken over is shown in the app as a notice
        warnings.simplefilter("ignore", StaleLockWarning)
        result = app.run(mouse=not args.no_mouse)
    code = int(result or 0)
    left = getattr(app, "left_running", None)
    if left:
        what = ", ".join(a.describe() for a in left if a is not None) or "a stage"
        print(
            f"cudaforge: left while {what} was running; it is redone when the session is resumed",
            file=sys.stderr,
        )
        sys.stderr.flush()
        sys.stdout.flush()
        from engine import procgroups

        procgroups.kill_all()  # what the left stage started (a build, a worker) would outlive os._exit
        os._exit(code)
    return code


def launch_browser(args: argparse.Namespace) -> int:
    """The bare ``cudaforge``: the session browser, over the configured sessions root."""
    if getattr(args, "serve", False):
        return _serve(_argv_for(args), args.port)
    from engine.config import ConfigError

    try:
        config, root = _settings(args)
    except ConfigError as error:
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_USAGE
    return _run_app(args, _app(args, sessions_root=root, config=config))


def _open_session(args: argparse.Namespace, mode: str) -> int:
    if args.serve:
        return _serve(_argv_for(args, "replay" if mode == "replay" else "open", args.session), args.port)
    from engine.config import ConfigError
    from sessions.errors import SessionError
    from sessions.repo import SessionRepo

    try:
        _, root = _settings(args)
        repo = SessionRepo.open(args.session, root)
    except (SessionError, ConfigError) as error:
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config, _ = _settings(args, repo)
        if getattr(args, "branch", None):
            repo.switch_branch(args.branch)
    except (SessionError, ConfigError) as error:
        repo.close()
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _run_app(args, _app(args, sessions_root=root, session=repo, mode=mode, config=config))
    finally:
        repo.close()


def run_open(args: argparse.Namespace) -> int:
    return _open_session(args, "live")


def run_replay(args: argparse.Namespace) -> int:
    return _open_session(args, "replay")


def _names_model_folder(path: Path) -> bool:
    """A folder with a manifest: what ``cudaforge extract`` writes (loaded, or refused, as one)."""
    from engine.model.folder import MANIFEST, is_model_folder

    return is_model_folder(path) or (path.is_dir() and (path / MANIFEST).exists())


def run_model(args: argparse.Namespace) -> int:
    """``cudaforge new OUT``: the model view of the folder (its tasks' sessions live in ``OUT/sessions``)."""
    from engine.config import ConfigError
    from engine.model.spec import ModelError
    from tui.model_view import check

    try:
        folder = check(args.task)  # a folder that cannot be shown is refused before the app starts
        config, _ = _settings(args)
    except (ModelError, ConfigError) as error:
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_USAGE
    app = _app(args, sessions_root=folder.sessions_root, model_folder=folder.root, config=config)
    return _run_app(args, app)


def run_new(args: argparse.Namespace) -> int:
    if args.serve:
        return _serve(_argv_for(args, "new", str(args.task)), args.port)
    if _names_model_folder(args.task):
        return run_model(args)
    from engine.config import ConfigError
    from engine.llm.errors import LLMError
    from engine.loop.session_settings import session_settings
    from engine.tasks import TaskError, load_task
    from sessions.errors import SessionError
    from sessions.repo import SessionRepo

    try:
        config, root = _settings(args)  # before the session exists: a bad config or flag creates nothing
    except ConfigError as error:
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:  # a task that cannot load is refused here, as `run` refuses it, not at the first step
        load_task(args.task, describe=False)
    except TaskError as error:
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from engine.loop.factory import check_models

        check_models(config)  # nor does a model that cannot run (no API key, a bad provider table)
        # recorded at once, so a session left before its seed resumes with its models and rounds
        repo = SessionRepo.create(root, args.task, settings=session_settings(config, config.eval.device))
    except (SessionError, ConfigError, LLMError) as error:
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _run_app(args, _app(args, sessions_root=root, session=repo, mode="live", config=config))
    finally:
        repo.close()


def run_demo(args: argparse.Namespace) -> int:
    """Unpack the bundled session into a fresh folder and replay it, saying that it is a demo."""
    if args.serve:  # each browser connection unpacks its own copy
        return _serve(_argv_for(args, "demo"), args.port)
    from sessions.repo import SessionRepo
    from tui.app import CudaforgeApp
    from tui.demo import NOTICE, DemoError, unpack

    try:
        path = unpack()
    except DemoError as error:
        print(f"cudaforge: {error}", file=sys.stderr)
        return EXIT_ERROR
    repo = SessionRepo.open(path)
    try:
        return _run_app(
            args, CudaforgeApp(sessions_root=path.parent, session=repo, mode="replay", notice=NOTICE)
        )
    finally:
        repo.close()
