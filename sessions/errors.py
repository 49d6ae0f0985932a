"""Exceptions of the session repository.

Every error a user can cause (a wrong session name, an iteration that does not exist, a branch
name already taken, a second writer) is a :class:`SessionError`, so the CLI can print it as one
line and exit 2 without catching unrelated bugs.
"""

from __future__ import annotations


class SessionError(Exception):
    """Base of every error the session layer reports to its caller."""


class NoSuchSession(SessionError):
    """The path or name does not lead to a cudaforge session repository."""


class SessionExists(SessionError):
    """A session of that name already exists under the sessions root."""


class NoSuchBranch(SessionError):
    """The session has no branch of that name."""


class BranchExists(SessionError):
    """An explicitly requested branch name is already taken."""


class NoSuchIteration(SessionError):
    """The branch has no iteration with that number."""


class NoSuchFile(SessionError):
    """The iteration's commit does not contain that file."""


class SessionLocked(SessionError):
    """Another live writer holds the session's writer lock: ``pid`` on ``host`` since ``since``
    (as its lock file says; None when unreadable), so a front end can say who writes."""

    def __init__(
        self, message: str, pid: int | None, host: str | None = None, since: str | None = None
    ) -> None:
        super().__init__(message)
        self.pid = pid
        self.host = host
        self.since = since


class ConcurrentUpdate(SessionError):
    """The branch moved between reading its tip and updating it (someone bypassed the lock)."""


class StaleLockWarning(UserWarning):
    """A lock left by a dead writer was taken over; callers may show this to the user."""
