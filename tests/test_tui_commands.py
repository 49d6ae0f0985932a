"""The TUI subcommands: parsing, the --serve fallback, and errors, through a real subprocess where it matters."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tui import commands

REPO = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudaforge")
    commands.add_common_options(parser)
    commands.register(parser.add_subparsers(dest="command"))
    return parser


def test_subcommands_parse_with_the_common_options() -> None:
    args = _parser().parse_args(["replay", "relu-demo", "--sessions-dir", "/tmp/s", "--no-mouse"])
    assert (args.func, args.session, args.sessions_dir, args.no_mouse, args.serve) == (
        commands.run_replay,
        "relu-demo",
        Path("/tmp/s"),
        True,
        False,
    )
    assert _parser().parse_args(["new", "t.py", "--serve"]).func is commands.run_new
    assert _parser().parse_args(["open", "x"]).func is commands.run_open
    bare = _parser().parse_args(["--no-mouse"])
    assert bare.command is None and bare.no_mouse


@pytest.mark.skipif(
    importlib.util.find_spec("textual_serve") is not None, reason="textual-serve is installed"
)
def test_serve_without_textual_serve_is_one_clear_line(capsys) -> None:
    args = _parser().parse_args(["replay", "x", "--serve"])
    assert commands.run_replay(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'textual-serve'" in err


def test_replay_of_a_missing_session_is_a_usage_error(session_root) -> None:
    code = (
        "import sys; from tui.commands import *; import argparse;"
        "p=argparse.ArgumentParser(); register(p.add_subparsers());"
        "a=p.parse_args(sys.argv[1:]); sys.exit(a.func(a))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "replay", "nope", "--sessions-dir", str(session_root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "no such session: nope" in done.stderr


def test_importing_the_app_does_not_import_torch() -> None:
    code = "import sys, tui.app, tui.commands; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_a_tui_command_line_is_parsed_without_importing_the_engine_commands() -> None:
    from tui import cli

    assert (
        cli.modules_for([])
        == cli.modules_for(["demo"])
        == cli.modules_for(["replay", "s"])
        == ("tui.commands",)
    )
    assert cli.modules_for(["eval", "t.py", "k.py"]) == ("engine.cli.eval",)
    assert cli.modules_for(["--sessions-dir", "d"]) == cli.COMMAND_MODULES  # options first: parse it all
    assert cli.modules_for(["nosuchcommand"]) == cli.COMMAND_MODULES
    code = (
        "import sys; from tui import cli; p = cli.build_parser(cli.modules_for(['demo', '--serve']));"
        "a = p.parse_args(['demo', '--serve', '--port', '8123']);"
        "print(a.func.__name__, a.port, sorted(m for m in ('engine.loop', 'engine.eval.evaluate') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "run_demo 8123 []", done.stderr


def test_each_headless_command_line_imports_the_module_that_registers_it() -> None:
    """The map from a command to its module stays true: parsing the command with that module alone works."""
    from tui import cli

    for command, module in cli.HEADLESS_COMMANDS.items():
        assert module in cli.COMMAND_MODULES
        parser = cli.build_parser(cli.modules_for([command]))
        assert command in parser._subparsers._group_actions[0].choices, command  # type: ignore[union-attr]


def test_the_full_help_still_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    for command in ("eval", "doctor", "run", "demo", "replay", "sessions"):
        assert command in done.stdout


def test_a_session_opened_from_the_browser_runs_with_its_own_stored_settings(
    tui_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `cudaforge open S` would: the session's models and round target beat the config files; the
    command line's --rounds counted from the tip of the session it named, not of every session."""
    from sessions.repo import SessionRepo
    from tests.test_tui_fixtures import TASK
    from tui.app import CudaforgeApp

    monkeypatch.chdir(tui_env)
    (tui_env / "config.toml").write_text('[models]\ncoder = "openai/o3"\n[loop]\nrounds = 10\n')
    stored = {"models": {"coder": "anthropic/claude-sonnet-4-5", "judge": "openai/o3"}, "loop": {"rounds": 7}}
    with SessionRepo.create(tui_env / "s", task_source=TASK, task_name="relu", name="kept", settings=stored) as repo:
        args = _parser().parse_args(["new", "t.py", "--rounds", "2", "--judge", "openai/gpt-4o"])
        config = commands._session_config(args, repo)
        assert (config.models.coder, config.models.judge, config.loop.rounds) == (
            "anthropic/claude-sonnet-4-5",  # stored, over the files
            "openai/gpt-4o",  # a flag, over the stored
            7,  # the stored target: --rounds belonged to the session `new` made
        )
        named = object()
        app = CudaforgeApp(sessions_root=tui_env / "s", session=repo, config=None, session_config=lambda r: named)
        assert app.loop_config_for(repo) is app.config  # the named session, first time: the command's
        assert app.loop_config_for(repo) is named  # opened again later: its own settings
