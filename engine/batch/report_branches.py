"""The whole session in ``cudaforge report``: every branch once, and a leaderboard of their bests
(ARCHITECTURE.md §8, "The report"; §5, sessions).

Why: a session explores on several branches (ARCHITECTURE.md §2, "Explore"), and a page of one branch
hides where the best kernel came from. Branches share the iterations before their fork (the same
commits, ARCHITECTURE.md §5), so each iteration is shown once: under ``main`` when main holds it, else
under the branch that left the shown ones earliest; a branch's own section starts after its fork point.

The leaderboard names each branch's best by ``SessionRepo.best`` and the session's by
``SessionRepo.session_best`` (the one noise-aware rule, ``sessions.ranking``), prints each speedup with
its interval, and says "within spread" where this run's timing cannot order a branch against the session
best (neither ``ranking.beats`` the other) rather than implying an order that the next run may swap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.batch.report_html import escape, table
from sessions import ranking

#: how best is chosen, printed under the leaderboard (the rule lives in sessions.ranking)
BEST_RULE = (
    "How best is chosen: iterations are taken in the order they were made, and a later kernel takes the lead "
    "only by beating the current best beyond both timings' spread, or by winning a back-to-back re-timing "
    "against it; kernels the timing cannot tell apart are marked “within spread”, not ordered."
)
SESSION_BEST, SHARED, WITHIN, BEHIND, AHEAD, NONE = (
    "session best", "the same kernel as the session best", "within spread", "slower beyond spread",
    "faster beyond spread (the session best led first)", "no correct kernel",
)  # fmt: skip


@dataclass
class BranchSection:
    """One branch's part of the page: the iterations made on it (``own``), and where it left the
    iterations shown before it (``fork``: the branch they are shown under and the iteration number)."""

    name: str
    history: list[Any]  # sessions.records.Iteration, the whole first-parent history, oldest first
    own: list[Any]
    fork: tuple[str, int] | None = None
    fork_point: Any = None  # the Iteration it forked at, or None


@dataclass
class Standing:
    """One row of the leaderboard."""

    branch: str
    best: Any  # sessions.records.Iteration or None
    measured: ranking.Measured | None
    rounds: int  # iterations made on this branch
    verdict: str  # against the session best: SESSION_BEST, SHARED, WITHIN, BEHIND, AHEAD or NONE


def branch_sections(repo: Any) -> list[BranchSection]:
    """Every branch once, each iteration under one branch: ``main`` first, then, repeatedly, the branch
    whose first iteration not yet shown is the oldest (so a parent comes before the branch forked from
    it whenever it went on after the fork)."""
    names = repo.branches()
    histories = {name: repo.history(name) for name in names}
    owner: dict[str, str] = {}
    sections: list[BranchSection] = []
    remaining = list(names)
    while remaining:
        name = min(remaining, key=lambda n: _first_new(n, histories[n], owner, names.index(n)))
        remaining.remove(name)
        history = histories[name]
        shared = [it for it in history if it.sha in owner]
        section = BranchSection(name, history, [it for it in history if it.sha not in owner])
        if shared:
            section.fork, section.fork_point = (owner[shared[-1].sha], shared[-1].number), shared[-1]
        for it in section.own:
            owner[it.sha] = name
        sections.append(section)
    return sections


def _first_new(name: str, history: list[Any], owner: dict[str, str], index: int) -> tuple[Any, ...]:
    if name == "main":
        return (0,)
    new = [it for it in history if it.sha not in owner]
    return (1, new[0].timestamp, new[0].number, index) if new else (2, index)


def leaderboard(repo: Any, sections: list[BranchSection]) -> tuple[str, list[Standing]]:
    """How the session ranks (``ranking.KERNEL_TIME`` or ``SPEEDUP``) and one row per branch: the
    session best's holder first, then by point estimate, branches without a correct kernel last."""
    every = {it.sha: ranking.measured(s.name, it) for s in sections for it in s.own if it.correct}
    how = ranking.ranked_by(every.values())
    top = repo.session_best()
    top_m = every.get(top[0].sha) if top is not None else None
    rows = []
    for s in sections:
        best = repo.best(s.name)
        m = ranking.measured(s.name, best) if best is not None else None
        rows.append(Standing(s.name, best, m, len(s.own), _verdict(s.name, m, top, top_m, how)))
    order = ranking.sort_key(how)
    rows.sort(
        key=lambda r: (r.verdict != SESSION_BEST, r.measured is None, order(r.measured) if r.measured else 0)
    )
    return how, rows


def _verdict(
    name: str, m: ranking.Measured | None, top: Any, top_m: ranking.Measured | None, how: str
) -> str:
    if m is None or top is None:
        return NONE
    if m.sha == top[0].sha:
        return SESSION_BEST if name == top[1] else SHARED
    if top_m is None:
        return WITHIN
    if ranking.beats(top_m, m, how):
        return BEHIND
    return AHEAD if ranking.beats(m, top_m, how) else WITHIN


def kernel_spread(m: ranking.Measured | None) -> str:
    """``0.0700 ms (p25–p75 0.0680–0.0720)``; the median alone in records without quartiles."""
    if m is None or m.kernel_ms is None:
        return "—"
    if m.kernel_p25_ms is None or m.kernel_p75_ms is None:
        return f"{m.kernel_ms:.4g} ms"
    return f"{m.kernel_ms:.4g} ms (p25–p75 {m.kernel_p25_ms:.4g}–{m.kernel_p75_ms:.4g})"


def leaderboard_html(how: str, standings: list[Standing]) -> str:
    """The leaderboard table and the line on how best is chosen."""
    rows = [
        [
            escape(s.branch),
            f"#{s.best.number}" if s.best is not None else "—",
            escape(ranking.label(s.measured)) if s.measured is not None else "—",
            escape(kernel_spread(s.measured)),
            str(s.rounds),
            f"<b>{escape(s.verdict)}</b>" if s.verdict == SESSION_BEST else escape(s.verdict),
        ]
        for s in standings
    ]
    header = (
        "branch",
        "best",
        "speedup (interval)",
        "kernel time (p25–p75)",
        "rounds",
        "against the session best",
    )
    ranked = f"Ranked by {escape(how)}. " if standings else ""
    return table(header, rows, numeric=(2, 3, 4)) + f"<p class=note>{ranked}{escape(BEST_RULE)}</p>"


def section_heading(section: BranchSection) -> str:
    """The heading and the one line above a branch's iteration table."""
    if section.fork is not None:
        parent, number = section.fork
        where = f"branched at iteration {number} (shown under {escape(parent)})"
    else:
        where = "the session's first branch"
    own = len(section.own)
    return f"<h3>Branch {escape(section.name)}</h3><p>{where}; {own} iteration{'s' if own != 1 else ''} of its own.</p>"
