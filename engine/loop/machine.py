"""The step-wise loop (ARCHITECTURE.md §2): seed → evaluate → (profile) → Judge → human gate → Coder → evaluate …

:class:`Loop` runs one stage per :meth:`Loop.step` and emits plain event dataclasses
(:mod:`engine.events`) to one callback; it never imports a UI. Its state is the session repo plus a
journal of the unfinished round (:mod:`engine.loop.state`), saved after every stage, so a process
killed at any moment resumes by redoing at most the interrupted stage.

Rounds: iteration 0 is the seed; each later round is Judge → gate → Coder → evaluate → commit and
adds one iteration. The loop stops once the branch's latest iteration number reaches ``rounds``
(counted from the seed, so resuming with the same ``rounds`` continues to the same end).

A Coder reply with no code is never fatal: the failed reply stays in the round's transcript and the
Coder is asked again (``max_no_code_retries`` times) with a note saying what was missing. If it still
writes no code, the round is committed as a ``compile_error`` (stage ``extract``) whose
``kernel.py`` is the reply as given, so the history shows what happened and the next round's Judge
repairs it like any other failure.

Threads: one thread at a time drives the loop (:meth:`step`/:meth:`run`); a second caller while a
stage runs is refused with :class:`LoopBusy` — two drivers once evaluated one kernel twice and
saved a round that could never be committed (issue #23). A UI thread may call :meth:`approve`,
:meth:`reject`, :meth:`edit_kernel`, :meth:`pause`, :meth:`stop` and :meth:`branch_from`. Decisions
made while a stage runs are queued and applied at the next stage boundary; :meth:`stop` also cancels
an in-flight LLM call through the providers' cancel event (that stage is redone on the next run).

Stopping (Ctrl-C, ``q``, a hang-up; ARCHITECTURE §2) never cuts an evaluation short: a pause or stop
is honoured at the next boundary at which nothing evaluated is left uncommitted, so an evaluated
kernel goes on through its profile and its commit first. :attr:`Loop.activity` says what runs, in
the words of :mod:`engine.activity`. :meth:`close` hands the session's writer lock back once no
stage runs. Before every stage the round is checked (:func:`~engine.loop.state.journal_problem`): a
round that cannot go on is repaired with a :class:`~engine.events.LoopNotice`, never asserted on.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import approval as approvals
from engine.activity import TASK_CHECK, Activity
from engine.agents.context import PromptContext
from engine.agents.roles import Coder, IdeasTurn, Judge, Prompt
from engine.agents.suggestion import Suggestion
from engine.eval.evaluate import check_task, warm_worker
from engine.eval.options import EvalOptions, EvaluationError
from engine.eval.result import EvalResult
from engine.events import (
    AwaitingApproval,
    Event,
    LLMReply,
    LLMToken,
    LoopError,
    LoopFinished,
    LoopNotice,
    StageStarted,
    SuggestionReady,
)
from engine.llm.errors import LLMCancelled, LLMError
from engine.loop import feedback, stages
from engine.loop.context import round_context
from engine.loop.holds import hold
from engine.loop.state import (
    AWAITING,
    CODER,
    COMMIT,
    DONE,
    ERROR,
    EVALUATE,
    FINISHED,
    GATE,
    JUDGE,
    PAUSED,
    PROFILE,
    SEED,
    Pending,
    branch_tip,
    clear_journal,
    derive,
    derive_checked,
    journal_problem,
    repair_round,
    save_journal,
)
from sessions import ranking
from sessions.errors import StaleLockWarning
from sessions.records import Iteration
from sessions.repo import SessionRepo

#: ``(task_source, kernel_source, eval_result) -> profile.json dict | None``; None: no hardware feedback.
Profiler = Callable[[str, str, EvalResult], "dict[str, Any] | None"]

# What run() returns: why it stopped.


#: stages a pause or stop does not stop in front of: the iteration is evaluated, finish and commit it
FINISH_BEFORE_STOPPING = frozenset({PROFILE, COMMIT})


class LoopStateError(RuntimeError):
    """A decision that does not fit the loop's state (approving when nothing awaits approval, …)."""


class LoopBusy(LoopStateError):
    """``step``/``run`` while another caller drives the loop; the message says what runs."""


@dataclass
class LoopOptions:
    rounds: int = 10
    approval: str = approvals.ASK
    eval_options: EvalOptions = field(default_factory=EvalOptions)
    #: the hardware block the Judge sees in optimize mode; "" derives a short one from the result
    hardware: str = ""
    #: written to session.toml with every commit (models, rounds, tolerances…; never keys)
    settings: Mapping[str, Any] | None = None
    max_no_code_retries: int = 1
    #: a kernel repeating an earlier one: the Coder is told so this often, then it is committed as a repeat
    max_repeat_asks: int = 1
    #: a correct kernel whose speedup is within this fraction of the branch's best is timed again beside
    #: it, back to back (engine.loop.duel); 0 turns the re-timing off
    retime_within: float = ranking.CLOSE_CALL
    #: run the task's reference on its own inputs (in a worker) before the first Coder call;
    #: a broken task stops the loop before any LLM request (engine.eval.reference_check)
    check_task: bool = True
    #: runs one evaluation, with :func:`engine.eval.evaluate.evaluate`'s signature; None is that
    #: function. An exploration gives its loops one that shares the GPUs among its branches
    #: (engine.explore.devices): checks side by side, a timing alone on its GPU. Its ``warm(options)``,
    #: when it has one, starts the next evaluation's worker (else ``warm_worker`` does).
    evaluator: Callable[..., EvalResult] | None = None


class Loop:
    """One session's optimisation loop (see the module docstring)."""

    def __init__(
        self,
        session: SessionRepo,
        coder: Coder,
        judge: Judge,
        options: LoopOptions | None = None,
        on_event: Callable[[Event], None] | None = None,
        profiler: Profiler | None = None,
        branch: str | None = None,
    ) -> None:
        """``branch``: the branch this loop writes (default: the session's current one, HEAD). An
        exploration names each of its branches, so loops of several branches run at once."""
        self.session = session
        self.coder = coder
        self.judge = judge
        self.options = options or LoopOptions()
        approvals.check_policy(self.options.approval)
        self.on_event = on_event
        self.profiler = profiler
        self.reference = session.task_source
        self._lock = threading.RLock()
        self._driving = threading.Lock()  # held by the one thread in step()/run()
        self._queue: list[Callable[[], None]] = []
        self._running = False
        self._closed = False
        self._pause = threading.Event()
        self._cancel = threading.Event()
        self._task_checked = False
        self._activity: Activity | None = None
        #: why the task cannot be optimised (its reference fails on its own inputs); None when sound
        self.task_problem: str | None = None
        #: cudaforge's own fault that stopped the last stage (engine.eval.faults); None when there was none
        self.harness_problem: str | None = None
        #: False: ``close`` keeps the writer lock (an exploration holds it over all its branches' loops)
        self.release_lock_on_close = True
        with warnings.catch_warnings():  # reported below, as a notice the front end shows
            warnings.simplefilter("ignore", StaleLockWarning)
            session.acquire_lock()
        #: what opening the session found, for the front end to show (a stale lock, a repaired journal)
        self.notices: list[str] = [session.lock_notice] if session.lock_notice else []
        self.pending: Pending
        self.pending, notice = derive_checked(session, self.options.rounds, branch)
        if notice is not None:
            self.notices.append(notice)
            if self.pending.stage != DONE and self.pending.notes and notice in self.pending.notes:
                save_journal(session, self.pending)  # the repaired round, so a crash now repeats nothing
        if self.pending.rounds is not None and self.pending.rounds > self.options.rounds:
            self._set_target(self.pending.rounds)  # raised by add_rounds before this round's commit
        self._next_no = self._compute_next_iteration()

    # ------------------------------------------------------------------ facts

    @property
    def branch(self) -> str:
        return self.pending.branch

    @property
    def stage(self) -> str:
        """The next stage to run (``done`` when the rounds are over)."""
        return self.pending.stage

    @property
    def awaiting(self) -> bool:
        """True while a suggestion waits for ``approve``/``reject``/``edit_kernel``."""
        return self.pending.stage == GATE and self.pending.approved is None and self._needs_human()

    @property
    def activity(self) -> Activity | None:
        """The stage in flight (a worker stage during an evaluation), or None between stages."""
        return self._activity

    @property
    def driving(self) -> bool:
        """True while a thread is inside :meth:`step` or :meth:`run`."""
        return self._driving.locked()

    @property
    def next_iteration(self) -> int:
        """The number the round in progress will commit (cached: events carry it on every token)."""
        return self._next_no

    def _compute_next_iteration(self) -> int:
        history = self.session.history(self.branch)
        return history[-1].number + 1 if history else 0

    def best(self) -> Iteration | None:
        """The best correct iteration of the current branch, or None."""
        return self.session.best(self.branch)

    # ------------------------------------------------------------------ decisions (any thread)

    def approve(self, suggestion: Suggestion | Mapping[str, Any] | str | None = None) -> None:
        """Send the pending suggestion — or an edited one (a Suggestion, its dict, or free text) — to the Coder."""
        with self._lock:
            if not self.awaiting:
                raise LoopStateError("no suggestion is awaiting approval")
            proposed = self.pending.suggestion or {}
            if suggestion is None:
                approved = dict(proposed)
            elif isinstance(suggestion, Suggestion):
                approved = suggestion.to_dict()
            elif isinstance(suggestion, str):
                approved = Suggestion.from_text(
                    proposed.get("mode", self.pending.phase), suggestion
                ).to_dict()
            else:
                approved = dict(suggestion)
            self.pending.approved = approved
            self.pending.approved_by = approvals.HUMAN
            self.pending.edited = approved != proposed
            self.pending.stage = CODER
            save_journal(self.session, self.pending)

    def set_approval_policy(self, name: str) -> None:
        """Change who decides from the next gate on (the TUI's palette); the loop alone applies it."""
        with self._lock:
            self.options.approval = approvals.check_policy(name)

    def reject(self, note: str = "") -> None:
        """Drop the pending suggestion; the Judge is asked again, told why (``note``)."""
        with self._lock:
            if not self.awaiting:
                raise LoopStateError("no suggestion is awaiting approval")
            self.pending.rejections.append({"suggestion": self.pending.suggestion, "note": note.strip()})
            self.pending.suggestion = None
            self.pending.stage = JUDGE
            save_journal(self.session, self.pending)

    def edit_kernel(self, source: str) -> None:
        """A human's kernel: evaluated and committed with phase ``human`` at the next stage boundary.

        Whatever the round had produced so far is dropped, except its LLM calls, which stay in the
        transcript of the human's commit so their cost is not lost, and the human's decisions on the
        round's suggestions (rejections with their notes, an approval): they are the person's record,
        which the history table gives the agents in later rounds (ARCHITECTURE.md §7; issue 46.2).
        """

        def apply() -> None:
            p = self.pending
            self.pending = Pending(
                branch=self.branch,
                base=branch_tip(self.session, self.branch),
                stage=EVALUATE,
                phase="human",
                kernel=source,
                transcript=list(p.transcript),
                suggestion=p.suggestion,
                approved=p.approved,
                approved_by=p.approved_by,
                edited=p.edited,
                rejections=list(p.rejections),
            )
            save_journal(self.session, self.pending)

        self._apply_or_queue(apply)

    def branch_from(self, iteration: int, name: str | None = None) -> str:
        """Continue on a new branch made at ``iteration`` of the current one; returns its name."""
        with self._lock:
            if self._running or self._driving.locked():
                raise LoopStateError("pause the loop before branching")
            old = self.branch
            new = self.session.branch_from(iteration, name=name, branch=old, switch=True)
            clear_journal(self.session, old)
            self.pending = derive(self.session, self.options.rounds, new)
            self._next_no = self._compute_next_iteration()
            return new

    def add_rounds(self, more: int) -> int:
        """Raise the round target by ``more`` rounds; return the new target (an iteration number).

        The target grows from the larger of the current target and the branch's tip, so rounds
        added to a finished loop (or to a branch made at an early iteration) are rounds still to
        run. A loop that had finished goes on at its next :meth:`step`/:meth:`run`; a running one
        simply stops later. The new target is kept in the round's journal at once and written to
        ``session.toml`` with the next commit, so a session resumed before or after that commit
        keeps it. Any thread may call it (the TUI's ``+``, ARCHITECTURE.md §8).
        """
        if more < 1:
            raise ValueError(f"rounds to add must be at least 1, not {more}")
        with self._lock:
            target = max(self.options.rounds, self._tip_number()) + more
            self._set_target(target)
            if self.pending.stage == DONE:
                self.pending = derive(self.session, target, self.branch)
            self.pending.rounds = target
            if not self._running:  # a running stage saves the journal (with the target) when it ends
                save_journal(self.session, self.pending)  # a resume before the next commit keeps it
            return target

    def _set_target(self, target: int) -> None:
        """The round target, also in the settings each commit writes to session.toml."""
        self.options.rounds = target
        if self.options.settings is not None:
            settings = dict(self.options.settings)
            settings["loop"] = {**dict(settings.get("loop") or {}), "rounds": target}
            self.options.settings = settings

    def _tip_number(self) -> int:
        history = self.session.history(self.branch)
        return history[-1].number if history else 0

    def pause(self) -> None:
        """Stop at the next stage boundary (the current stage finishes and is saved; an evaluated
        kernel is profiled and committed first)."""
        self._pause.set()

    def stop(self) -> None:
        """Pause, and cancel an in-flight LLM call (that stage is redone on the next run)."""
        self._pause.set()
        self._cancel.set()

    def close(self) -> None:
        """Stop, wait for the stage in flight to finish (and commit), then give the writer lock back.

        The lock means "a loop is writing this session" (ARCHITECTURE §5): a front end that leaves a
        session closes its loop, so the session can be opened for writing again, by this app or
        another process. A closed loop refuses to run.
        """
        self.stop()
        with self._driving:
            self._closed = True
            self._activity = None
            if self.release_lock_on_close:
                self.session.release_lock()

    def _apply_or_queue(self, action: Callable[[], None]) -> None:
        with self._lock:
            if self._running:
                self._queue.append(action)
            else:
                action()

    # ------------------------------------------------------------------ driving

    def run(self) -> str:
        """Run stages until a human decision is needed, the rounds end, ``pause()``, or an error.

        Returns ``awaiting``, ``finished``, ``paused`` or ``error``; raises :class:`LoopBusy` while
        another thread drives the loop.
        """
        with self._drive("run"):
            while True:
                stopping = self._pause.is_set() and self.pending.stage not in FINISH_BEFORE_STOPPING
                if stopping and self.pending.stage != DONE:  # the rounds ended: that is what it says
                    self._finish("paused")
                    return PAUSED
                outcome = self._step()
                if outcome is not None:
                    return outcome

    def step(self) -> str | None:
        """Run exactly one stage; returns ``awaiting``/``finished``/``paused``/``error`` or None to go on.

        Raises :class:`LoopBusy` while another thread drives the loop.
        """
        with self._drive("step"):
            return self._step()

    @contextlib.contextmanager
    def _drive(self, what: str) -> Iterator[None]:
        """Be the one driver: refuse a second caller instead of running a stage twice at once."""
        if not self._driving.acquire(blocking=False):
            raise LoopBusy(self._busy_text(what))
        try:
            if self._closed:
                raise LoopStateError("this loop was closed; open the session again to go on")
            with self._lock:
                self._running = True
            self._pause.clear()  # a new request to go on: an earlier pause or stop is spent
            self._cancel.clear()
            yield
        finally:
            with self._lock:
                self._running = False
            self._activity = None
            self._driving.release()

    def _busy_text(self, what: str) -> str:
        activity = self._activity
        running = f" ({activity.describe()})" if activity is not None else ""
        return f"cannot {what}: a stage is already running{running}; wait for it, or pause"

    def _step(self) -> str | None:
        with self._lock:
            for action in self._queue:
                action()
            self._queue.clear()
        if self.pending.stage == DONE:
            self._finish("rounds")
            return FINISHED
        self.task_problem = self.harness_problem = None
        try:
            if self.pending.stage == SEED and not self._task_checked and self.options.check_task:
                if not self._check_task():
                    return ERROR
                if self._pause.is_set():  # stopped during the task check: the seed is not started
                    self._finish("paused")
                    return PAUSED
            return self._run_stage()
        except LLMCancelled:
            self._finish("paused")
            return PAUSED
        except LLMError as error:
            if error.record:
                self.pending.transcript.append(error.record)
                save_journal(self.session, self.pending)
            self._emit(LoopError(stage=self.pending.stage, message=str(error), recoverable=True))
            return ERROR
        except EvaluationError as error:
            self._emit(LoopError(stage=self.pending.stage, message=str(error), recoverable=False))
            return ERROR
        finally:
            self._activity = None

    def _check_task(self) -> bool:
        """Before the first Coder call: the reference must run on its own inputs (no LLM call otherwise)."""
        if self._task_checked or not self.options.check_task:
            return True
        self._emit(StageStarted(stage="reference", round=self._next_no, detail=TASK_CHECK))
        hold("reference", self._next_no)
        result = check_task(self.reference, self.options.eval_options, task_name=self.session.task_name)
        if result.harness_failed:  # cudaforge's fault, not the task's: say so, and check again next time
            self.harness_problem = result.messages[-1]
            self._emit(LoopError(stage="reference", message=self.harness_problem, recoverable=True))
            return False
        if result.task_error:
            self.task_problem = result.messages[-1] if result.messages else "the task's reference failed"
            self._emit(LoopError(stage="task", message=self.task_problem, recoverable=False))
            return False
        self._task_checked = True
        for message in result.messages:  # a weak task (engine.eval.degenerate): the person should know
            if message.startswith("weak task:"):
                self._emit(LoopNotice(message=message))
        return True

    def _run_stage(self) -> str | None:
        self._next_no = self._compute_next_iteration()
        problem = journal_problem(self.pending)
        if problem is not None:  # never assert on a round: repair it and say so
            self._repair(problem)
            if self.pending.stage == DONE:
                self._finish("rounds")
                return FINISHED
        stage = self.pending.stage
        self._emit(StageStarted(stage=stage, round=self._next_no, detail=self.pending.phase))
        # an evaluation or a profile runs to its end whatever a stop says; anything else may be cut short
        hold(stage, self._next_no, None if stage in (EVALUATE, PROFILE) else self._pause)
        started = time.monotonic()
        handler = {
            SEED: self._seed,
            JUDGE: self._judge,
            GATE: self._gate,
            CODER: lambda: stages.code(self),
            EVALUATE: lambda: stages.evaluate_kernel(self),
            PROFILE: lambda: stages.profile(self),
            COMMIT: lambda: None,  # a journal saved just before its commit
        }[stage]
        outcome = handler()
        if stage != GATE:
            self.pending.add_seconds(stage, time.monotonic() - started)
        if self.pending.stage == COMMIT:
            save_journal(self.session, self.pending)
            hold(COMMIT, self._next_no, self._pause)
            problem = journal_problem(self.pending)
            if problem is None:
                stages.commit(self)
            else:
                self._repair(problem)
        elif self.pending.stage != DONE:
            save_journal(self.session, self.pending)
        return outcome

    def _repair(self, problem: str) -> None:
        """Move a round that cannot go on back to a stage it can go on from; journal it and say so."""
        self.pending, message = repair_round(self.session, self.pending, problem, self.options.rounds)
        if self.pending.stage != DONE:
            save_journal(self.session, self.pending)
        else:
            clear_journal(self.session, self.pending.branch)
        self._emit(LoopNotice(message=message))

    # ------------------------------------------------------------------ stages

    def _context(self) -> tuple[PromptContext, str]:
        """The round's standing prompt context (target, correctness bar, history) and guard policy."""
        return round_context(self.session, self.branch, self.options.eval_options, self.options.hardware)

    def _warm_worker(self) -> None:
        """The next evaluation's worker started now; an evaluator of its own (an exploration's) starts
        it where that evaluation will run (its ``warm``)."""
        warm = getattr(self.options.evaluator, "warm", None)
        (warm or warm_worker)(self.options.eval_options)

    def _seed(self) -> None:
        self._warm_worker()  # its evaluation's worker imports torch while the Coder writes
        context, guard = self._context()
        turn = self.coder.seed(
            self.reference, guard_policy=guard, context=context, on_token=self._token("coder"), cancel=self._cancel
        )
        stages.take_code(self, turn)

    def _base_iteration(self) -> Iteration:
        return self.session.history(self.branch)[-1]

    def judge_prompt(self) -> Prompt:
        """The Judge's prompt about the branch's tip: repair or optimize by this round's phase, with this
        round's rejected suggestions, so it proposes something else (the Judge stage and an exploration's
        request for several ideas both send it)."""
        base = self._base_iteration()
        result = base.eval_result
        context, guard = self._context()
        common: dict[str, Any] = {
            "guard_policy": guard,
            "context": context,
            "rejections": list(self.pending.rejections),
        }
        if self.pending.phase == "repair":
            return self.judge.repair_prompt(self.reference, base.kernel_source, feedback.error_log(result), **common)
        metrics, kind = feedback.optimize_feedback(base.profile)
        return self.judge.optimize_prompt(
            self.reference,
            base.kernel_source,
            gpu_spec=context.target,
            metrics=metrics,
            feedback_kind=kind,
            timing=feedback.timing_text(result),
            share=feedback.share_text(result),
            **common,
        )

    def judge_ideas(self, k: int) -> IdeasTurn:
        """``k`` distinct suggestions about the branch's tip in one Judge call (an exploration's start); the
        round stays where it was, and the caller decides where the call's record is committed."""
        with self._drive("ask the Judge for ideas"):
            if self.pending.stage != JUDGE:
                raise LoopStateError(f"the Judge is asked at the judge stage, not at {self.pending.stage}")
            turn = self.judge.ideas(self.judge_prompt(), k, self._token("judge"), self._cancel)
            self._reply_event("judge", turn.record)
            return turn

    def _judge(self) -> None:
        """Ask the Judge about the branch's tip, through the role's API only."""
        turn = self.judge.ask(self.judge_prompt(), self._token("judge"), self._cancel)
        self._reply_event("judge", turn.record)
        self.pending.transcript.append(turn.record)
        self.pending.suggestion = turn.suggestion.to_dict()
        self.pending.stage = GATE
        self._emit(SuggestionReady(suggestion=self.pending.suggestion))

    def _gate(self) -> str | None:
        if self._needs_human():
            self._emit(AwaitingApproval(suggestion=self.pending.suggestion or {}, flagged=self._flagged()))
            return AWAITING
        self.pending.approved = dict(self.pending.suggestion or {})
        self.pending.approved_by = approvals.decided_by_policy(self.options.approval)
        self.pending.stage = CODER
        return None

    def _needs_human(self) -> bool:
        history = self.session.history(self.branch)
        return approvals.needs_human(self.options.approval, history[-1].eval_result if history else None)

    def _flagged(self) -> bool:
        history = self.session.history(self.branch)
        return bool(history and history[-1].eval_result.get("flags"))

    # ------------------------------------------------------------------ events

    def _emit(self, event: Event) -> None:
        if isinstance(event, StageStarted):
            self._activity = Activity(event.stage, event.round, event.detail)
        if event.iteration is None:
            event.iteration = self.next_iteration
        if not event.branch:
            event.branch = self.branch
        if self.on_event is not None:
            self.on_event(event)

    def _token(self, role: str) -> Callable[[str], None]:
        return lambda text: self._emit(LLMToken(role=role, text=text))

    def _reply_event(self, role: str, record: Mapping[str, Any]) -> None:
        usage = record.get("usage") or {}
        self._emit(
            LLMReply(
                role=role,
                kind=str(record.get("kind") or ""),
                model=str(record.get("model") or ""),
                text=str(record.get("reply") or ""),
                input_tokens=int(usage.get("input_tokens") or 0),
                output_tokens=int(usage.get("output_tokens") or 0),
                cost_usd=record.get("cost_usd"),
                latency_s=float(record.get("latency_s") or 0.0),
            )
        )

    def _finish(self, reason: str) -> None:
        best = self.best()
        self._emit(
            LoopFinished(
                reason=reason,
                best_iteration=best.number if best else None,
                best_speedup=best.speedup if best else None,
            )
        )
