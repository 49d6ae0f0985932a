"""Shared setup of the loop tests: real sessions, real scripted providers, real CPU evaluations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.agents.roles import Coder, Judge
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from engine.events import Event
from engine.llm.scripted import ScriptedProvider
from engine.loop.machine import Loop, LoopOptions, Profiler
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES

SCRIPTED = Path(__file__).resolve().parent / "fixtures" / "scripted"
RELU_TASK = EXAMPLES / "tasks" / "relu.py"
RELU_KERNEL = EXAMPLES / "kernels" / "relu_cpu.py"


def fast_eval(cache: Path, sandbox: str = "auto") -> EvalOptions:
    return EvalOptions(
        device="cpu",
        trials=2,
        timing=TimingPlan(min_trials=5, budget_s=1.0),
        cache_root=cache,
        sandbox=sandbox,
    )


def new_session(tmp_path: Path) -> SessionRepo:
    return SessionRepo.create(tmp_path / "sessions", RELU_TASK, name="relu-test")


def agents(coder_dir: Path, judge_dir: Path, chunk_delay_s: float = 0.0) -> tuple[Coder, Judge]:
    return (
        Coder(ScriptedProvider(str(coder_dir), chunk_delay_s=chunk_delay_s), "cpu"),
        Judge(ScriptedProvider(str(judge_dir)), "cpu"),
    )


def make_loop(
    session: SessionRepo,
    cache: Path,
    scenario: str | None = None,
    *,
    coder_dir: Path | None = None,
    judge_dir: Path | None = None,
    approval: str = "auto",
    rounds: int = 2,
    events: list[Event] | None = None,
    profiler: Profiler | None = None,
    on_event: Any = None,
    chunk_delay_s: float = 0.0,
    sandbox: str = "auto",
) -> Loop:
    coder_dir = coder_dir or SCRIPTED / str(scenario) / "coder"
    judge_dir = judge_dir or SCRIPTED / str(scenario) / "judge"
    coder, judge = agents(coder_dir, judge_dir, chunk_delay_s)
    sink = on_event or (events.append if events is not None else None)
    options = LoopOptions(
        rounds=rounds,
        approval=approval,
        eval_options=fast_eval(cache, sandbox),
        settings={"loop": {"rounds": rounds}},
    )
    return Loop(session, coder, judge, options, on_event=sink, profiler=profiler)
