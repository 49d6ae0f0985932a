"""What the loop is doing right now, in words a person reads while waiting for it.

Both front ends say the same thing when asked to stop (ARCHITECTURE §2): an evaluation, a profile
or a commit cannot be cut short without losing what it measured, so the loop finishes it and
commits the iteration ("waiting for the build of iteration 3 to finish and be committed"); an LLM
call can, so it is cancelled and asked again on resume. The words live here, once, so the
headless line and the TUI's notice cannot drift apart; outside ``engine/loop`` (whose package
imports the whole loop) because the TUI needs them before any loop exists.
"""

from __future__ import annotations

from dataclasses import dataclass

#: stages whose work is an LLM call: a stop cancels it (the call is made again on resume)
LLM_STAGES = frozenset({"seed", "judge", "coder"})
#: the task check: the reference run on its own inputs before the first LLM call
TASK_CHECK = "task check"

_NAMES = {
    "seed": "the Coder's seed",
    "coder": "the Coder's kernel",
    "judge": "the Judge's suggestion",
    "gate": "the approval",
    "evaluate": "the evaluation",
    "start": "the evaluation",
    "setup": "the evaluation",
    "reference": "the evaluation",
    "build": "the build",
    "gpu_wait": "the wait for a GPU",
    "check": "the correctness check",
    "time": "the timing",
    "done": "the evaluation",
    "profile": "the profile",
    "commit": "the commit",
}


@dataclass(frozen=True)
class Activity:
    """One stage in flight: the loop's stage name (or a worker stage), its iteration, and detail."""

    stage: str
    iteration: int
    detail: str = ""

    @property
    def is_task_check(self) -> bool:
        return self.stage == "reference" and self.detail == TASK_CHECK

    def describe(self) -> str:
        """``the build of iteration 3``; ``the task check`` for the reference run before the seed."""
        if self.is_task_check:
            return "the task check"
        return f"{_NAMES.get(self.stage, 'the ' + self.stage)} of iteration {self.iteration}"

    def stopping(self) -> str:
        """What a stop requested now waits for (no "press again" hint: each front end adds its key)."""
        if self.stage in LLM_STAGES:
            return f"cancelling {self.describe()} (it is asked again on resume)"
        if self.is_task_check:
            return "waiting for the task check to finish"
        if self.stage == "gate":
            return f"stopping at the approval of iteration {self.iteration}"
        return f"waiting for {self.describe()} to finish and be committed"
