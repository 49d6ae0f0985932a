"""Fork servers kept for later commands: where one is found, and who may use it.

Why (ARCHITECTURE.md §3, "Workers forked from one that has torch"): a one-shot ``cudaforge eval`` paid
the fork server's torch import itself, as a new worker did (3.4 s of a 4.5 s evaluation with nothing to
build on the H200). So a server may outlive the command that started it, for ``CUDAFORGE_KEEP_SERVER_S``
seconds after its last client and worker (default :data:`DEFAULT_KEEP_S`; 0: every process has its own,
ended with it), and the next command with the same settings forks its workers at once. Only one-shot
commands keep their server (:func:`for_one_shot_command`). Such a command that finds none running starts
one in the background for the next command and starts its own worker anew (a command that waited for
the server's start paid more than one that started its worker anew: 10.9 s against 7.8 s for the ReLU on
the H200), so the first command does not wait for the server: its new worker imports torch beside it, and
only a command started before the server is ready waits for the rest of its start.

- **The address** is an abstract Unix socket named from the server's settings, this user's id and the
  engine's own source files (a server never forks workers of code that has changed since it started).
  Binding that name is the start's lock: of two commands starting together, one binds and starts the
  server, the other connects to it. The name goes with the last descriptor, so no file is left stale.
- **Whom a command trusts.** The command that starts a server writes its process's pid and start time
  into this user's private folder (engine.eval.jobdirs), where no worker can read or write. A command
  forks its workers only from a server whose ready word comes with this user's id and that pid (under
  bubblewrap, the server is that process's grandchild): a process of another user, or a candidate's, that
  bound the name (a worker may bind abstract names, only not connect out of its domain) is refused.
- **Who may connect.** Another user's process is refused by the server (its peer credentials). A
  worker cannot reach it: Landlock's abstract-socket scope (ABI 6, which forking needs already) keeps
  a confined process from any abstract socket made outside its domain, and under bubblewrap the
  workers have a network namespace of their own besides. A worker shares the server's memory as it was
  at the fork, so no secret held by the server could tell the engine from a worker; these two walls do.
- **Lifetime.** Each connection is one client. When a client goes away, the server kills the workers it
  forked for it that the client had not let go, as it killed all of them when its only engine went away
  before. It leaves once it has had no client and no worker for its time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import socket
from pathlib import Path

KEEP_ENV = "CUDAFORGE_KEEP_SERVER_S"
DEFAULT_KEEP_S = 600.0
MAX_KEEP_S = 7 * 24 * 3600.0  # a week: beyond, say 0 for never kept or restart it
_PREFIX = b"\0cudaforge-forkserver-"


class KeepError(ValueError):
    """``$CUDAFORGE_KEEP_SERVER_S`` is not a number of seconds."""


_ONE_SHOT: list[bool] = [False]
_IN_BACKGROUND: list[bool] = [False]


def for_one_shot_command() -> None:
    """Said by a command that evaluates once and exits (``cudaforge eval``) before it evaluates: its
    server is kept for the next command. A command that evaluates many times (run, bench, evalset,
    explore, the workbench) pays its server's start once, and its server ends with it: kept, it would
    only outlive a long session, and every such command a script or a test starts would leave one. A
    server this command would start is started for the next command while its own worker starts anew
    (:func:`starts_in_background`)."""
    _ONE_SHOT[0] = True
    _IN_BACKGROUND[0] = True


def starts_in_background() -> bool:
    """Whether a kept server that is not running yet is started in the background, this command's worker
    started anew meanwhile: a one-shot command evaluates once, so waiting for its server would only delay
    it (the server's imports are what a new worker does anyway), and the next command forks from it."""
    return _ONE_SHOT[0] and _IN_BACKGROUND[0]


def keep_seconds() -> float:
    """How long this command's server stays after its last client and worker; 0: not kept (always, for
    a command that did not say it is one-shot)."""
    if not _ONE_SHOT[0]:
        return 0.0
    text = os.environ.get(KEEP_ENV, "").strip()
    if not text:
        return DEFAULT_KEEP_S
    try:
        seconds = float(text)
    except ValueError:
        raise KeepError(f"${KEEP_ENV} is {text!r}: give the seconds a fork server is kept (0: not kept; at most {MAX_KEEP_S:g})") from None
    if not 0 <= seconds <= MAX_KEEP_S:  # NaN and infinity too
        raise KeepError(f"${KEEP_ENV} is {text!r}: give the seconds a fork server is kept (0: not kept; at most {MAX_KEEP_S:g})")
    return seconds


ENGINE = Path(__file__).resolve().parents[1]
SOURCES = (ENGINE, ENGINE.parent / "sessions")  # what a worker imports of cudaforge


@functools.lru_cache(maxsize=4)
def code_fingerprint(roots: tuple[Path, ...] = SOURCES) -> str:
    """The source files under ``roots`` (cudaforge's own) and torch's as they are now: names, sizes,
    modification times. A server keeps the modules it imported at its start, and its workers run them."""
    digest = hashlib.sha256()
    files = [path for root in roots for path in sorted(root.rglob("*.py"))]
    for path in [*files, *_torch_files()]:
        with contextlib.suppress(OSError):
            info = path.stat()
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _torch_files() -> list[Path]:
    """torch's version file and compiled core, found without importing it (an upgrade in place)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return []
    folder = Path(spec.origin).parent
    return [folder / "version.py", *sorted(folder.glob("_C*.so"))]


def address(key: tuple[object, ...], fingerprint: str | None = None) -> bytes:
    """The abstract socket name of the kept server for ``key`` (a server's settings), for this user and
    the engine's sources (``fingerprint``: :func:`code_fingerprint` unless given)."""
    text = "\0".join([repr(key), str(os.getuid()), fingerprint or code_fingerprint()])
    return _PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32].encode()


def listen(name: bytes) -> socket.socket | None:
    """A listening socket bound to ``name``, or None where another process holds the name (its server
    is starting or running: connect to it)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind(name)
        listener.listen(64)
    except OSError:
        listener.close()
        return None
    return listener


def connect(name: bytes) -> socket.socket | None:
    """A connection to the server listening on ``name``, or None where none listens."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the ready word carries the server's pid
        client.connect(name)
    except OSError:
        client.close()
        return None
    return client


def peer_is_this_user(connection: socket.socket) -> bool:
    """Whether the process at the other end of ``connection`` runs as this user (the server's check)."""
    import struct

    try:
        _pid, uid, _gid = struct.unpack("iII", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return False
    return uid == os.getuid()


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _record(name: bytes) -> Path | None:
    from engine.eval.jobdirs import private_dir

    private = private_dir()
    if private is None:
        return None
    folder = private / "servers"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder / f"{name[-32:].decode()}.pid"


def record_start(name: bytes, pid: int) -> None:
    """Written by the command that started the server for ``name``: the pid it started (the server, or
    under bubblewrap the bwrap process above it) and that process's start time (pids are reused)."""
    path, fields = _record(name), _stat_fields(pid)
    if path is None or fields is None:
        return
    partial = path.with_suffix(f".{os.getpid()}")
    with contextlib.suppress(OSError):
        partial.write_text(f"{pid} {fields[19]}\n")
        os.replace(partial, path)


def impostor(name: bytes, pid: int, uid: int, mechanism: str) -> str | None:
    """Why the process that said it is ready on ``name`` (``pid`` and ``uid`` from its credentials) is
    not the server a command of this user started for it, or None when it is."""
    if uid != os.getuid():
        return f"the process listening as the kept fork server runs as uid {uid}, not this user's {os.getuid()}"
    path = _record(name)
    try:
        started, start_time = (path.read_text().split() if path is not None else ["", ""])[:2]
        started_pid = int(started)
    except (OSError, ValueError):
        return "no command of this user started the process listening as the kept fork server"
    fields = _stat_fields(started_pid)
    if fields is None or fields[19] != start_time:
        return "the process a command of this user started as the kept fork server is gone"
    expected = pid
    if mechanism == "bwrap":  # bwrap's process, its pid namespace's init, then the server
        for _ in range(2):
            above = _stat_fields(expected)
            expected = int(above[1]) if above else -1
    if expected != started_pid:
        return f"the process listening as the kept fork server (pid {pid}) is not the one a command of this user started"
    return None
