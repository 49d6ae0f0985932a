"""Where the loop stands, derived from the session repo plus a small journal of the unfinished round.

The repo is the state: the tip of the current branch says what comes next (no iteration yet → the
seed; the tip failed → a *repair* round; it is correct → an *optimize* round; the tip's number has
reached the round limit → done). What a round produced before its commit — the Judge's suggestion,
the approval, the Coder's kernel, the evaluation — lives in :class:`Pending`, which is written to a
journal file in the session directory after every stage. The session's branches share one journal,
except an exploration's (``explore/N-k``): those run side by side in one process, so each keeps its
own (:func:`journal_path`). The journal is only trusted while the
branch tip it was started from is still the tip, so a resume after a crash redoes at most the stage
that was interrupted, and never mixes a stale round into a moved branch.

A journal is also only trusted while it holds what its stage needs (:func:`journal_problem`): a
round at ``commit`` without its kernel can never be committed, and once such a journal was saved
(two ``step()`` calls ran at once, issue #23) every later run failed on it. :func:`derive_checked`
repairs such a round back to the latest stage its own contents support — keeping its LLM calls, so
their cost is not lost — and says what it did; an unreadable journal is set aside, never trusted.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sessions.repo import SessionRepo

JOURNAL_NAME = "cudaforge-loop.json"
#: branches that keep a journal of their own (engine.explore.plan.branch_name makes their names)
OWN_JOURNAL_PREFIX = "explore/"
#: where an unreadable journal is moved (kept for a person to look at, never read again)
BAD_JOURNAL_NAME = "cudaforge-loop.json.unreadable"

# Stages a round goes through, in order; ``gate`` is where a human decision may be awaited.
SEED, JUDGE, GATE, CODER, EVALUATE, PROFILE, COMMIT, DONE = (
    "seed",
    "judge",
    "gate",
    "coder",
    "evaluate",
    "profile",
    "commit",
    "done",
)
# What ``Loop.run``/``step`` return when they stop (a stage body may return ERROR: engine.loop.stages)
AWAITING, PAUSED, FINISHED, ERROR = "awaiting", "paused", "finished", "error"


@dataclass
class Pending:
    """The unfinished part of one round (everything in it is JSON, so it can be journaled)."""

    branch: str
    base: str  # sha of the branch tip this round builds on (the session root before the seed)
    stage: str  # the next stage to run
    phase: str  # what the kernel being made is: seed / repair / optimize / human
    suggestion: dict[str, Any] | None = None  # as the Judge proposed it
    approved: dict[str, Any] | None = None  # as it goes to the Coder
    approved_by: str = ""  # "human" or "policy:<name>" (engine.approval)
    edited: bool = False
    rejections: list[dict[str, Any]] = field(default_factory=list)  # {"suggestion", "note"}
    kernel: str | None = None
    eval_result: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    transcript: list[dict[str, Any]] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    no_code_replies: int = 0
    repeat_asks: int = 0  # times the Coder was told its kernel repeated an earlier one (engine.loop.duplicates)
    notes: list[str] = field(default_factory=list)
    #: a round target raised while this round was open (``Loop.add_rounds``); kept here until the
    #: round's commit records it in session.toml, so a resume before that commit keeps it too
    rounds: int | None = None

    def add_seconds(self, stage: str, seconds: float) -> None:
        self.stage_seconds[stage] = round(self.stage_seconds.get(stage, 0.0) + seconds, 3)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pending:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def journal_path(session: SessionRepo, branch: str | None = None) -> Path:
    """The journal ``branch``'s unfinished round is kept in: the session's one journal, or for an
    exploration's branch a file of its own, since its rounds run beside the other branches'."""
    if branch is not None and branch.startswith(OWN_JOURNAL_PREFIX):
        return session.path / f"cudaforge-loop.{branch.replace('/', '--')}.json"
    return session.path / JOURNAL_NAME


def save_journal(session: SessionRepo, pending: Pending) -> None:
    """Write atomically (temp file + rename), so a kill leaves the old journal or the new one."""
    path = journal_path(session, pending.branch)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(pending.to_dict(), handle, ensure_ascii=False, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def clear_journal(session: SessionRepo, branch: str | None = None) -> None:
    with contextlib.suppress(FileNotFoundError):
        journal_path(session, branch).unlink()


def load_journal(session: SessionRepo, branch: str | None = None) -> Pending | None:
    return read_journal(session, branch)[0]


def read_journal(session: SessionRepo, branch: str | None = None) -> tuple[Pending | None, str | None]:
    """The journal ``branch`` is kept in (:func:`journal_path`), or None; and, when there was a file
    that could not be read, what was done with it."""
    path = journal_path(session, branch)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as error:
        return None, _set_aside(path, f"could not be read ({error})")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        return Pending.from_dict(data), None
    except (ValueError, TypeError) as error:
        return None, _set_aside(path, f"is not a journal ({error})")


def _set_aside(path: Path, why: str) -> str:
    bad = path.with_name(f"{path.name}.unreadable")
    try:
        os.replace(path, bad)
        kept = f"moved to {bad.name}"
    except OSError:
        kept = "left in place"
    return f"the loop's journal {why}; {kept}, the round starts again from the branch tip"


#: what each stage needs from the round before it can run
_NEEDS_KERNEL = {"evaluate", "profile", "commit"}
_NEEDS_RESULT = {"profile", "commit"}
_STAGES = {SEED, JUDGE, GATE, CODER, EVALUATE, PROFILE, COMMIT}
_PHASES = {"seed", "repair", "optimize", "human"}


def journal_problem(pending: Pending) -> str | None:
    """Why the round cannot go on from its stage (None when it can)."""
    if pending.stage not in _STAGES:
        return f"it is at an unknown stage {pending.stage!r}"
    if pending.phase not in _PHASES:
        return f"its phase {pending.phase!r} is unknown"
    if pending.stage == SEED and pending.phase != "seed":
        return f"it is at the seed but its phase is {pending.phase!r}"
    if pending.stage in _NEEDS_KERNEL and not isinstance(pending.kernel, str):
        return f"it is at {pending.stage!r} but holds no kernel"
    result = pending.eval_result
    if pending.stage in _NEEDS_RESULT and not (isinstance(result, dict) and result.get("status")):
        return f"it is at {pending.stage!r} but holds no evaluation"
    if pending.stage == GATE and not isinstance(pending.suggestion, dict):
        return "it is at the approval but holds no suggestion"
    return None


def repaired(pending: Pending, problem: str, next_phase: str | None) -> tuple[Pending, str]:
    """The round moved back to the latest stage its own contents support, and a line saying so.

    ``next_phase`` is what a fresh round of the branch would be (None: no iteration yet, the seed).
    A result without its kernel is dropped (nothing says which kernel it measured); the transcript,
    the rejections and the notes are kept.
    """
    fresh = Pending(
        branch=pending.branch,
        base=pending.base,
        stage=SEED if next_phase is None else JUDGE,
        phase=next_phase or "seed",
        rejections=list(pending.rejections or []),
        transcript=list(pending.transcript or []),
        stage_seconds=dict(pending.stage_seconds or {}),
        no_code_replies=int(pending.no_code_replies or 0),
        repeat_asks=int(pending.repeat_asks or 0),
    )
    allowed = {"seed", "human"} if next_phase is None else {next_phase, "human"}
    phase = pending.phase if pending.phase in allowed else None
    decided = phase not in (None, "seed", "human")  # a Judge round: its suggestion may be kept
    if phase is not None and isinstance(pending.kernel, str):
        fresh.stage, fresh.phase, fresh.kernel = EVALUATE, phase, pending.kernel
        if decided:
            _keep_decision(fresh, pending)
    elif decided and isinstance(pending.approved, dict):
        fresh.stage, fresh.phase = CODER, str(phase)
        _keep_decision(fresh, pending)
    elif decided and isinstance(pending.suggestion, dict):
        fresh.stage, fresh.phase, fresh.suggestion = GATE, str(phase), pending.suggestion
    message = (
        f"the loop's journal could not go on ({problem}); the round of this branch goes on from "
        f"{fresh.stage!r} and keeps its {len(fresh.transcript)} LLM call(s)"
    )
    fresh.notes = [*list(pending.notes or []), message]
    return fresh, message


def repair_round(session: SessionRepo, pending: Pending, problem: str, rounds: int) -> tuple[Pending, str]:
    """:func:`repaired` against the branch as it is now (done once the tip has reached ``rounds``)."""
    history = session.history(pending.branch)
    fixed, message = repaired(pending, problem, mode_after(history[-1].status) if history else None)
    if fixed.stage == JUDGE and history and history[-1].number >= rounds:
        fixed.stage = DONE
    return fixed, message


def _keep_decision(fresh: Pending, pending: Pending) -> None:
    fresh.suggestion, fresh.approved = pending.suggestion, pending.approved
    fresh.approved_by, fresh.edited = pending.approved_by, pending.edited


def branch_tip(session: SessionRepo, branch: str) -> str:
    """The sha the next iteration of ``branch`` builds on (the root commit before the seed)."""
    history = session.history(branch)
    return history[-1].sha if history else session.root_sha


def mode_after(status: str) -> str:
    """A round after a correct kernel optimizes it; after anything else it repairs it."""
    return "optimize" if status == "correct" else "repair"


def derive(session: SessionRepo, rounds: int, branch: str | None = None) -> Pending:
    """The next round of ``branch``: the journal's when it still applies, else a fresh one from the tip."""
    return derive_checked(session, rounds, branch)[0]


def derive_checked(
    session: SessionRepo, rounds: int, branch: str | None = None
) -> tuple[Pending, str | None]:
    """:func:`derive`, plus a line for the person when the journal had to be set aside or repaired."""
    branch = branch or session.current_branch
    history = session.history(branch)
    base = history[-1].sha if history else session.root_sha
    journal, notice = read_journal(session, branch)
    if journal is not None and journal.branch == branch and journal.base == base:
        problem = journal_problem(journal)
        if problem is None:
            return journal, None
        return repair_round(session, journal, problem, rounds)
    if not history:
        return Pending(branch=branch, base=base, stage=SEED, phase="seed"), notice
    last = history[-1]
    stage = DONE if last.number >= rounds else JUDGE
    return Pending(branch=branch, base=base, stage=stage, phase=mode_after(last.status)), notice
