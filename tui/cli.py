"""The ``cudaforge`` command line: one argparse parser, subcommands contributed by modules.

Each module listed in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its
subcommands and sets ``func`` (a callable taking the parsed namespace and returning an exit
code). The command modules live in ``engine/cli/`` (the TUI's own ``new``/``open``/``replay``/``demo``
in ``tui.commands``); this file only dispatches, so the engine stays importable without Textual
(ARCHITECTURE.md §8). A command module that fails to import stops the command line with a message
naming it (exit 1): a broken install must not look like a command that does not exist.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "engine.cli.eval",
    "engine.cli.guard",
    "engine.cli.doctor",
    "engine.cli.run",
    "engine.cli.explore",
    "engine.cli.bench",
    "engine.cli.evalset",
    "tui.commands",
    "engine.cli.sessions",
    "engine.cli.diff",
    "engine.cli.model",
)

# The TUI's own subcommands (registered by ``tui.commands``). When the command line starts with one,
# or is empty (the session browser), only that module is imported to parse it: the others pull in
# the evaluator and the loop, ~0.25 s before the first screen on a 2-core machine.
TUI_COMMANDS = frozenset({"new", "open", "replay", "demo"})
TUI_MODULE = "tui.commands"

EXIT_USAGE = 2
EXIT_BROKEN_INSTALL = 1


class CommandModuleError(RuntimeError):
    """A command module failed to import: cudaforge's own install is broken (not the user's input)."""

    def __init__(self, module: str, error: ImportError) -> None:
        super().__init__(
            f"cudaforge: the command module {module} does not import ({type(error).__name__}: {error}); "
            "this install is incomplete: `python -m engine.cli.deps` lists what is missing"
        )


# The module that registers each headless command: a command line naming one imports only that module
# (importing all of them took ~0.5 s of every `cudaforge eval`, a second of the evaluation's own time).
HEADLESS_COMMANDS = {
    "eval": "engine.cli.eval",
    "check": "engine.cli.guard",
    "doctor": "engine.cli.doctor",
    "run": "engine.cli.run",
    "bench": "engine.cli.bench",
    "evalset": "engine.cli.evalset",
    "sessions": "engine.cli.sessions",
    "branch": "engine.cli.sessions",
    "export": "engine.cli.sessions",
    "report": "engine.cli.sessions",
    "diff": "engine.cli.diff",
    "explore": "engine.cli.explore",
    "profile": "engine.cli.model",
    "extract": "engine.cli.model",
    "apply": "engine.cli.model",
}


def modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules needed to parse ``argv``: the named command's own (the TUI's for a TUI command
    line or none), all of them otherwise (``--help``, an unknown command)."""
    if not argv or argv[0] in TUI_COMMANDS:
        return (TUI_MODULE,)
    if argv[0] in HEADLESS_COMMANDS:
        return (HEADLESS_COMMANDS[argv[0]],)
    return COMMAND_MODULES


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """Build the parser from the given command modules (by default every registered one)."""
    from engine.cli.args import OneLineParser

    parser = OneLineParser(
        prog="cudaforge",
        description="Optimize CUDA kernels with a Coder and a Judge agent, a human in the loop.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in modules:
        # A command module that does not import is a broken install, never a command quietly missing.
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise CommandModuleError(module_name, error) from error
        module.register(subparsers)
    from tui.commands import add_common_options

    add_common_options(
        parser
    )  # the bare `cudaforge` (session browser) takes --sessions-dir, --no-mouse, --serve
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cudaforge`` console script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(modules_for(argv))
    except CommandModuleError as error:
        print(error, file=sys.stderr)
        return EXIT_BROKEN_INSTALL
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        from tui.commands import launch_browser

        return int(launch_browser(args) or 0)
    return int(func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
