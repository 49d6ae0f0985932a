"""The ``cudaforge`` command line: one argparse parser, subcommands contributed by modules.

Each module listed in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its
subcommands and sets ``func`` (a callable taking the parsed namespace and returning an exit
code). Keeping registration in the owning package keeps this file free of logic and lets the
engine and sessions packages stay importable without Textual.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "engine.cli_eval",
    "engine.doctor",
    "engine.cli_run",
    "engine.cli_bench",
    "tui.commands",
    "sessions.cli",
)

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """Build the full parser from every registered command module."""
    parser = argparse.ArgumentParser(
        prog="cudaforge",
        description="Optimize CUDA kernels with a Coder and a Judge agent, a human in the loop.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:
                continue  # a command module not written yet
            raise
        module.register(subparsers)
    from tui.commands import add_common_options

    add_common_options(
        parser
    )  # the bare `cudaforge` (session browser) takes --sessions-dir, --no-mouse, --serve
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cudaforge`` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        from tui.commands import launch_browser

        return int(launch_browser(args) or 0)
    return int(func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
