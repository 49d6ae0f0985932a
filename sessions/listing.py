"""Summaries of every session under a sessions root, for ``cudaforge sessions`` and the browser.

Each summary costs one ``git log --branches`` per session (all branches at once), so listing
stays quick even with many sessions; nothing is locked.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git.exc import GitError

from sessions.errors import SessionError
from sessions.paths import default_sessions_root, is_session_dir
from sessions.repo import SessionRepo


@dataclass(frozen=True)
class SessionSummary:
    """One row of the session table."""

    name: str
    path: Path
    task_name: str
    created: dt.datetime
    branches: int
    iterations: int
    best_speedup: float | None
    guard: str = ""  # the guard policy and changed rules from session.toml (engine.guard.policy); "" unknown


def summarize(repo: SessionRepo) -> SessionSummary:
    """Count a session's branches and distinct iterations and find its best correct speedup."""
    iterations = repo.all_iterations()
    speedups = [it.speedup for it in iterations if it.correct and it.speedup is not None]
    return SessionSummary(
        name=repo.name,
        path=repo.path,
        task_name=repo.task_name,
        created=repo.created,
        branches=len(repo.branches()),
        iterations=len(iterations),
        best_speedup=max(speedups) if speedups else None,
        guard=guard_token(repo.settings().get("settings", {}).get("guard")),
    )


def guard_token(guard: Any) -> str:
    """One space-free table cell: ``default``, ``strict,relax=a,refuse=b``; "" when not recorded."""
    if not isinstance(guard, dict) or not guard.get("policy"):
        return ""
    parts = [str(guard["policy"])]
    for key in ("relax", "refuse"):
        if guard.get(key):
            parts.append(f"{key}=" + "+".join(str(r) for r in guard[key]))
    return ",".join(parts)


def list_sessions(root: str | os.PathLike[str] | None = None) -> list[SessionSummary]:
    """Every readable session under ``root``, newest first; hidden and foreign directories are skipped."""
    base = Path(root).expanduser() if root is not None else default_sessions_root()
    if not base.is_dir():
        return []
    summaries = []
    for child in sorted(base.iterdir()):
        if child.name.startswith(".") or not child.is_dir() or not is_session_dir(child):
            continue
        try:
            with SessionRepo(child) as repo:
                summaries.append(summarize(repo))
        except (SessionError, GitError, OSError, ValueError):
            continue  # a damaged or foreign repository must not hide the others
    return sorted(summaries, key=lambda s: s.created, reverse=True)
