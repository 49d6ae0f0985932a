"""An exploration's cost and token caps (ARCHITECTURE.md §2, "Explore"): what was spent, counted from the
commits (and the ideas call before any branch commits it), checked before every round of every branch.
Split from engine.explore.runner.
"""

from __future__ import annotations

from typing import Any

from engine.explore.plan import STOPPED
from engine.loop import feedback


def uncommitted(explorer: Any) -> tuple[int, float | None]:
    """The ideas call's tokens and cost while branch 1's first commit does not hold them yet."""
    committed = any(
        it.number > explorer.spec.start for b in explorer.plan.branches[:1] for it in explorer.session.history(b.name)
    )
    if not explorer.plan.ideas_record or committed:
        return 0, 0.0
    return feedback.usage_totals([explorer.plan.ideas_record])


def spent(explorer: Any) -> tuple[int, float]:
    tokens, ideas_cost = uncommitted(explorer)
    cost = ideas_cost or 0.0  # the caps count what was priced
    for branch in explorer.plan.branches:
        for it in explorer.session.history(branch.name):
            if it.number > explorer.spec.start:
                tokens += it.tokens
                cost += it.cost_usd or 0.0
    return tokens, cost


def over_cap(explorer: Any) -> bool:
    """True once a cap is spent (said once; every running branch is stopped with the reason). What
    counts is what was committed: rounds in flight beside this one finish and add theirs."""
    with explorer._lock:
        if explorer.plan.stopped:
            return True
        return check_caps(explorer)


def check_caps(explorer: Any) -> bool:
    tokens, cost = spent(explorer)
    spec = explorer.spec
    why = ""
    if spec.max_cost_usd is not None and cost >= spec.max_cost_usd:
        why = f"the cost cap ${spec.max_cost_usd:g} was reached (${cost:.4f} spent)"
    elif spec.max_tokens is not None and tokens >= spec.max_tokens:
        why = f"the token cap {spec.max_tokens} was reached ({tokens} spent)"
    if not why:
        return False
    explorer.plan.stopped = why
    for branch in explorer.plan.running():
        branch.state, branch.why = STOPPED, why
    explorer._save_plan()
    explorer.say(f"stopped: {why}")
    return True
