"""The loops of an exploration's branches, built from the settings of the command that runs it (the
``explore`` command and the workbench's chooser build them the same way)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.explore.runner import LoopFactory
from sessions.repo import SessionRepo


def branch_loops(config: Any, device: str) -> LoopFactory:
    """Loops as ``cudaforge run`` makes them from ``config`` (an ``engine.config.Config``), auto-approved,
    each branch with its own Coder and Judge kept over its rounds, and its own scripted replies where
    the scripted provider has a folder per branch (``engine.llm.scripted.branch_model``), and its own
    profiler (a profiler keeps the kernel it is about to profile; branches profile different ones).
    ``device``: the caller's resolved device (cpu or cuda), every branch's as it is."""
    from engine.llm.scripted import branch_model
    from engine.loop.factory import loop_profiler_for, make_agents, make_loop

    agents: dict[int, Any] = {}  # one Coder and Judge per branch, kept over its rounds
    profilers: dict[int, Any] = {}

    def make(session: SessionRepo, k: int, target: int, on_event: Any, branch: str) -> Any:
        models = replace(config.models, coder=branch_model(config.models.coder, k), judge=branch_model(config.models.judge, k))
        branch_config = replace(config, models=models, loop=replace(config.loop, rounds=target, approval="auto"))
        if k not in agents:
            agents[k] = make_agents(branch_config, device)
        if k not in profilers:
            profilers[k] = loop_profiler_for(config, device)
        return make_loop(
            session, branch_config, device=device, on_event=on_event, profiler=profilers[k],
            agents=agents[k], branch=branch,
        )  # fmt: skip

    return make
