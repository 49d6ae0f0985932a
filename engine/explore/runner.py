"""Explore: K ideas from one iteration, each pursued on its own branch for R rounds (ARCHITECTURE.md §2).

Flow: the Judge is asked once, at iteration N of the source branch, for K different ideas
(``Loop.judge_ideas``). Idea k becomes branch ``explore/<N>-<k>``, made at N. Its first round
starts at the Coder with that idea approved, and later rounds are ordinary auto-approved loop rounds.

The branches run side by side, one thread and one loop at a time each, all in this process:

* their LLM calls go out concurrently, at most ``llm_concurrency`` at once per provider
  (:mod:`engine.llm.bounded`);
* their evaluations share the GPUs (:mod:`engine.explore.devices`): builds and checks side by side
  within each GPU's memory budget, a timing or a profile alone on its GPU;
* with ``--beam W`` the branches wait for each other at the end of every round, and only the W best
  correct ones go on; the others are recorded as pruned, with their speedup. Without a beam each
  branch runs its R rounds straight through;
* a cost or token cap is checked before every round of every branch: once spent, no round starts,
  and the rounds in flight finish and are committed.

One process writes every branch: it holds the session's writer lock over all of them, and each loop
commits to its own branch only (a compare-and-swap of that branch's ref). Each exploration branch
keeps its own loop journal (``engine.loop.state.journal_path``), so Ctrl-C and resume behave as in
a single branch: a stop lets each round in flight finish the evaluation it is in and commit it.
``explore`` with the same arguments then goes on from the plan (``engine.explore.plan``): the ideas
are not asked again, and no committed round is run twice.

A person may stand at the gate once per idea: ``propose`` asks the Judge and keeps its ideas in the plan
without making a branch; ``choose`` then makes a branch for each idea picked, changed or added (the
workbench's chooser). ``run`` alone takes every idea as given.

Or at every gate (``gated``, the workbench's "step"): from round 2 on, each branch's loop stops where
the Judge's suggestion waits for approval, as a single branch's does. The branch's thread waits there
(the other branches go on) until the person approves it, approves an edited one, or rejects it
(``awaiting``, ``approve``, ``reject``), or lets every branch go on without asking (``set_gated(False)``).
A stop while branches wait leaves each at its gate, in its journal, for the resume.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from engine import approval as approvals
from engine.events import Event, LoopError
from engine.explore import caps
from engine.explore.choice import Choice
from engine.explore.devices import GatedProfiler, SharedDevices
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
from engine.explore.summary import BranchSummary as BranchSummary  # re-exported: the summary's rows
from engine.explore.summary import ExploreSummary, headline, measure_text, speedup_text, summarize
from engine.llm.bounded import DEFAULT_PER_PROVIDER, ProviderBounds
from engine.loop.machine import AWAITING, ERROR, FINISH_BEFORE_STOPPING, FINISHED, PAUSED, Loop
from engine.loop.state import CODER, JUDGE, Pending, clear_journal, derive, read_journal, save_journal
from engine.loop.state import DONE as LOOP_DONE
from sessions import ranking
from sessions.repo import SessionRepo

#: ``(session, k, rounds_target, on_event, branch) -> Loop`` writing ``branch``. k is 1-based; 0 is the
#: loop that asks for the ideas. The front end builds the agents (the scripted provider can give each
#: branch its own replies); the explorer then makes the loop share the GPUs and the LLM bounds.
LoopFactory = Callable[[SessionRepo, int, int, Callable[[Event], None], str], Loop]


class ExploreError(RuntimeError):
    """An exploration that cannot start or resume as asked (the message says what to do)."""


class Explorer:
    """Runs (or resumes) one exploration of ``session`` (see the module docstring).

    ``gpus``: the GPUs the branches' evaluations share (CUDA_VISIBLE_DEVICES indices; default GPU 0),
    or ``devices``, made already (the CPU when kernels run there). ``llm_concurrency``: LLM calls in
    flight at once per provider."""

    def __init__(
        self,
        session: SessionRepo,
        spec: ExploreSpec,
        make_loop: LoopFactory,
        on_line: Callable[[str], None] = lambda line: None,
        on_event: Callable[[Event], None] = lambda event: None,
        *,
        gpus: list[int] | None = None,
        devices: SharedDevices | None = None,
        llm_concurrency: int = DEFAULT_PER_PROVIDER,
        gated: bool = False,
        on_gate: Callable[[str], None] = lambda branch: None,
    ) -> None:
        """``gated``: the person approves each branch's suggestions from round 2 on (module docstring);
        ``on_gate(branch)`` is called, from the branch's thread, when it starts waiting there."""
        if spec.width < 1 or spec.rounds < 1:
            raise ExploreError("--width and --rounds must be at least 1")
        if spec.beam is not None and spec.beam < 1:
            raise ExploreError("--beam must be at least 1")
        if llm_concurrency < 1:
            raise ExploreError("--llm-concurrency must be at least 1")
        self.session = session
        self.spec = spec
        self.make_loop = make_loop
        self.say = on_line
        self.on_event = on_event
        self.gpus = gpus
        self.devices = devices
        self.bounds = ProviderBounds(llm_concurrency)
        self._stop = threading.Event()
        self.gated = gated
        self.on_gate = on_gate
        self._gates = threading.Condition()  # branches waiting at a gate for the person
        self._awaiting: dict[str, Loop] = {}
        self._lock = threading.RLock()  # the plan, the live loops, the devices
        self._loops: dict[str, Loop] = {}
        self._errors: dict[str, list[str]] = {}
        self._task_checked = False
        self.wall_seconds = 0.0
        session.acquire_lock()  # held over every branch's loop (each is told to keep it when closed)
        self.plan = self._open_plan()

    # ------------------------------------------------------------------ control (any thread)

    def stop(self) -> None:
        """Stop at the next boundary: each round in flight finishes its evaluation and commit first."""
        self._stop.set()
        with self._lock:
            loops = list(self._loops.values())
        for loop in loops:
            loop.stop()
        with self._gates:  # a branch waiting at its gate stays there, in its journal, for the resume
            self._gates.notify_all()

    # ------------------------------------------------------------------ plan

    def _open_plan(self) -> ExplorePlan:
        spec = self.spec
        history = self.session.history(spec.source)
        if not any(it.number == spec.start for it in history):
            raise ExploreError(f"branch {spec.source!r} has no iteration {spec.start}")
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
            if branch.state in (FAILED, STOPPED) or (
                branch.state == DONE and done < spec.start + spec.rounds
            ):
                branch.state, branch.why = RUNNING, ""
        self._adopt_old_journals(plan)
        save_plan(self.session.path, plan)
        return plan

    def _adopt_old_journals(self, plan: ExplorePlan) -> None:
        """Earlier versions ran one branch at a time through the session's one journal, and kept a
        branch's unfinished round in the plan meanwhile: each goes to the branch's own journal now."""
        journal, _ = read_journal(self.session)
        if journal is not None and any(b.name == journal.branch for b in plan.branches):
            save_journal(self.session, journal)  # to its branch's own file (engine.loop.state.journal_path)
            clear_journal(self.session)
        for branch in plan.branches:
            if branch.journal is not None:
                save_journal(self.session, Pending.from_dict(branch.journal))
                branch.journal = None

    def _save_plan(self) -> None:
        with self._lock:
            save_plan(self.session.path, self.plan)

    # ------------------------------------------------------------------ running

    def run(self) -> ExploreSummary:
        """Ask for the ideas (once), then run the branches side by side; the summary at the end. The
        session's current branch is the source branch afterwards, whatever happened (an earlier
        version moved HEAD onto a branch for its round)."""
        started = time.monotonic()
        try:
            summary = self._run()
        finally:
            self.wall_seconds += time.monotonic() - started
            self.session.switch_branch(self.spec.source)
        summary.wall_seconds = self.wall_seconds
        return summary

    def _run(self) -> ExploreSummary:
        if not self.plan.asked and not self._ask_for_ideas():
            return self.summary(PAUSED if self._stop.is_set() else FINISHED)
        if self.spec.beam is None:  # nothing to compare between rounds: each branch runs straight through
            self._side_by_side(lambda branch: self._run_rounds(branch, self.spec.rounds))
        else:
            for r in range(1, self.spec.rounds + 1):
                self._side_by_side(lambda branch, r=r: self._run_rounds(branch, r))
                if self._stop.is_set() or self.plan.stopped:
                    break
                if r < self.spec.rounds:  # after the last round every branch has finished: nothing to cut
                    self._prune(r)
        if self._stop.is_set():
            return self.summary(PAUSED)
        with self._lock:
            for branch in self.plan.running():
                branch.state = DONE
            self._save_plan()
        return self.summary(FINISHED)

    def _side_by_side(self, work: Callable[[BranchState], None]) -> None:
        """``work`` for every running branch, each in its own thread; returns when all have ended."""
        branches = self.plan.running()
        if not branches:
            return
        with ThreadPoolExecutor(max_workers=len(branches), thread_name_prefix="cudaforge-branch") as pool:
            futures = [pool.submit(work, branch) for branch in branches]
        for future in futures:
            future.result()  # a bug in the runner itself surfaces here, not silently

    def _run_rounds(self, branch: BranchState, up_to: int) -> None:
        """``branch``'s rounds until its tip is round ``up_to`` (counted from the start), a stop, a cap
        or an error."""
        target = self.spec.start + up_to
        while branch.state == RUNNING and not self._stop.is_set():
            tip = self.session.history(branch.name)[-1].number
            if tip >= target:
                return  # committed before a resume, or this round of a beam is done
            if self._over_cap():
                return
            if self._run_round(branch, tip + 1) != FINISHED:
                return

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
        self.say(f"asking the Judge for {spec.width} ideas about iteration {spec.start} of {spec.source}")
        loop = self._open_loop(0, first, spec.start + 1)
        try:
            if loop.stage != JUDGE:
                raise ExploreError(f"iteration {spec.start} cannot be explored: its loop is at {loop.stage}")
            try:
                turn = loop.judge_ideas(spec.width)
            except Exception as error:  # an LLM error or a cancel: nothing is made, the next run asks again
                if self._stop.is_set():
                    return []
                raise ExploreError(f"the Judge's ideas: {error}") from error
        finally:
            self._close_loop(first, loop)
        if not any(i.parsed or i.text.strip() for i in turn.ideas):
            raise ExploreError(
                "the Judge's reply held no idea (it was empty); nothing was made, run again to ask again"
            )
        self.plan.ideas_record = turn.record
        self.plan.proposed = [idea.to_dict() for idea in turn.ideas]
        if len(turn.ideas) < spec.width:
            self.say(f"the Judge gave {len(turn.ideas)} different idea(s), not {spec.width}")
        self._save_plan()
        return [dict(idea) for idea in self.plan.proposed]

    def choose(
        self, choices: list[Choice], decided_by: str = approvals.HUMAN, rounds: int | None = None
    ) -> None:
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
            self.plan.branches.append(
                BranchState(name=name, idea=dict(choice.idea), suggested=choice.suggested)
            )
            self.say(
                f"{name}: {headline(choice.idea)}{'' if choice.suggested is None else ' (changed by hand)'}"
            )
        self.plan.decided_by = decided_by
        self.plan.asked = True
        self._save_plan()

    def _run_round(self, branch: BranchState, target: int) -> str:
        """One round of ``branch``, up to iteration ``target``; the loop's outcome."""
        k = self.plan.branches.index(branch) + 1
        history = self.session.history(branch.name)
        if history[-1].number == self.spec.start:
            self._start_with_idea(branch, k, history[-1].sha)
        self.say(f"{branch.name}: round {target - self.spec.start} (iteration {target})")
        with self._lock:
            self._errors[branch.name] = []
        loop = self._open_loop(k, branch.name, target)
        try:
            outcome = self._drive(loop)
        finally:
            self._close_loop(branch.name, loop)
        if outcome == FINISHED and loop.task_problem is None:
            self._task_checked = True  # the task's reference ran once: later rounds need not check it
        with self._lock:
            if outcome == ERROR:
                branch.state, branch.why = FAILED, "; ".join(self._errors[branch.name]) or "the round failed"
                self.say(f"{branch.name}: stopped: {branch.why}")
            elif outcome == FINISHED:
                tip = self.session.history(branch.name)[-1]
                self.say(f"{branch.name}: iteration {tip.number} {tip.status} {speedup_text(tip.speedup)}")
            self._save_plan()
        return outcome

    def _start_with_idea(self, branch: BranchState, k: int, tip_sha: str) -> None:
        """The branch's first round begins at the Coder with its idea approved, unless a journal of
        that round is there already (a resume after a stop mid-round)."""
        journal, _ = read_journal(self.session, branch.name)
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
            if outcome == AWAITING:
                if not self._wait_for_person(loop):
                    return PAUSED
                continue
            if outcome is not None:
                return outcome

    # ------------------------------------------------------------------ the person at every gate

    def _wait_for_person(self, loop: Loop) -> bool:
        """Hold ``loop``'s branch at its gate until the person decides (True: go on) or a stop (False)."""
        branch = loop.branch
        with self._gates:
            self._awaiting[branch] = loop
        self.say(f"{branch}: waiting for you at the gate: {headline(loop.pending.suggestion or {})}")
        self.on_gate(branch)
        with self._gates:
            while loop.awaiting and self.gated and not self._stop.is_set():
                self._gates.wait()
            self._awaiting.pop(branch, None)
            if not self.gated and loop.awaiting:
                loop.set_approval_policy(approvals.AUTO)  # let go: the gate approves as the Judge said
            return not self._stop.is_set() or not loop.awaiting

    def awaiting(self) -> list[tuple[str, dict[str, Any]]]:
        """The branches waiting for the person at their gate, by name, with the suggestion each waits on."""
        with self._gates:
            return sorted(
                (name, dict(loop.pending.suggestion or {})) for name, loop in self._awaiting.items()
            )

    def _decide(self, branch: str, decide: Callable[[Loop], None]) -> None:
        with self._gates:
            loop = self._awaiting.get(branch)
            if loop is None:
                raise ExploreError(f"{branch} is not waiting at a gate")
            decide(loop)
            del self._awaiting[branch]  # decided: no longer waiting, even before its thread wakes
            self._gates.notify_all()

    def approve(self, branch: str, suggestion: dict[str, Any] | str | None = None) -> None:
        """Approve ``branch``'s waiting suggestion, or the person's edit of it (its dict, or free text)."""
        self._decide(branch, lambda loop: loop.approve(suggestion))

    def reject(self, branch: str, note: str = "") -> None:
        """Reject ``branch``'s waiting suggestion: its Judge is asked again, told ``note``."""
        self._decide(branch, lambda loop: loop.reject(note))

    def set_gated(self, gated: bool) -> None:
        """Ask at every gate from now on, or stop asking: the waiting branches go on as the Judge said."""
        with self._gates:
            self.gated = gated
            for loop in self._loops_snapshot():
                loop.set_approval_policy(approvals.ASK if gated else approvals.AUTO)
            self._gates.notify_all()

    def _loops_snapshot(self) -> list[Loop]:
        with self._lock:
            return list(self._loops.values())

    def _open_loop(self, k: int, branch: str, target: int) -> Loop:
        def on_event(event: Event) -> None:
            if isinstance(event, LoopError):
                with self._lock:
                    self._errors.setdefault(branch, []).append(event.message)
            self.on_event(event)

        loop = self.make_loop(self.session, k, target, on_event, branch)
        if loop.branch != branch:
            raise ExploreError(
                f"the loop made for {branch} writes {loop.branch}"
            )  # a factory that ignored it
        loop.release_lock_on_close = False
        # inside its branch an idea runs without asking, unless the person stands at every gate
        loop.set_approval_policy(approvals.ASK if self.gated else approvals.AUTO)
        self._share(loop, branch)
        for notice in loop.notices:
            self.say(f"note: {notice}")
        with self._lock:
            self._loops[branch] = loop
        if self._stop.is_set():
            loop.stop()
        return loop

    def _share(self, loop: Loop, branch: str) -> None:
        """What makes ``branch``'s loop a good neighbour: its evaluations and profiles take turns on
        the shared GPUs, its LLM calls count against its provider's bound, and the task is checked
        once per run rather than once per round."""
        with self._lock:
            if self.devices is None:  # on the loops' own device, resolved by whoever made them
                device = loop.options.eval_options.device
                self.devices = SharedDevices(device, self.gpus if device == "cuda" else None)
            devices = self.devices
        loop.options.evaluator = devices.evaluator(branch)
        if loop.profiler is not None and not isinstance(loop.profiler, GatedProfiler):
            loop.profiler = devices.profiler(loop.profiler, branch)
        loop.coder.provider = self.bounds.wrap(loop.coder.provider)
        loop.judge.provider = self.bounds.wrap(loop.judge.provider)
        if self._task_checked:
            loop.options.check_task = False

    def _close_loop(self, branch: str, loop: Loop) -> None:
        with self._lock:
            if self._loops.get(branch) is loop:
                del self._loops[branch]
            devices = self.devices
        loop.close()
        if devices is not None:
            devices.branch_done(branch)

    # ------------------------------------------------------------------ beam and caps

    def _bests(self) -> tuple[str, dict[str, ranking.Measured]]:
        """Each branch's best correct iteration since the start, and how they were ranked: by the
        kernel's own time when every such iteration of every branch was timed on one kind of device,
        else by speedup (sessions.ranking says why)."""
        every = {
            b.name: [
                ranking.measured(b.name, it)
                for it in self.session.history(b.name)
                if it.number > self.spec.start and it.correct
            ]
            for b in self.plan.branches
        }
        how = ranking.ranked_by([m for found in every.values() for m in found])
        return how, {name: best for name, found in every.items() if (best := ranking.leader(found, how))}

    def _prune(self, r: int) -> None:
        beam = self.spec.beam
        running = self.plan.running()
        if beam is None or not running:
            return
        how, bests = self._bests()
        key = ranking.sort_key(how)
        kept_names = [m.branch for m in sorted((bests[b.name] for b in running if b.name in bests), key=key)][
            :beam
        ]
        kept = [b for b in running if b.name in kept_names]
        cut = measure_text(bests[kept_names[-1]], how) if kept_names else None
        for branch in running:
            if branch in kept:
                continue
            best = bests.get(branch.name)
            branch.state = PRUNED
            branch.why = (
                f"beam {beam} after round {r}: best {measure_text(best, how)}, behind the {len(kept)} kept "
                f"(ranked by {how}; the last kept: {cut})"
                if best is not None
                else f"beam {beam} after round {r}: no correct kernel yet"
            )
            self.say(f"{branch.name}: pruned ({branch.why})")
        self._save_plan()

    def _uncommitted(self) -> tuple[int, float | None]:
        return caps.uncommitted(self)

    def _over_cap(self) -> bool:
        return caps.over_cap(self)

    # ------------------------------------------------------------------ results

    def summary(self, outcome: str = FINISHED) -> ExploreSummary:
        return summarize(self, outcome)
