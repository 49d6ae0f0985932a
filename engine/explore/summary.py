"""What an exploration did, as its summary says it (ARCHITECTURE.md §2, "Explore"): each branch's rounds,
best kernel and cost, the exploration's best by the noise-aware ranking rule (sessions.ranking), and
whether it beat the iteration explored from. Split from engine.explore.runner, which runs the branches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.explore.plan import ExploreSpec
from engine.loop import feedback
from engine.loop.state import FINISHED
from sessions import ranking


@dataclass
class BranchSummary:
    name: str
    idea: str  # the idea's headline
    state: str
    why: str
    rounds: int  # rounds committed on the branch
    best_speedup: float | None
    best_iteration: int | None
    tokens: int
    cost_usd: float | None  # None: a call of an unpriced model (README "Models and configuration")
    best_ms: float | None = None  # the best iteration's kernel time (median per call)


@dataclass
class ExploreSummary:
    spec: ExploreSpec
    branches: list[BranchSummary] = field(default_factory=list)
    stopped: str = ""
    start_speedup: float | None = None
    outcome: str = FINISHED  # finished | paused (Ctrl-C: resume with the same command)
    # the ideas call while no branch has committed it yet (a cap reached at once): spent all the same
    uncommitted_tokens: int = 0
    uncommitted_usd: float | None = 0.0  # None: that call's model has no price
    wall_seconds: float = 0.0  # this run's, the ideas call included
    #: how the branches shared the GPUs this run (SharedDevices.stats): every evaluation's windows,
    #: their sum (against wall_seconds: what running side by side gained) and any timing that shared
    devices: dict[str, Any] | None = None
    llm_peak_in_flight: dict[str, int] = field(default_factory=dict)  # per provider, this run
    #: how the best was chosen: "kernel time" (every kernel timed on one kind of device) or "speedup"
    ranked_by: str = "speedup"
    best_branch: str | None = None  # the branch holding the best kernel, by ``ranked_by``
    #: other branches whose best kernel this run's timing cannot tell from the best (ranking.within_spread)
    within_spread: list[str] = field(default_factory=list)
    #: the best branch did not beat the iteration explored from beyond the timings' spread (a regression
    #: or a tie): nothing of this exploration is offered as an improvement
    no_gain: bool = False

    @property
    def best(self) -> BranchSummary | None:
        named = [b for b in self.branches if b.name == self.best_branch and b.best_iteration is not None]
        if named:
            return named[0]
        done = [b for b in self.branches if b.best_speedup is not None]
        return max(done, key=lambda b: b.best_speedup or 0.0) if done else None

    @property
    def cost_usd(self) -> float | None:
        """What the exploration cost; None (unknown, never $0) when any call had no price."""
        costs = [b.cost_usd for b in self.branches] + [self.uncommitted_usd]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)

    @property
    def priced_usd(self) -> float:
        """The part of the cost whose calls had a price (what "cost unknown ($x priced)" says)."""
        costs = [b.cost_usd for b in self.branches] + [self.uncommitted_usd]
        return sum(c for c in costs if c is not None)

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.branches) + self.uncommitted_tokens

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {
            "spec": vars(self.spec),
            "outcome": self.outcome,
            "stopped": self.stopped,
            "start_speedup": self.start_speedup,
            "branches": [vars(b) for b in self.branches],
            "best": None
            if best is None
            else {
                "branch": best.name,
                "iteration": best.best_iteration,
                "speedup": best.best_speedup,
                "kernel_ms": best.best_ms,
                "within_spread": list(self.within_spread),
                "beats_start": not self.no_gain,
            },  # fmt: skip
            "ranked_by": self.ranked_by,
            "tokens": self.tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "uncommitted_usd": None if self.uncommitted_usd is None else round(self.uncommitted_usd, 6),
            "wall_seconds": round(self.wall_seconds, 3),
            "evaluation_seconds": (self.devices or {}).get("evaluation_seconds"),
            "devices": self.devices,
            "llm_peak_in_flight": self.llm_peak_in_flight,
        }


def summarize(explorer: Any, outcome: str = FINISHED) -> ExploreSummary:
    """What ``explorer`` did: each branch's rounds, best and cost, and the exploration's best by the ranking rule."""
    start = next(
        (it for it in explorer.session.history(explorer.spec.source) if it.number == explorer.spec.start), None
    )
    out = ExploreSummary(
        spec=explorer.spec,
        stopped=explorer.plan.stopped,
        start_speedup=start.speedup if start is not None and start.correct else None,
        outcome=outcome,
    )
    out.uncommitted_tokens, out.uncommitted_usd = explorer._uncommitted()
    out.wall_seconds = explorer.wall_seconds
    out.devices = explorer.devices.stats() if explorer.devices is not None else None
    out.llm_peak_in_flight = dict(explorer.bounds.peak)
    how, bests = explorer._bests()
    out.ranked_by = how
    for branch in explorer.plan.branches:
        new = [it for it in explorer.session.history(branch.name) if it.number > explorer.spec.start]
        best = bests.get(branch.name)
        tokens, cost = feedback.usage_totals([r for it in new for r in it.transcript])
        out.branches.append(
            BranchSummary(
                name=branch.name,
                idea=headline(branch.idea),
                state=branch.state,
                why=branch.why,
                rounds=len(new),
                best_speedup=best.speedup if best else None,
                best_iteration=best.number if best else None,
                tokens=tokens,
                cost_usd=cost,
                best_ms=best.kernel_ms if best else None,
            )  # fmt: skip
        )
    if bests:
        key = ranking.sort_key(how)
        # the branches ran side by side, so none is the incumbent: the fastest by point estimate is
        # named, and those the timing cannot tell from it beside it (within_spread)
        first = min(bests.values(), key=key)
        out.best_branch = first.branch
        out.within_spread = [m.branch for m in sorted(ranking.within_spread(first, list(bests.values()), how), key=key)]
        if start is not None and start.correct:
            origin = ranking.measured(explorer.spec.source, start)
            out.no_gain = not ranking.beats(first, origin, ranking.ranked_by([first, origin]))
    return out


def headline(idea: dict[str, Any]) -> str:
    from engine.agents.suggestion import Suggestion

    return Suggestion.from_dict(idea).headline()


def measure_text(best: ranking.Measured | None, how: str) -> str:
    if best is None:
        return "—"
    if how == ranking.KERNEL_TIME and best.kernel_ms is not None:
        return f"{best.kernel_ms:.4g} ms ({speedup_text(best.speedup)})"
    return speedup_text(best.speedup)


def speedup_text(speedup: float | None) -> str:
    return "—" if speedup is None else f"{speedup:.2f}x"
