"""The step-wise optimisation loop: state machine, approval policies, session-derived state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.loop.machine import AWAITING, ERROR, FINISHED, PAUSED, Loop, LoopOptions, LoopStateError, Profiler

__all__ = [
    "AWAITING",
    "ERROR",
    "FINISHED",
    "PAUSED",
    "Loop",
    "LoopOptions",
    "LoopStateError",
    "Profiler",
    "create_loop",
]


def create_loop(repo: Any, on_event: Callable[[Any], None] | None = None, config: Any = None) -> Loop:
    """A loop on an open session: the TUI's entry point.

    ``config`` is the resolved settings of the command that opened the TUI (files and flags, see
    ``engine.config``); without one the config files alone decide. Same wiring as ``cudaforge run``:
    NCU/PyTorch-profiler feedback when the configured device resolves to CUDA.
    """
    from engine.config import load_config
    from engine.eval.options import resolve_device
    from engine.loop.factory import make_loop

    config = config if config is not None else load_config()
    profiler = None
    if config.profile.enabled and resolve_device(config.eval.device) == "cuda":
        from engine.profile.candidate import loop_profiler

        profiler = loop_profiler(config.profile.metrics, sandbox=config.eval.sandbox)
    return make_loop(repo, config, device=config.eval.device, on_event=on_event, profiler=profiler)
