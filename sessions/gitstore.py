"""Low-level git access for session repositories: write objects, move refs, read logs.

Why not ``git add`` + ``git commit``? A session repository is *bare*: there is no work tree or
index to be left half-updated when a writer is killed. Writing a kernel version is

1. store every file as a blob, then the tree, then the commit (loose objects written by gitdb
   through a temporary file and a rename, so an object either exists whole or not at all);
2. move the branch with ``git update-ref <ref> <new> <old>`` — a compare-and-swap done by git
   under its own ``.lock`` file, and the one atomic step that makes the iteration visible.

A ``kill -9`` anywhere leaves at most unreferenced objects (``git fsck`` calls them dangling,
which is not an error) and perhaps a stale ``*.lock`` or temporary file, which the next writer
removes while holding the session lock (:func:`remove_stale_git_locks`).

Reading never spawns a process per file: one ``git log`` lists a branch with its trailers, and
blobs are read through GitPython's persistent ``git cat-file --batch`` process.

Every git child runs in its own session (:class:`DetachedGit`). A terminal sends Ctrl-C (SIGINT)
and a hang-up (SIGHUP) to its whole foreground process group; a ``git cat-file`` helper in that
group died of it while cudaforge itself was finishing a stage, and the commit that followed failed
with "session … has no branch 'main'" (issue #23). Detached, the signal reaches cudaforge alone,
which decides what to stop (ARCHITECTURE §2); a helper still ends with its parent, because its
stdin is a pipe from it.
"""

from __future__ import annotations

import io
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
from git.exc import GitCommandError
from gitdb.base import IStream
from gitdb.db.loose import LooseObjectDB

from sessions.errors import ConcurrentUpdate
from sessions.message import parse_trailer_lines

IDENTITY_NAME = "cudaforge"
IDENTITY_EMAIL = "cudaforge@localhost"
FILE_MODE = b"100644"

_RS = "\x1e"
_US = "\x1f"
_LOG_FORMAT = f"--format={_RS}%H{_US}%T{_US}%P{_US}%ct{_US}%s{_US}%(trailers:only,unfold)"


@dataclass(frozen=True)
class LogEntry:
    """One commit as listed by ``git log``: enough to describe an iteration without reading blobs."""

    sha: str
    tree: str
    parents: tuple[str, ...]
    timestamp: int
    subject: str
    trailers: dict[str, str]


_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)


class DetachedGit(git.Git):
    """GitPython's command wrapper, starting every git child in a session of its own (module docstring)."""

    def execute(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("start_new_session", True)
        return super().execute(command, *args, **kwargs)


class DetachedRepo(git.Repo):
    """A ``git.Repo`` whose git children (``cat-file`` helpers included) are :class:`DetachedGit`'s."""

    GitCommandWrapperType = DetachedGit


def open_repo(path: Path) -> git.Repo:
    """Open a session's git directory: detached git children, isolated from location variables."""
    return isolate(DetachedRepo(path))


def init_bare(path: Path) -> git.Repo:
    """``git init --bare`` at ``path``, immune to repository-location variables in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in _LOCATION_VARS}
    subprocess.run(
        ["git", "init", "--bare", "--quiet", str(path)],
        env=env,
        check=True,
        capture_output=True,
        start_new_session=True,  # a Ctrl-C meant for cudaforge must not kill it half-way
    )
    return open_repo(path)


def isolate(repo: git.Repo) -> git.Repo:
    """Make git subprocesses use this repository even if the caller's environment names another.

    A loop started from inside a git hook, or a shell with ``GIT_DIR`` exported, would otherwise
    send ``git log`` and ``git update-ref`` to the wrong repository.
    """
    git_dir = Path(repo.git_dir)
    repo.git.update_environment(GIT_DIR=str(git_dir), GIT_OBJECT_DIRECTORY=str(git_dir / "objects"))
    return repo


def _store(repo: git.Repo, kind: bytes, data: bytes) -> str:
    """Write one loose object in this process (temporary file, then rename); return its hex sha.

    Not ``repo.odb.store``: GitPython's ``GitCmdObjectDB.store`` pipes the object into a
    ``git hash-object -w --stdin --literally`` child. If this process is killed mid-pipe, that child
    reads EOF and still writes what it got: a truncated, malformed object (``git fsck`` then reports
    a "bogus commit object"). gitdb's own ``LooseObjectDB.store`` writes whole objects or nothing,
    and spawns no process per object.
    """
    stream = LooseObjectDB.store(repo.odb, IStream(kind, len(data), io.BytesIO(data)))
    return stream.hexsha.decode("ascii")


def write_blob(repo: git.Repo, data: bytes) -> str:
    """Store ``data`` as a blob; return its hex sha."""
    return _store(repo, b"blob", data)


def write_tree(repo: git.Repo, entries: dict[str, str]) -> str:
    """Store a flat tree of regular files (name → blob hex sha); return its hex sha."""
    body = b"".join(
        FILE_MODE + b" " + name.encode("utf-8") + b"\0" + bytes.fromhex(sha)
        for name, sha in sorted(entries.items(), key=lambda item: item[0].encode("utf-8"))
    )
    return _store(repo, b"tree", body)


def write_commit(
    repo: git.Repo, tree: str, parents: list[str], message: str, when: float | None = None
) -> str:
    """Store a commit by cudaforge (author and committer), so no user git identity is needed."""
    now = time.time() if when is None else when
    stamp = f"{int(now)} {_utc_offset(now)}"
    ident = f"{IDENTITY_NAME} <{IDENTITY_EMAIL}> {stamp}"
    lines = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {ident}", f"committer {ident}"]
    body = ("\n".join(lines) + "\n\n" + message).encode("utf-8")
    return _store(repo, b"commit", body)


def _utc_offset(when: float) -> str:
    offset = time.localtime(when).tm_gmtoff or 0
    sign = "+" if offset >= 0 else "-"
    minutes = abs(offset) // 60
    return f"{sign}{minutes // 60:02d}{minutes % 60:02d}"


def update_ref(repo: git.Repo, ref: str, new: str, old: str | None, reason: str) -> None:
    """Atomically point ``ref`` at ``new`` if it still points at ``old`` (``None``: must not exist)."""
    try:
        repo.git.update_ref("-m", reason, ref, new, "" if old is None else old)
    except GitCommandError as error:
        raise ConcurrentUpdate(f"could not move {ref}: {_first_line(error.stderr)}") from error


def ref_sha(repo: git.Repo, ref: str) -> str | None:
    """The sha a ref points at, or None when it does not exist.

    Read from the ref files alone (loose ref, then ``packed-refs``), never through the object
    database: a failing ``cat-file`` helper must not make an existing branch look absent, which is
    how a dead helper once turned into "session … has no branch 'main'".
    """
    try:
        return git.SymbolicReference.dereference_recursive(repo, ref)
    except (ValueError, OSError):
        return None


def read_log(repo: git.Repo, rev: str, *extra: str) -> list[LogEntry]:
    """List commits from ``rev`` (newest first) with their trailers, in a single git process."""
    out = repo.git.log(
        "--no-show-signature", "--no-color", _LOG_FORMAT, *extra, rev, strip_newline_in_stdout=False
    )
    entries = []
    for record in out.split(_RS)[1:]:
        sha, tree, parents, stamp, subject, trailers = record.split(_US, 5)
        entries.append(
            LogEntry(
                sha=sha,
                tree=tree,
                parents=tuple(parents.split()),
                timestamp=int(stamp),
                subject=subject,
                trailers=parse_trailer_lines(trailers),
            )
        )
    return entries


def remove_stale_git_locks(git_dir: Path) -> list[Path]:
    """Delete lock and temporary files a killed writer may have left; call only under the session lock."""
    removed: list[Path] = []
    candidates = [git_dir / name for name in ("HEAD.lock", "packed-refs.lock", "config.lock", "index.lock")]
    refs = git_dir / "refs"
    if refs.is_dir():
        candidates.extend(refs.rglob("*.lock"))
    objects = git_dir / "objects"
    if objects.is_dir():
        # gitdb writes objects to objects/obj* temporaries before renaming them into place.
        candidates.extend(p for p in objects.glob("obj*") if p.is_file())
    for path in candidates:
        try:
            if path.is_file():
                os.unlink(path)
                removed.append(path)
        except OSError:
            continue
    return removed


def _first_line(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else "git refused the update"
