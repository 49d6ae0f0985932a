"""Build a :class:`~engine.loop.machine.Loop` from a :class:`~engine.config.Config`.

Both front ends (the TUI and ``cudaforge run --headless``) need the same wiring — providers from
model names and provider tables, agents for the right backend, evaluation options from the
``[eval]`` table, and the settings recorded in ``session.toml`` — so it lives here, once.

The device comes in resolved (``cpu`` or ``cuda``: the command resolved ``--device`` once, or
:func:`create_loop`, the TUI's entry, did) and goes into the loop's ``EvalOptions`` as it is; the guard
settings are made here once from the config's ``[guard]`` (flags, session and files merged by
``engine.cli.args.loop_config``) and travel in those options to every evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.agents.roles import Coder, Judge
from engine.config import Config
from engine.eval.options import EvalOptions
from engine.events import Event
from engine.llm.registry import make_provider
from engine.loop.machine import Loop, LoopOptions, Profiler
from engine.loop.session_settings import session_settings
from sessions.repo import SessionRepo


def check_models(config: Config) -> None:
    """Make both agents' providers once and drop them: a model that cannot be used (no API key, a bad
    provider table) raises here, before a command creates a session it could never fill."""
    prices = config.prices or None
    for name in (config.models.coder, config.models.judge):
        make_provider(name, config.provider_settings(name), prices)


def make_agents(config: Config, device: str) -> tuple[Coder, Judge]:
    """The Coder and Judge ``config`` names, for the backend of ``device`` (resolved: cpu or cuda)."""
    backend = "cuda" if device == "cuda" else "cpu"
    prices = config.prices or None
    coder = Coder(
        make_provider(config.models.coder, config.provider_settings(config.models.coder), prices), backend
    )
    judge = Judge(
        make_provider(config.models.judge, config.provider_settings(config.models.judge), prices), backend
    )
    return coder, judge


def make_loop(
    session: SessionRepo,
    config: Config,
    *,
    device: str,
    on_event: Callable[[Event], None] | None = None,
    profiler: Profiler | None = None,
    hardware: str = "",
    cache_root: Path | None = None,
    agents: tuple[Coder, Judge] | None = None,
    branch: str | None = None,
    evaluator: Callable[..., Any] | None = None,
) -> Loop:
    """A loop for ``session`` as ``config`` says, evaluating on ``device`` (resolved by the caller: cpu
    or cuda; the config's ``[eval] device`` is the user's choice, not read here).
    ``agents``: the Coder and Judge to use instead of new ones (an exploration keeps one pair per branch
    over its rounds, so a scripted branch goes on through its replies). ``branch``: the branch the loop
    writes (default: HEAD's). ``evaluator``: what evaluates a kernel (LoopOptions.evaluator)."""
    coder, judge = agents or make_agents(config, device)
    options = LoopOptions(
        rounds=config.loop.rounds,
        approval=config.loop.approval,
        max_repeat_asks=config.loop.repeat_asks,
        retime_within=config.loop.retime_within,
        eval_options=EvalOptions.from_config(config, device, cache_root),
        hardware=hardware,
        settings=session_settings(config, device),
        evaluator=evaluator,
    )
    return Loop(
        session,
        coder,
        judge,
        options,
        on_event=on_event,
        profiler=profiler if config.profile.enabled else None,
        branch=branch,
    )


def create_loop(repo: Any, on_event: Callable[[Any], None] | None = None, config: Any = None) -> Loop:
    """A loop on an open session: the TUI's entry point.

    ``config`` is the resolved settings of the command that opened the TUI (files and flags, see
    ``engine.config``); without one the config files alone decide. Same wiring as ``cudaforge run``:
    the device resolved once, here (an EvaluationError for ``cuda`` where there is none), and
    NCU/PyTorch-profiler feedback when it is CUDA.
    """
    from engine.config import load_config
    from engine.eval.options import resolve_device

    config = config if config is not None else load_config()
    device = resolve_device(config.eval.device)
    return make_loop(repo, config, device=device, on_event=on_event, profiler=loop_profiler_for(config, device))


def loop_profiler_for(config: Config, device: str) -> Profiler | None:
    """The profiler a loop on ``device`` (resolved) gets from ``config``: ncu or the PyTorch profiler on
    CUDA when ``[profile] enabled``; none on the CPU."""
    if not (config.profile.enabled and device == "cuda"):
        return None
    from engine.profile.candidate import loop_profiler

    return loop_profiler(config.profile.metrics, sandbox=config.eval.sandbox)
