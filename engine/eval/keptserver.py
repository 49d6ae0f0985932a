"""Fork servers kept for later commands: where one is found, and who may use it.

Why (ARCHITECTURE.md §3, "Workers forked from one that has torch"): a one-shot ``cudaforge eval`` paid
the fork server's torch import itself, as a new worker did (3.4 s of a 4.5 s evaluation with nothing to
build on the H200). So a server may outlive the command that started it, for ``CUDAFORGE_KEEP_SERVER_S``
seconds after its last client and worker (default :data:`DEFAULT_KEEP_S`; 0: every process has its own,
ended with it), and the next command with the same settings forks its workers at once.

- **The address** is an abstract Unix socket named from the server's settings, this user's id and the
  engine's own source files (a server never forks workers of code that has changed since it started).
  Binding that name is the start's lock: of two commands starting together, one binds and starts the
  server, the other connects to it. The name goes with the last descriptor, so no file is left stale.
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
_PREFIX = b"\0cudaforge-forkserver-"


class KeepError(ValueError):
    """``$CUDAFORGE_KEEP_SERVER_S`` is not a number of seconds."""


def keep_seconds() -> float:
    """How long a server stays after its last client and worker; 0: servers are not kept."""
    text = os.environ.get(KEEP_ENV, "").strip()
    if not text:
        return DEFAULT_KEEP_S
    try:
        seconds = float(text)
    except ValueError:
        raise KeepError(f"${KEEP_ENV} is {text!r}: give the seconds a fork server is kept (0: not kept)") from None
    if seconds < 0 or seconds != seconds:
        raise KeepError(f"${KEEP_ENV} is {text!r}: give the seconds a fork server is kept (0: not kept)")
    return seconds


ENGINE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=4)
def code_fingerprint(root: Path = ENGINE) -> str:
    """The source files under ``root`` (the engine's) as they are now: names, sizes, modification
    times. A server keeps the modules it imported at its start, and its workers run them."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        with contextlib.suppress(OSError):
            info = path.stat()
            digest.update(f"{path.relative_to(root)}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


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
        _pid, uid, _gid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return False
    return uid == os.getuid()
