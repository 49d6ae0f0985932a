"""The bench's progress views (:mod:`engine.batch.progress`) showing evaluation stages instead of rounds.

A running evaluation's line reads ``level_1_problem_19_sample_0 (GPU 0)  check`` in the live bar;
the plain-lines view prints the start and the verdict of each evaluation, one line each.
"""

from __future__ import annotations

from typing import TextIO

from engine.batch.progress import LineProgress, LiveProgress, TaskState


class StageState(TaskState):
    """A running evaluation: where it runs and the evaluator stage it is in."""

    def describe(self, rounds: int | None) -> str:
        return self.stage


class _StageMixin:
    """Replaces the bench's per-task state with :class:`StageState` and takes stage changes."""

    def started(self, name: str, where: str, resumed: bool) -> None:
        super().started(name, where, resumed)  # type: ignore[misc]
        with self.lock:  # type: ignore[attr-defined]
            self.running[name] = StageState(name, where)  # type: ignore[attr-defined]

    def stage(self, name: str, stage: str) -> None:
        with self.lock:  # type: ignore[attr-defined]
            state = self.running.get(name)  # type: ignore[attr-defined]
            if state is not None:
                state.stage = stage


class EvalsetLines(_StageMixin, LineProgress):
    """One line per start and per verdict (logs, CI)."""


class EvalsetLive(_StageMixin, LiveProgress):
    """A live bar and one line per running evaluation (a terminal)."""


def make_progress(kind: str, total: int, out: TextIO) -> EvalsetLines:
    """``kind`` is ``bar``, ``lines`` or ``auto`` (the bar when ``out`` is a terminal)."""
    if kind == "auto":
        kind = "bar" if getattr(out, "isatty", lambda: False)() else "lines"
    return EvalsetLive(total, out) if kind == "bar" else EvalsetLines(total, out)
