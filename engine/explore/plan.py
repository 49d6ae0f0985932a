"""An exploration's plan and progress, kept beside the session's loop journal (ARCHITECTURE.md §2, "Explore").

Why a file of its own: an exploration outlives any one round. Its K ideas came from one Judge call
before any branch had a commit, and which branches the beam pruned, and why, is not in any
iteration's record. A resumed ``cudaforge explore`` reads all of that from here. The file is
``cudaforge-explore-<N>.json`` in the session folder. It is not committed, like the journal. It is
written atomically after every change, so a kill leaves the old plan or the new one.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUNNING, DONE, PRUNED, STOPPED, FAILED = "running", "done", "pruned", "stopped", "failed"


@dataclass(frozen=True)
class ExploreSpec:
    """What the person asked for. A resume must ask for the same (rounds and caps may change)."""

    start: int  # the iteration every branch starts from
    source: str  # the branch that iteration is on
    width: int  # ideas asked of the Judge, one branch each
    rounds: int  # rounds per branch
    beam: int | None = None  # after each round only this many best correct branches go on
    max_cost_usd: float | None = None
    max_tokens: int | None = None


@dataclass
class BranchState:
    name: str
    idea: dict[str, Any]  # the suggestion this branch pursues (a Suggestion dict), as approved
    state: str = RUNNING
    why: str = ""  # why it stopped, in words (pruned by the beam, an error)
    # its unfinished round (a loop journal), kept here while another branch runs: the session has one
    # journal, and the next branch's loop would overwrite it
    journal: dict[str, Any] | None = None
    # the Judge's idea when a person edited it before the branch ran ({} for an idea of the person's own;
    # None when the branch pursues the Judge's idea as given)
    suggested: dict[str, Any] | None = None


@dataclass
class ExplorePlan:
    spec: ExploreSpec
    branches: list[BranchState] = field(default_factory=list)
    ideas_record: dict[str, Any] | None = None  # the Judge call that gave the ideas (committed with branch 1)
    asked: bool = False  # the ideas were asked for and the branches made
    # the Judge's ideas while nobody has chosen among them yet (the workbench shows them to a person)
    proposed: list[dict[str, Any]] = field(default_factory=list)
    decided_by: str = ""  # who chose the branches' ideas: "human", or the policy that took them all
    stopped: str = ""  # why the whole exploration stopped early (a cost or token cap)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExplorePlan:
        return cls(
            spec=ExploreSpec(**data["spec"]),
            branches=[BranchState(**b) for b in data.get("branches") or []],
            ideas_record=data.get("ideas_record"),
            asked=bool(data.get("asked")),
            proposed=list(data.get("proposed") or []),
            decided_by=str(data.get("decided_by") or ""),
            stopped=str(data.get("stopped") or ""),
        )

    def running(self) -> list[BranchState]:
        return [b for b in self.branches if b.state == RUNNING]


def plan_path(session_path: Path, start: int) -> Path:
    return Path(session_path) / f"cudaforge-explore-{start}.json"


def branch_name(start: int, k: int) -> str:
    """``explore/<N>-<k>``: the k-th idea (1-based) from iteration N."""
    return f"explore/{start}-{k}"


def load_plan(session_path: Path, start: int) -> ExplorePlan | None:
    path = plan_path(session_path, start)
    try:
        return ExplorePlan.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


def save_plan(session_path: Path, plan: ExplorePlan) -> None:
    path = plan_path(session_path, plan.spec.start)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(temp, path)


def plan_of_branch(session_path: Path, branch: str) -> ExplorePlan | None:
    """The exploration ``branch`` belongs to (``explore/N-k``), or None: how a command run while HEAD was
    left on an exploration's branch (a kill mid-round) finds the source branch it explores from."""
    match = re.fullmatch(r"explore/(\d+)-\d+", branch)
    if match is None:
        return None
    plan = load_plan(session_path, int(match.group(1)))
    return plan if plan is not None and any(b.name == branch for b in plan.branches) else None
