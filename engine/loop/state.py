"""Where the loop stands, derived from the session repo plus a small journal of the unfinished round.

The repo is the state: the tip of the current branch says what comes next (no iteration yet → the
seed; the tip failed → a *repair* round; it is correct → an *optimize* round; the tip's number has
reached the round limit → done). What a round produced before its commit — the Judge's suggestion,
the approval, the Coder's kernel, the evaluation — lives in :class:`Pending`, which is written to a
journal file in the session directory after every stage. The journal is only trusted while the
branch tip it was started from is still the tip, so a resume after a crash redoes at most the stage
that was interrupted, and never mixes a stale round into a moved branch.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sessions.repo import SessionRepo

JOURNAL_NAME = "cudaforge-loop.json"

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


def journal_path(session: SessionRepo) -> Path:
    return session.path / JOURNAL_NAME


def save_journal(session: SessionRepo, pending: Pending) -> None:
    """Write atomically (temp file + rename), so a kill leaves the old journal or the new one."""
    path = journal_path(session)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(pending.to_dict(), handle, ensure_ascii=False, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def clear_journal(session: SessionRepo) -> None:
    with contextlib.suppress(FileNotFoundError):
        journal_path(session).unlink()


def load_journal(session: SessionRepo) -> Pending | None:
    try:
        return Pending.from_dict(json.loads(journal_path(session).read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def branch_tip(session: SessionRepo, branch: str) -> str:
    """The sha the next iteration of ``branch`` builds on (the root commit before the seed)."""
    history = session.history(branch)
    return history[-1].sha if history else session.root_sha


def mode_after(status: str) -> str:
    """A round after a correct kernel optimizes it; after anything else it repairs it."""
    return "optimize" if status == "correct" else "repair"


def derive(session: SessionRepo, rounds: int, branch: str | None = None) -> Pending:
    """The next round of ``branch``: the journal's when it still applies, else a fresh one from the tip."""
    branch = branch or session.current_branch
    history = session.history(branch)
    base = history[-1].sha if history else session.root_sha
    journal = load_journal(session)
    if journal is not None and journal.branch == branch and journal.base == base:
        return journal
    if not history:
        return Pending(branch=branch, base=base, stage=SEED, phase="seed")
    last = history[-1]
    stage = DONE if last.number >= rounds else JUDGE
    return Pending(branch=branch, base=base, stage=stage, phase=mode_after(last.status))
