"""Where sessions live and how a ``SESSION`` argument becomes a path.

The default root follows the XDG base-directory spec — ``$XDG_DATA_HOME/cudaforge/sessions``,
falling back to ``~/.local/share/cudaforge/sessions`` (a relative ``XDG_DATA_HOME`` is ignored,
as the spec requires). ``CUDAFORGE_SESSIONS_DIR`` overrides it for a whole shell, and every
command takes ``--sessions-dir`` for one call.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sessions.errors import NoSuchSession

SESSIONS_DIR_ENV = "CUDAFORGE_SESSIONS_DIR"
MARKER_CONFIG_SECTION = "cudaforge"


def default_sessions_root() -> Path:
    """The sessions root when none is given on the command line."""
    override = os.environ.get(SESSIONS_DIR_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "cudaforge" / "sessions"


def slugify(text: str, fallback: str = "session") -> str:
    """A directory- and branch-safe version of a task name (``Conv2d ReLU`` → ``conv2d-relu``)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip()).strip("-.").lower()
    slug = re.sub(r"-{2,}", "-", slug)
    return slug[:64] or fallback


def is_session_dir(path: Path) -> bool:
    """True for a bare git repository created by cudaforge (it carries a marker in its config)."""
    config = path / "config"
    if not (path / "HEAD").is_file() or not (path / "objects").is_dir() or not config.is_file():
        return False
    try:
        text = config.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return f"[{MARKER_CONFIG_SECTION}]" in text


def resolve_session(session: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Turn a path or a name under the sessions root into a session directory, or raise NoSuchSession."""
    candidate = Path(session).expanduser()
    if candidate.is_dir() and is_session_dir(candidate):
        return candidate.resolve()
    base = Path(root).expanduser() if root is not None else default_sessions_root()
    named = base / str(session)
    if os.sep not in str(session) and named.is_dir() and is_session_dir(named):
        return named.resolve()
    if candidate.is_dir():
        raise NoSuchSession(f"{candidate} is not a cudaforge session")
    raise NoSuchSession(f"no such session: {session} (looked for a path and under {base})")
