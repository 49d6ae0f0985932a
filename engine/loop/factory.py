"""Build a :class:`~engine.loop.machine.Loop` from a :class:`~engine.config.Config`.

Both front ends (the TUI and ``cudaforge run --headless``) need the same wiring — providers from
model names and provider tables, agents for the right backend, evaluation options from the
``[eval]`` table, and the settings recorded in ``session.toml`` — so it lives here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.agents.roles import Coder, Judge
from engine.config import Config
from engine.evaluate import EvalOptions, StageTimeouts, resolve_device
from engine.events import Event
from engine.llm.registry import make_provider
from engine.loop.machine import Loop, LoopOptions, Profiler
from engine.timing import TimingPlan
from sessions.repo import SessionRepo


def eval_options(config: Config, device: str, cache_root: Path | None = None) -> EvalOptions:
    e = config.eval
    return EvalOptions(
        device=device,
        trials=e.trials,
        seed=e.seed,
        tolerances=dict(e.tolerances),
        timing=TimingPlan(min_trials=e.timing_trials, budget_s=e.timing_budget_s),
        timeouts=StageTimeouts(**vars(e.timeouts)),
        cache_root=cache_root,
        sandbox=e.sandbox,
    )


def session_settings(config: Config, device: str) -> dict[str, Any]:
    """What ``session.toml`` records about how the session runs (never a key: only variable names)."""
    return {
        "models": {"coder": config.models.coder, "judge": config.models.judge},
        "loop": {"rounds": config.loop.rounds, "approval": config.loop.approval},
        "eval": {
            "device": device,
            "trials": config.eval.trials,
            "timing_trials": config.eval.timing_trials,
            "seed": config.eval.seed,
            "tolerances": dict(config.eval.tolerances),
        },
        "profile": {"enabled": config.profile.enabled, "metrics": config.profile.metrics},
    }


def make_loop(
    session: SessionRepo,
    config: Config,
    *,
    device: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    profiler: Profiler | None = None,
    hardware: str = "",
    cache_root: Path | None = None,
) -> Loop:
    """A loop for ``session`` as ``config`` says; ``device`` (cpu/cuda/auto) defaults to ``[eval] device``."""
    device = resolve_device(device or config.eval.device)
    backend = "cuda" if device == "cuda" else "cpu"
    prices = config.prices or None
    coder = Coder(
        make_provider(config.models.coder, config.provider_settings(config.models.coder), prices), backend
    )
    judge = Judge(
        make_provider(config.models.judge, config.provider_settings(config.models.judge), prices), backend
    )
    options = LoopOptions(
        rounds=config.loop.rounds,
        approval=config.loop.approval,
        eval_options=eval_options(config, device, cache_root),
        hardware=hardware,
        settings=session_settings(config, device),
    )
    return Loop(
        session,
        coder,
        judge,
        options,
        on_event=on_event,
        profiler=profiler if config.profile.enabled else None,
    )
