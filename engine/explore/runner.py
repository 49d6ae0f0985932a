"""Explore: K ideas from one iteration, each pursued on its own branch for R rounds (ARCHITECTURE.md §2).

Flow: the Judge is asked once, at iteration N of the source branch, for K different ideas
(``Loop.judge_ideas``). Idea k becomes branch ``explore/<N>-<k>``, made at N. Its first round
starts at the Coder with that idea approved, and later rounds are ordinary auto-approved loop rounds.
The rounds go round by round over the branches. After each round ``--beam W`` keeps only the W best
correct branches; the others are recorded as pruned, with their speedup. A cost or token cap
stops the whole exploration between two rounds of a branch.

One process writes every branch, one loop at a time. Each loop takes the session's writer lock and
commits to its own branch, as ``cudaforge run`` does. So the journal, Ctrl-C and resume behave as
in a single branch: a stop finishes the evaluation in flight and commits it. ``explore`` with the
same arguments then goes on from the plan (``engine.explore.plan``): the ideas are not asked again,
and no committed round is run twice.

A person may stand at the gate once per idea: ``propose`` asks the Judge and keeps its ideas in the plan
without making a branch; ``choose`` then makes a branch for each idea picked, changed or added (the
workbench's chooser). ``run`` alone takes every idea as given.

What this module does not do yet (issue 28): run branches side by side (LLM calls, builds and checks
in parallel, timing alone per GPU), or spread them over hosts with Ray.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from engine import approval as approvals
from engine.events import Event, LoopError
from engine.explore.plan import (
    DONE,
    FAILED,
    PRUNED,
    RUNNING,
    STOPPED,
    BranchState,
    ExplorePlan,
    ExploreSpec,
    branch_name,
    load_plan,
    save_plan,
)
from engine.loop import feedback
from engine.loop.machine import ERROR, FINISH_BEFORE_STOPPING, FINISHED, PAUSED, Loop
from engine.loop.state import CODER, JUDGE, Pending, clear_journal, derive, read_journal, save_journal
from engine.loop.state import DONE as LOOP_DONE
from sessions.repo import SessionRepo

#: ``(session, k, rounds_target, on_event) -> Loop`` on the session's current branch. k is 1-based; 0 is
#: the loop that asks for the ideas. The front end builds the agents (the scripted provider can give
#: each branch its own replies).
LoopFactory = Callable[[SessionRepo, int, int, Callable[[Event], None]], Loop]


class ExploreError(RuntimeError):
    """An exploration that cannot start or resume as asked (the message says what to do)."""


@dataclass(frozen=True)
class Choice:
    """One idea a branch will pursue (``Explorer.choose``): ``idea`` as it will be sent to the Coder, and
    ``suggested``, the Judge's idea it was changed from ({} when the idea is the person's own; None when
    it is the Judge's, unchanged)."""

    idea: dict[str, Any]
    suggested: dict[str, Any] | None = None

    @classmethod
    def edited(cls, original: dict[str, Any], text: str) -> Choice:
        """The Judge's ``original`` idea, rewritten by a person as ``text``."""
        from engine.agents.suggestion import Suggestion

        return cls(Suggestion.from_text(str(original.get("mode") or "optimize"), text).to_dict(), dict(original))

    @classmethod
    def own(cls, text: str, mode: str = "optimize") -> Choice:
        """An idea the person adds of their own."""
        from engine.agents.suggestion import Suggestion

        return cls(Suggestion.from_text(mode, text).to_dict(), {})


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
    cost_usd: float


@dataclass
class ExploreSummary:
    spec: ExploreSpec
    branches: list[BranchSummary] = field(default_factory=list)
    stopped: str = ""
    start_speedup: float | None = None
    outcome: str = FINISHED  # finished | paused (Ctrl-C: resume with the same command)
    # the ideas call while no branch has committed it yet (a cap reached at once): spent all the same
    uncommitted_tokens: int = 0
    uncommitted_usd: float = 0.0

    @property
    def best(self) -> BranchSummary | None:
        done = [b for b in self.branches if b.best_speedup is not None]
        return max(done, key=lambda b: b.best_speedup or 0.0) if done else None

    @property
    def cost_usd(self) -> float:
        return sum(b.cost_usd for b in self.branches) + self.uncommitted_usd

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
            "best": None if best is None else {"branch": best.name, "iteration": best.best_iteration,
                                               "speedup": best.best_speedup},  # fmt: skip
            "tokens": self.tokens,
            "cost_usd": round(self.cost_usd, 6),
            "uncommitted_usd": round(self.uncommitted_usd, 6),
        }


class Explorer:
    """Runs (or resumes) one exploration of ``session`` (see the module docstring)."""

    def __init__(
        self,
        session: SessionRepo,
        spec: ExploreSpec,
        make_loop: LoopFactory,
        on_line: Callable[[str], None] = lambda line: None,
        on_event: Callable[[Event], None] = lambda event: None,
    ) -> None:
        if spec.width < 1 or spec.rounds < 1:
            raise ExploreError("--width and --rounds must be at least 1")
        if spec.beam is not None and spec.beam < 1:
            raise ExploreError("--beam must be at least 1")
        self.session = session
        self.spec = spec
        self.make_loop = make_loop
        self.say = on_line
        self.on_event = on_event
        self._stop = threading.Event()
        self._loop: Loop | None = None
        self._errors: list[str] = []
        session.acquire_lock()  # held over every branch's loop (each is told to keep it when closed)
        self.plan = self._open_plan()

    # ------------------------------------------------------------------ control (any thread)

    def stop(self) -> None:
        """Stop at the next boundary: the round in flight finishes its evaluation and commit first."""
        self._stop.set()
        loop = self._loop
        if loop is not None:
            loop.stop()

    # ------------------------------------------------------------------ plan

    def _open_plan(self) -> ExplorePlan:
        spec = self.spec
        history = self.session.history(spec.source)
        if not any(it.number == spec.start for it in history):
            raise ExploreError(f"branch {spec.source!r} has no iteration {spec.start}")
        journal, _ = read_journal(self.session)
        if journal is not None and not journal.branch.startswith(f"explore/{spec.start}-"):
            raise ExploreError(
                f"branch {journal.branch!r} has an unfinished round (at its {journal.stage} stage); finish it "
                f"first (cudaforge run --headless --session {self.session.name} --branch {journal.branch}), "
                "so that exploring does not drop it"
            )
        plan = load_plan(self.session.path, spec.start)
        if plan is None:
            for k in range(1, spec.width + 1):
                if branch_name(spec.start, k) in self.session.branches():
                    raise ExploreError(
                        f"branch {branch_name(spec.start, k)} exists but no exploration from iteration "
                        f"{spec.start} is recorded; delete the branch or explore from another iteration"
                    )
            plan = ExplorePlan(spec=spec)
            save_plan(self.session.path, plan)
            return plan
        old = plan.spec
        if not plan.asked and not plan.proposed and old.source == spec.source:
            old = spec  # nothing was made from the first try (it failed or was stopped): take this one
        if (old.source, old.width) != (spec.source, spec.width):
            raise ExploreError(
                f"iteration {spec.start} was explored from branch {old.source!r} with width {old.width}; "
                f"resume with --branch {old.source} --width {old.width}"
            )
        plan.spec = spec  # rounds, beam and caps may change on a resume
        # A resume goes on as a single branch's would: a failed round is tried again, a cap is checked
        # anew, and a finished branch goes on when more rounds are asked for. What the beam cut stays cut.
        plan.stopped = ""
        for branch in plan.branches:
            done = branch.name in self.session.branches() and self.session.history(branch.name)[-1].number
            if branch.state in (FAILED, STOPPED) or (branch.state == DONE and done < spec.start + spec.rounds):
                branch.state, branch.why = RUNNING, ""
        save_plan(self.session.path, plan)
        return plan

    # ------------------------------------------------------------------ running

    def run(self) -> ExploreSummary:
        """Ask for the ideas (once), then run every branch round by round; the summary at the end. The
        session's current branch is the source branch again afterwards, whatever happened."""
        try:
            return self._run()
        finally:
            self.session.switch_branch(self.spec.source)

    def _run(self) -> ExploreSummary:
        self._stash_journal()  # a round a stop or kill left unfinished waits for its branch's turn
        if not self.plan.asked and not self._ask_for_ideas():
            return self.summary(PAUSED if self._stop.is_set() else FINISHED)
        start = self.spec.start
        for r in range(1, self.spec.rounds + 1):
            for branch in self.plan.running():
                if self._stop.is_set():
                    return self.summary(PAUSED)
                if self._over_cap():
                    return self.summary(FINISHED)
                tip = self.session.history(branch.name)[-1].number
                if tip >= start + r:
                    continue  # committed before a resume
                outcome = self._run_round(branch, start + r)
                if outcome == PAUSED:
                    return self.summary(PAUSED)
            if r < self.spec.rounds:  # after the last round every branch has finished: nothing to cut
                self._prune(r)
        for branch in self.plan.running():
            branch.state = DONE
        save_plan(self.session.path, self.plan)
        return self.summary(FINISHED)

    def _ask_for_ideas(self) -> bool:
        """The Judge's ideas (asked once), each pursued as given on its own branch: what ``explore`` does
        without a person choosing. False when stopped before the reply came back."""
        ideas = self.propose()
        if not ideas:
            return False
        self.choose([Choice(idea) for idea in ideas], decided_by=approvals.decided_by_policy(approvals.AUTO))
        return True

    def propose(self) -> list[dict[str, Any]]:
        """Ask the Judge for the spec's K ideas and keep them in the plan, making no branch for them yet: a
        person may choose among them first (``choose``). The call is made once; later the kept ideas
        are returned. Empty when a stop came before the reply."""
        if self.plan.proposed:
            return [dict(idea) for idea in self.plan.proposed]
        if self.plan.asked:
            raise ExploreError(f"the ideas from iteration {self.spec.start} were chosen already")
        spec = self.spec
        first = branch_name(spec.start, 1)
        if first not in self.session.branches():
            self.session.branch_from(spec.start, name=first, branch=spec.source)
        self.session.switch_branch(first)
        self.say(f"asking the Judge for {spec.width} ideas about iteration {spec.start} of {spec.source}")
        loop = self._open_loop(0, spec.start + 1)
        try:
            if loop.stage != JUDGE:
                raise ExploreError(f"iteration {spec.start} cannot be explored: its loop is at {loop.stage}")
            try:
                turn = loop.judge_ideas(spec.width)
            except Exception as error:  # an LLM error or a cancel: nothing is made, the next run asks again
                if self._stop.is_set():
                    return False
                raise ExploreError(f"the Judge's ideas: {error}") from error
        finally:
            self._close_loop(loop)
        if not any(i.parsed or i.text.strip() for i in turn.ideas):
            raise ExploreError("the Judge's reply held no idea (it was empty); nothing was made, run again to ask again")
        self.plan.ideas_record = turn.record
        self.plan.proposed = [idea.to_dict() for idea in turn.ideas]
        if len(turn.ideas) < spec.width:
            self.say(f"the Judge gave {len(turn.ideas)} different idea(s), not {spec.width}")
        save_plan(self.session.path, self.plan)
        return [dict(idea) for idea in self.plan.proposed]

    def choose(self, choices: list[Choice], decided_by: str = approvals.HUMAN, rounds: int | None = None) -> None:
        """A branch for each chosen idea, ``explore/<N>-1`` onwards in the order given, and nothing for
        the ideas left out. ``decided_by`` is who chose: each branch's first round records it as the
        idea's approver, as a gate does for one suggestion. ``rounds``: per branch, when the person
        changed it while choosing."""
        if self.plan.asked:
            raise ExploreError(f"the ideas from iteration {self.spec.start} were chosen already")
        if not choices:
            raise ExploreError("no idea was chosen: nothing to explore")
        if rounds is not None and rounds != self.spec.rounds:
            if rounds < 1:
                raise ExploreError("--rounds must be at least 1")
            self.spec = self.plan.spec = replace(self.spec, rounds=rounds)
        for k, choice in enumerate(choices, start=1):
            name = branch_name(self.spec.start, k)
            if name not in self.session.branches():
                self.session.branch_from(self.spec.start, name=name, branch=self.spec.source)
            self.plan.branches.append(BranchState(name=name, idea=dict(choice.idea), suggested=choice.suggested))
            self.say(f"{name}: {_headline(choice.idea)}{'' if choice.suggested is None else ' (changed by hand)'}")
        self.plan.decided_by = decided_by
        self.plan.asked = True
        save_plan(self.session.path, self.plan)

    def _run_round(self, branch: BranchState, target: int) -> str:
        """One round of ``branch``, up to iteration ``target``; the loop's outcome."""
        self.session.switch_branch(branch.name)
        k = self.plan.branches.index(branch) + 1
        history = self.session.history(branch.name)
        if branch.journal is not None:  # its own unfinished round (the loop checks it still fits the tip)
            save_journal(self.session, Pending.from_dict(branch.journal))
            branch.journal = None
            save_plan(self.session.path, self.plan)
        elif history[-1].number == self.spec.start:
            self._start_with_idea(branch, k, history[-1].sha)
        self.say(f"{branch.name}: round {target - self.spec.start} (iteration {target})")
        self._errors = []
        try:
            loop = self._open_loop(k, target)
            try:
                outcome = self._drive(loop)
            finally:
                self._close_loop(loop)
        finally:
            self._stash_journal()
            self.session.switch_branch(self.spec.source)  # HEAD is on an exploration's branch only mid-round
        if outcome == ERROR:
            branch.state, branch.why = FAILED, "; ".join(self._errors) or "the round failed"
            self.say(f"{branch.name}: stopped: {branch.why}")
        elif outcome == FINISHED:
            tip = self.session.history(branch.name)[-1]
            self.say(f"{branch.name}: iteration {tip.number} {tip.status} {_x(tip.speedup)}")
        save_plan(self.session.path, self.plan)
        return outcome

    def _start_with_idea(self, branch: BranchState, k: int, tip_sha: str) -> None:
        """The branch's first round begins at the Coder with its idea approved, unless a journal of
        that round is there already (a resume after a stop mid-round)."""
        journal, _ = read_journal(self.session)
        if journal is not None and journal.branch == branch.name and journal.base == tip_sha:
            return
        pending = derive(self.session, self.spec.start + 1, branch.name)
        transcript = [self.plan.ideas_record] if k == 1 and self.plan.ideas_record else []
        pending = replace(
            pending,
            stage=CODER,
            phase=str(branch.idea.get("mode") or pending.phase),
            suggestion=dict(branch.suggested or branch.idea),
            approved=dict(branch.idea),
            approved_by=self.plan.decided_by or approvals.decided_by_policy(approvals.AUTO),
            edited=branch.suggested is not None,
            transcript=transcript,
        )
        save_journal(self.session, pending)

    def _drive(self, loop: Loop) -> str:
        """The round stage by stage, so a stop asked for at any moment takes effect at the next stage
        boundary (``Loop.run`` would take a stop that came before it started as spent). As in a single
        branch, an evaluated kernel is still profiled and committed first."""
        while True:
            if self._stop.is_set() and loop.stage not in FINISH_BEFORE_STOPPING and loop.stage != LOOP_DONE:
                return PAUSED
            outcome = loop.step()
            if outcome is not None:
                return outcome

    def _stash_journal(self) -> None:
        """Move an unfinished round of one of this exploration's branches from the session's one journal
        into that branch's entry of the plan, so the next branch's loop cannot overwrite it."""
        journal, _ = read_journal(self.session)
        branch = next((b for b in self.plan.branches if journal is not None and b.name == journal.branch), None)
        if journal is None or branch is None:
            return
        branch.journal = journal.to_dict()
        save_plan(self.session.path, self.plan)  # first: a kill between the two keeps it in one place
        clear_journal(self.session)

    def _open_loop(self, k: int, target: int) -> Loop:
        def on_event(event: Event) -> None:
            if isinstance(event, LoopError):
                self._errors.append(event.message)
            self.on_event(event)

        loop = self.make_loop(self.session, k, target, on_event)
        loop.release_lock_on_close = False
        loop.set_approval_policy(approvals.AUTO)  # inside its branch an idea runs without asking
        for notice in loop.notices:
            self.say(f"note: {notice}")
        self._loop = loop
        if self._stop.is_set():
            loop.stop()
        return loop

    def _close_loop(self, loop: Loop) -> None:
        self._loop = None
        loop.close()

    # ------------------------------------------------------------------ beam and caps

    def _branch_best(self, name: str) -> tuple[float | None, int | None]:
        new = [it for it in self.session.history(name) if it.number > self.spec.start and it.correct]
        if not new:
            return None, None
        best = max(new, key=lambda it: (it.speedup or 0.0, -it.number))
        return best.speedup, best.number

    def _prune(self, r: int) -> None:
        beam = self.spec.beam
        running = self.plan.running()
        if beam is None or not running:
            return
        ranked = sorted(running, key=lambda b: -(self._branch_best(b.name)[0] or -1.0))
        kept = [b for b in ranked if self._branch_best(b.name)[0] is not None][:beam]
        cut = min((self._branch_best(b.name)[0] or 0.0) for b in kept) if kept else None
        for branch in running:
            if branch in kept:
                continue
            speedup = self._branch_best(branch.name)[0]
            branch.state = PRUNED
            branch.why = (
                f"beam {beam} after round {r}: best {_x(speedup)}, below the {len(kept)} kept (>= {_x(cut)})"
                if speedup is not None
                else f"beam {beam} after round {r}: no correct kernel yet"
            )
            self.say(f"{branch.name}: pruned ({branch.why})")
        save_plan(self.session.path, self.plan)

    def _uncommitted(self) -> tuple[int, float]:
        """The ideas call's tokens and cost while branch 1's first commit does not hold them yet."""
        committed = any(
            it.number > self.spec.start for b in self.plan.branches[:1] for it in self.session.history(b.name)
        )
        if not self.plan.ideas_record or committed:
            return 0, 0.0
        tokens, cost = feedback.usage_totals([self.plan.ideas_record])
        return tokens, cost or 0.0

    def _spent(self) -> tuple[int, float]:
        tokens, cost = self._uncommitted()
        for branch in self.plan.branches:
            for it in self.session.history(branch.name):
                if it.number > self.spec.start:
                    tokens += it.tokens
                    cost += it.cost_usd or 0.0
        return tokens, cost

    def _over_cap(self) -> bool:
        tokens, cost = self._spent()
        spec = self.spec
        why = ""
        if spec.max_cost_usd is not None and cost >= spec.max_cost_usd:
            why = f"the cost cap ${spec.max_cost_usd:g} was reached (${cost:.4f} spent)"
        elif spec.max_tokens is not None and tokens >= spec.max_tokens:
            why = f"the token cap {spec.max_tokens} was reached ({tokens} spent)"
        if not why:
            return False
        self.plan.stopped = why
        for branch in self.plan.running():
            branch.state, branch.why = STOPPED, why
        save_plan(self.session.path, self.plan)
        self.say(f"stopped: {why}")
        return True

    # ------------------------------------------------------------------ results

    def summary(self, outcome: str = FINISHED) -> ExploreSummary:
        start = next((it for it in self.session.history(self.spec.source) if it.number == self.spec.start), None)
        out = ExploreSummary(
            spec=self.spec,
            stopped=self.plan.stopped,
            start_speedup=start.speedup if start is not None and start.correct else None,
            outcome=outcome,
        )
        out.uncommitted_tokens, out.uncommitted_usd = self._uncommitted()
        for branch in self.plan.branches:
            new = [it for it in self.session.history(branch.name) if it.number > self.spec.start]
            speedup, number = self._branch_best(branch.name)
            tokens, cost = feedback.usage_totals([r for it in new for r in it.transcript])
            out.branches.append(
                BranchSummary(
                    name=branch.name, idea=_headline(branch.idea), state=branch.state, why=branch.why,
                    rounds=len(new), best_speedup=speedup, best_iteration=number, tokens=tokens,
                    cost_usd=cost or 0.0,
                )  # fmt: skip
            )
        return out


def _headline(idea: dict[str, Any]) -> str:
    from engine.agents.suggestion import Suggestion

    return Suggestion.from_dict(idea).headline()


def _x(speedup: float | None) -> str:
    return "—" if speedup is None else f"{speedup:.2f}x"
