"""Run candidate code (the evaluation worker and the profiled run) inside a sandbox.

ARCHITECTURE.md §4 ("the sandbox"): candidate code is untrusted. ``engine.sandbox.select.prepare`` turns a
worker command line into the command line and environment that run it confined: under bubblewrap
(namespaces: read-only root, private home/tmp, no network, own pid namespace) when bwrap can start
here, else under Landlock applied by the worker itself before it imports candidate code, else with
no sandbox at all (``off``, which warns every time).
"""

from engine.sandbox.select import (
    MODES,
    Launch,
    SandboxError,
    available_mechanisms,
    fork_blocker,
    prepare,
    prepare_forked,
    resolve_mode,
)

__all__ = [
    "MODES",
    "Launch",
    "SandboxError",
    "available_mechanisms",
    "fork_blocker",
    "prepare",
    "prepare_forked",
    "resolve_mode",
]
