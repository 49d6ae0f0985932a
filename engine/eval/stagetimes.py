"""Where a round's time went: an evaluation's stages, from its ``EvalResult.durations`` (ARCHITECTURE.md §3).

One reading for every front end (``cudaforge eval``, the headless round table, the TUI's checks table
and status line, the benchmarks), so they cannot disagree. The worker's stages are the supervisor's
clock of each stage; ``outside`` is what the evaluating process spent around the worker (the static
guard, the job file, starting the sandboxed process, reading the verdict), the wall time of
``evaluate`` that no stage explains; ``baselines`` (torch.compile of the reference, when asked for) is
the evaluating process's own stage after the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping

# (shown name, durations keys summed): the round's evaluation stages, in the order they run
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start", ("process_start", "setup")),
    ("gpu wait", ("gpu_wait",)),  # a gated worker, built, waiting for its GPU (engine.eval.pipe)
    ("reference", ("reference",)),
    ("build", ("build",)),
    ("check", ("check",)),
    ("time", ("time",)),
    ("late", ("ablation", "shapes", "done")),
)
#: stages a table shows as a column only where some evaluation had them (an exploration's gated checks)
OCCASIONAL = frozenset({"gpu wait"})
WALL = "evaluate"  # evaluate()'s own wall time, recorded by it (the static guard included)
# measured by the evaluating process once the verdict is in (engine.eval.baselines); kept out of
# ``outside``, which would otherwise blame a minute of torch.compile on the harness
AFTER = "baselines"


def breakdown(durations: Mapping[str, float] | None) -> dict[str, float]:
    """Seconds per stage (only those that ran), plus ``outside`` when the wall time was recorded."""
    durations = durations or {}
    out: dict[str, float] = {}
    for name, keys in STAGES:
        if any(k in durations for k in keys):
            out[name] = sum(float(durations.get(k) or 0.0) for k in keys)
    if AFTER in durations:  # torch.compile baselines: the parent's own stage, after the worker's verdict
        out[AFTER] = float(durations[AFTER] or 0.0)
    if WALL in durations:
        explained = sum(float(durations.get(k) or 0.0) for _, keys in STAGES for k in keys) + out.get(AFTER, 0.0)
        out["outside"] = max(0.0, float(durations[WALL]) - explained)
    return out


def total(durations: Mapping[str, float] | None) -> float | None:
    """The evaluation's wall time: ``evaluate``'s own, else the stages' sum; None when nothing ran."""
    durations = durations or {}
    if WALL in durations:
        return float(durations[WALL])
    parts = breakdown(durations)
    return sum(parts.values()) if parts else None


def line(durations: Mapping[str, float] | None, profile_s: float | None = None) -> str:
    """``build 1.8 · check 0.6 · time 0.4 · profile 6.1 · outside 0.2 s``: stages under 0.05 s left out."""
    parts = breakdown(durations)
    if profile_s is not None:
        parts["profile"] = profile_s
    outside = parts.pop("outside", None)
    if outside is not None:
        parts["outside"] = outside  # last: what no stage explains
    shown = [f"{name} {seconds:.1f}" for name, seconds in parts.items() if seconds >= 0.05]
    return (" · ".join(shown) + " s") if shown else ""
