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


def create_loop(repo: Any, on_event: Callable[[Any], None] | None = None) -> Loop:
    """A loop on an open session with the user's configuration: the TUI's entry point.

    Same wiring as ``cudaforge run``: config files, and NCU/PyTorch-profiler feedback when the
    configured device resolves to CUDA.
    """
    from engine.config import load_config
    from engine.evaluate import resolve_device
    from engine.loop.factory import make_loop

    config = load_config()
    profiler = None
    if config.profile.enabled and resolve_device(config.eval.device) == "cuda":
        from engine.profile.candidate import loop_profiler

        profiler = loop_profiler(config.profile.metrics, sandbox=config.eval.sandbox)
    return make_loop(repo, config, device=config.eval.device, on_event=on_event, profiler=profiler)
