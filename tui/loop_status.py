"""What the status line says about the loop: what runs, whom it waits for, or why it finished.

Plain functions (no Textual), so the wording can be tested without an app. The status line
(ARCHITECTURE.md §8) has three states, and each says what the user can do next:

* running — what runs and on which iteration ("the Coder writes #3", "evaluating #3 · build");
  the widget adds the elapsed seconds;
* waiting — for whom: "press s to run the Judge on #2", "approve, edit or reject the suggestion";
* finished — why, and the key that goes on ("+ adds rounds").

The loop's stage names are ``engine.loop.state``'s; the evaluator's sub-stages come from the
worker (``reference``, ``build``, ``check``, ``time``, ``done``).
"""

from __future__ import annotations

from typing import Any

from engine.eval import stagetimes

# The loop's own stages, as running activity (``{n}``: the iteration the round will commit).
RUNNING = {
    "reference": "checking the task's reference",
    "seed": "the Coder writes the seed #{n}",
    "judge": "the Judge reads #{prev}",
    "gate": "the approval policy decides",
    "coder": "the Coder writes #{n}",
    "evaluate": "evaluating #{n}",
    "profile": "profiling #{n}",
    "commit": "committing #{n}",
}
# The evaluator's sub-stages, shown after "evaluating #n".
EVAL_STEPS = {
    "start": "starting the worker",
    "reference": "running the reference",
    "build": "building",
    "check": "checking",
    "time": "timing",
    "done": "finishing",
}
# What ``s`` would run next, per next stage (step mode waits on the human between stages).
NEXT = {
    "seed": "press s for the Coder's seed #{n}, r for all rounds",
    "judge": "press s to run the Judge on #{prev}",
    "coder": "press s to run the Coder for #{n}",
    "evaluate": "press s to evaluate #{n}",
    "profile": "press s to profile #{n}",
    "commit": "press s to commit #{n}",
}
GATE_TEXT = "approve, edit or reject the suggestion (a shows it)"
GATE_AGAIN = "press s to see the Judge's suggestion for #{n} again"
HUMAN_EDIT = "press s to evaluate your edit as #{n} (human)"
IDLE = "press s to step one stage, r to run the rounds"


def running_text(stage: str, iteration: int | None, step: str = "") -> str:
    """The activity of a running stage (``step``: the evaluator's sub-stage, when evaluating)."""
    n = iteration if iteration is not None else 0
    text = RUNNING.get(stage, stage).format(n=n, prev=max(0, n - 1))
    if step and stage in ("evaluate", "build", "check", "time"):
        text = f"{RUNNING['evaluate'].format(n=n)} · {EVAL_STEPS.get(step, step)}"
    return text


def waiting_text(loop: Any, asked: bool = False) -> str:
    """Whom the idle loop waits for and the key that goes on, read from a loop's public facts.

    ``loop`` is an ``engine.loop.machine.Loop`` (``stage``, ``next_iteration``, ``pending.phase``,
    ``options.rounds``); a loop without these facts gets the generic hint. ``asked``: the front
    end holds the suggestion awaiting a decision (else a resumed loop must show it again first).
    """
    stage = getattr(loop, "stage", None)
    if not isinstance(stage, str):
        return IDLE
    n = getattr(loop, "next_iteration", 0)
    phase = getattr(getattr(loop, "pending", None), "phase", "")
    if stage == "done":
        return finished_text("rounds", target_of(loop))
    if stage == "gate":
        return (GATE_TEXT if asked else GATE_AGAIN).format(n=n)
    if stage == "evaluate" and phase == "human":
        return HUMAN_EDIT.format(n=n)
    return NEXT.get(stage, IDLE).format(n=n, prev=max(0, n - 1))


def target_of(loop: Any) -> int | None:
    """The loop's round target (the iteration number it stops at), when it has one."""
    rounds = getattr(getattr(loop, "options", None), "rounds", None)
    return rounds if isinstance(rounds, int) else None


def finished_text(reason: str, target: int | None = None) -> str:
    """Why the loop stopped, and the key that goes on."""
    if reason == "rounds":
        reached = f"target #{target} reached" if target is not None else "every round is done"
        return f"finished: {reached} · + adds rounds"
    if reason == "paused":
        return "paused · s steps one stage, r runs on"
    return f"finished: {reason} · + adds rounds"


def error_text(stage: str, recoverable: bool) -> str:
    """A stop on an error: where, and whether a retry can help."""
    if recoverable:
        return f"error in {stage} · s or r tries the stage again"
    return f"error in {stage}"


def round_timing(iteration: int, item: Any) -> str:
    """Where a committed round's evaluation and profile time went, for the status line:
    ``#3 9.8 s: build 1.8 · check 0.7 · time 0.4 · profile 6.1 · outside 0.2 s`` (engine.eval.stagetimes)."""
    if item is None or getattr(item, "number", None) != iteration:
        return ""
    try:
        durations = (item.read_json("eval.json") or {}).get("durations")
        seconds = item.read_json("loop.json").get("stage_seconds", {}) if "loop.json" in item.files() else {}
    except (OSError, ValueError, KeyError):
        return ""
    profile = seconds.get("profile")
    text = stagetimes.line(durations, profile)
    if not text:
        return ""
    return f"#{iteration} {(stagetimes.total(durations) or 0.0) + (profile or 0.0):.1f} s: {text}"
