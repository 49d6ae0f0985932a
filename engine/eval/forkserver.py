"""Workers forked from a sandboxed server that has imported torch once (the engine's side).

Why (ARCHITECTURE.md §3, "Workers forked from one that has torch"): each worker started with
``python -m engine.eval.worker`` imports torch again, 1.3-1.4 CPU-s here and seconds on a GPU box; the
test suite starts over five hundred, a loop or an exploration one or more a round. A fork server
(``engine.eval.zygote``) is started once per evaluating process and sandbox setting, in the sandbox a
worker would get, with the folder of all job folders (``engine.eval.jobdirs``) and the build cache
writable; each worker is then a fork of it, which sets itself up as a started worker would be and
confines itself to its own job folder with Landlock before any candidate code runs.

What stays as it was: one process per evaluation, its own session and group, its own allow-listed
environment and private home, its verdict on its own pipe; the supervisor sees a :class:`ForkedProcess`
as it sees a ``subprocess.Popen``. Where a worker could not be kept apart from its siblings (Landlock
without signal scopes under bubblewrap) or the server cannot start, workers start the usual way.
``[eval] workers``: ``auto`` and ``fork`` fork CPU and CUDA workers alike (``auto`` leaves
``$CUDAFORGE_WORKERS`` the last word); ``exec`` never forks. Unless ``$CUDAFORGE_KEEP_SERVER_S`` is 0,
the server is one kept for later commands (engine.eval.keptserver): found running, or started detached,
in the background where the command is one-shot (its own worker then starts anew).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import json
import os
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine import procgroups, sandbox
from engine.config import WORKER_STARTS
from engine.eval import jobdirs, keptserver, zygote
from engine.eval.options import EvalOptions, EvaluationError

SERVER_START_TIMEOUT_S = 120.0  # its torch import on a loaded machine
FORK_TIMEOUT_S = 30.0
SERVER_LAUNCH_WAIT_S = 30.0  # at exit, for a background launch (a sandbox's set-up and one process start)
WORKERS_ENV = "CUDAFORGE_WORKERS"


class ForkError(RuntimeError):
    """The server could not fork this worker (the caller starts it the usual way). ``stuck``: it
    answered nothing in time (a kept one is then ended for every command: ForkServer.end_kept)."""

    def __init__(self, message: str, stuck: bool = False) -> None:
        super().__init__(message)
        self.stuck = stuck


class ForkedProcess:
    """One forked worker as the supervisor uses a ``subprocess.Popen``: ``pid`` (numbered as this
    process sees it), ``poll``, ``wait`` and ``returncode`` (negative: the signal that killed it).

    The server keeps the ended process unreaped until :meth:`release`, so that its pid stays its own
    while the engine kills what it left. ``server_lost``: the server ended before the worker's status
    came (its workers die with it), which is cudaforge's fault, never the kernel's."""

    def __init__(self, pid: int, reply: socket.socket, args: Sequence[str], server: str = "own") -> None:
        self.pid = pid
        self.args = list(args)
        self.server = server  # ForkServer.origin of the server that forked it
        self.returncode: int | None = None
        self.server_lost = False
        self._reply = reply
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._read(remaining)
        return self.returncode

    def abandon(self) -> None:
        """No status came in time (a stuck server): read as lost with its server."""
        with self._lock:
            if self.returncode is None:
                self.returncode, self.server_lost = -signal.SIGKILL, True

    def release(self) -> None:
        """The engine is done with this worker (it has killed what the worker left and read its
        status): the server may reap it now. Idempotent."""
        with self._lock, contextlib.suppress(OSError):
            self._reply.close()

    def _read(self, timeout: float | None) -> None:
        with self._lock:
            if self.returncode is not None:
                return
            if self._reply.fileno() < 0:  # released before its status came: nothing more will
                self.returncode, self.server_lost = -signal.SIGKILL, True
                return
            poller = select.poll()
            poller.register(self._reply.fileno(), select.POLLIN)
        poller.poll(None if timeout is None else max(0, int(timeout * 1000)))
        with self._lock:
            if self.returncode is not None or self._reply.fileno() < 0:
                return
            try:
                data = self._reply.recv(256, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            self.returncode = _exit_code(data)
            self.server_lost = not data  # no message at all: the server went away, its workers with it


def _connected(control: socket.socket) -> bool:
    """Whether the server at the other end of ``control`` is still there (it never writes on it after
    its ready word, so anything readable is its end)."""
    if control.fileno() < 0:
        return False
    poller = select.poll()
    poller.register(control.fileno(), select.POLLIN)
    if not poller.poll(0):
        return True
    try:
        return control.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _exit_code(data: bytes) -> int:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return int(json.loads(data)["exit"])
    return -signal.SIGKILL


def _wait_readable(sock: socket.socket, seconds: float) -> bool:
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(int(seconds * 1000)))


@dataclass
class ForkServer:
    """A server this process forks workers from: its own (``process``, ended with it), or a kept one
    (``kept``; engine.eval.keptserver), reached on ``control`` and started by this process (``process``)
    or by an earlier command (``process`` None)."""

    key: tuple[object, ...]
    process: subprocess.Popen | None
    control: socket.socket
    mechanism: str
    jobs_root: Path
    kept: bool = False
    closed: bool = False
    pidfd: int | None = None  # a kept server's process (whoever started it), to end it if it gets stuck

    def alive(self) -> bool:
        if not self.kept and self.process is not None:
            return self.process.poll() is None
        return _connected(self.control)

    @property
    def origin(self) -> str:
        """``own`` (this process's alone), ``kept-started`` (kept, started by this process) or
        ``kept-found`` (kept, started by an earlier command): what a result's settings say."""
        if not self.kept:
            return "own"
        return "kept-started" if self.process is not None else "kept-found"

    def spawn(
        self, job_dir: Path, args: Sequence[str], env: Mapping[str, str], stdin_fd: int, output_fd: int, verdict_fd: int
    ) -> ForkedProcess:
        """Fork one worker in ``job_dir`` with ``env`` as its whole environment and ``args`` as the
        worker's arguments; its standard input, output (and error) and verdict pipe are these. Raises
        ForkError when the server forked nothing (the caller then starts the worker anew)."""
        try:
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError as error:
            raise ForkError(f"no socket for the fork server's reply: {error}") from error
        try:
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            request = json.dumps({"cwd": str(job_dir), "env": dict(env), "args": list(args)}).encode()
            socket.send_fds(self.control, [request], [stdin_fd, output_fd, verdict_fd, theirs.fileno()])
            theirs.close()
            if not _wait_readable(mine, FORK_TIMEOUT_S):
                raise ForkError(f"the fork server forked nothing within {FORK_TIMEOUT_S:g} s", stuck=True)
            message, ancillary, _, _ = mine.recvmsg(256, socket.CMSG_SPACE(struct.calcsize("iII")))
        except (OSError, ForkError) as error:
            theirs.close()
            mine.close()
            if isinstance(error, ForkError):
                raise
            raise ForkError(f"the fork server took no request: {error}") from error
        pid = next(
            (
                struct.unpack("iII", data[: struct.calcsize("iII")])[0]
                for level, kind, data in ancillary
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
            ),
            None,
        )
        if message != zygote.STARTED or not pid:
            mine.close()
            raise ForkError(f"the forked worker did not start (the server said {message[:200]!r})")
        return ForkedProcess(pid, mine, args, self.origin)

    def end_kept(self) -> None:
        """A kept server that forked nothing in time, ended for every command: it would hold up each
        one that finds it for the fork's timeout, and never leave, with clients still coming. Its name
        is free at once for a new one; workers it forked for other commands end with it, and those
        evaluations say so as cudaforge's fault, never the kernel's."""
        if self.kept and self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        """Every worker it forked for this process ended, and the server too unless it is kept (the
        server kills a client's workers when its control socket closes; what is left of a server of
        this process alone is killed here). Idempotent."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.control.close()
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None
        if self.kept or self.process is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=2.0)
        if self.process.returncode is None:  # never a reaped pid: it may be another process's by now
            procgroups.kill_tree(self.process.pid)
        self.process.wait()


class _Starter:
    """The one thread servers start from, a daemon that lives as long as the process: bwrap's
    --die-with-parent (PR_SET_PDEATHSIG under it) ends a child when the *thread* that started it ends,
    and the first worker may be asked for by a branch's or a spare's thread that ends long before the
    server's last worker (a pool's thread would end at exit before the threads still evaluating)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], object], concurrent.futures.Future]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, start: Callable[[], object]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cudaforge-forkserver", daemon=True)
                self._thread.start()
        self._jobs.put((start, future))
        return future

    def _run(self) -> None:
        while True:
            start, future = self._jobs.get()
            try:
                future.set_result(start())
            except BaseException as error:  # noqa: BLE001 - handed to the caller, which waits on it
                future.set_exception(error)


_LOCK = threading.Lock()
_STARTER = _Starter()
_SERVERS: dict[tuple[object, ...], ForkServer] = {}
_RETIRED: list[ForkServer] = []  # given up on (no new workers), left to finish the ones they have
_BROKEN: dict[tuple[object, ...], str] = {}  # settings whose server failed once: why, never retried
_PENDING: dict[tuple[object, ...], concurrent.futures.Future] = {}  # kept servers being launched in the background


def workers_choice(configured: str) -> str:
    """How workers start for ``[eval] workers = configured``: the setting itself, or where it says
    ``auto``, ``$CUDAFORGE_WORKERS`` (``fork``, ``exec`` or ``auto``) when set; anything else there is an
    EvaluationError that names it (a typo would otherwise have forked in silence)."""
    if configured != "auto":
        return configured
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text and text not in WORKER_STARTS:
        raise EvaluationError(f"${WORKERS_ENV} is {text!r}: say fork, exec or auto (or unset it)")
    return text or "auto"


def wanted(options: EvalOptions) -> bool:
    """Whether these options' workers are forked (``[eval] workers``, above): on CPU and CUDA alike, unless
    they say ``exec``. Where they say ``auto``, ``$CUDAFORGE_WORKERS`` may choose instead
    (:func:`workers_choice`): how a benchmark measures both ways on one box."""
    return workers_choice(options.workers) != "exec"


def kept(options: EvalOptions) -> bool:
    """Whether these options' server is one kept for later commands (engine.eval.keptserver): their
    workers are forked, ``$CUDAFORGE_KEEP_SERVER_S`` is not 0 and this user's private folder can be had.
    A bad ``$CUDAFORGE_KEEP_SERVER_S`` is the caller's to say (EvaluationError)."""
    if not wanted(options):
        return False
    try:
        seconds = keptserver.keep_seconds()
    except keptserver.KeepError as error:
        raise EvaluationError(str(error)) from error
    return seconds > 0 and jobdirs.shared_root() is not None


def server_key(options: EvalOptions, cache_root: Path) -> tuple[object, ...]:
    """What a server's start depends on (its sandbox's folders and tools, what its imports find); the
    GPU is each worker's."""
    kind = "cuda" if options.device.startswith("cuda") else "cpu"
    path, python_path = os.environ.get("PATH"), os.environ.get("PYTHONPATH")
    jobs = jobdirs.jobs_root(kept(options))  # made anew if it was deleted: a server bound the old one
    return (options.sandbox, str(cache_root), sys.executable, path, python_path, kind, str(jobs), _inode(jobs))


def _inode(path: Path) -> int:
    try:
        return path.stat().st_ino
    except OSError:
        return 0


def server_for(options: EvalOptions, cache_root: Path) -> ForkServer | None:
    """The running server for these settings, started now if there is none; None where workers for
    them are not forked, where the server could not start (then, for good: why is in ``broken``), or
    while a one-shot command's kept server is launched in the background (keptserver.starts_in_background:
    this worker starts anew; a later call joins that server)."""
    if not wanted(options):
        return None
    key = server_key(options, cache_root)
    with _LOCK:
        server = _SERVERS.get(key)
        if server is not None and server.alive():
            return server
        if server is not None:  # it died: closed as any server is (its socket, a kept one's pidfd), a new one starts
            server.close()
            del _SERVERS[key]
        if key in _BROKEN:
            return None
        launched: subprocess.Popen | None = None
        pending = _PENDING.get(key)
        if pending is not None and not pending.done():
            return None  # its launch is under way: this worker starts anew
        if pending is not None:
            del _PENDING[key]
            if pending.exception() is not None:
                _BROKEN[key] = str(pending.exception())
                return None
            launched = pending.result()
        elif kept(options) and keptserver.starts_in_background():
            try:
                mechanism = _fork_mechanism(options)  # a sandbox that cannot run or keep workers apart: nothing launched
            except ForkError as error:
                _BROKEN[key] = str(error)
                return None
            # Under Landlock alone (no pid namespace) nothing ends what a worker started anew leaves running
            # (a setsid'd daemon); a forked one's own init does. So there the command waits for its server.
            if mechanism != "landlock":
                name = kept_address(key, options, cache_root)
                listener = keptserver.listen(name)
                if listener is not None:  # none runs or starts: launched for the next command, not waited for
                    _PENDING[key] = _STARTER.submit(lambda: _launch_kept(options, cache_root, name, listener))
                    return None
        try:
            server = _STARTER.submit(lambda: _start(key, options, cache_root, launched)).result()
        except ForkError as error:
            _BROKEN[key] = str(error)
            return None
        _SERVERS[key] = server
        return server


def _fork_mechanism(options: EvalOptions) -> str:
    """The sandbox mechanism these options' workers are forked under; ForkError where its sandbox does
    not run, or cannot keep forked workers apart."""
    try:
        mechanism = sandbox.resolve_mode(options.sandbox)
    except sandbox.SandboxError as error:
        raise ForkError(str(error)) from error
    blocker = sandbox.fork_blocker(mechanism)
    if blocker:
        raise ForkError(blocker)
    return mechanism


def give_up(server: ForkServer, why: str, stuck: bool = False) -> None:
    """``server`` failed to fork a worker: these settings' workers start as new interpreters from now
    on (a stuck server must not cost every later evaluation the fork's timeout). It is not ended: the
    workers it forked already finish their evaluations (it is ended at exit; if it dies first, each of
    its evaluations says so as cudaforge's fault). A kept one that is ``stuck`` is ended
    (ForkServer.end_kept)."""
    with _LOCK:
        if _SERVERS.get(server.key) is server:
            del _SERVERS[server.key]
            _RETIRED.append(server)
        _BROKEN[server.key] = why
    if stuck:  # never for a fork that failed (a candidate elsewhere can make forks fail): the others would pay
        server.end_kept()


def broken(options: EvalOptions, cache_root: Path) -> str | None:
    """Why these settings' server could not start, if it could not."""
    with _LOCK:
        return _BROKEN.get(server_key(options, cache_root))


def _start(
    key: tuple[object, ...], options: EvalOptions, cache_root: Path, launched: subprocess.Popen | None = None
) -> ForkServer:
    """The server for ``key``: this process's own, or the kept one (``launched``: the one this process
    launched in the background, which it joins now)."""
    mechanism = _fork_mechanism(options)
    if kept(options):
        return _join_kept(key, mechanism, options, cache_root, launched)
    root = jobdirs.jobs_root()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        process = _launch(options, cache_root, root, root / "forkserver.log", {zygote.FD_ENV: str(theirs.fileno())}, theirs)
    finally:
        theirs.close()
    if process is None:
        mine.close()
        raise ForkError(f"the fork server did not start: {_log_tail(root / 'forkserver.log')}")
    procgroups.track(process)
    server = ForkServer(key, process, mine, mechanism, root)
    if not _ready(mine):
        server.close()
        raise ForkError(f"the fork server did not get ready: {_log_tail(root / 'forkserver.log')}")
    return server


def _join_kept(
    key: tuple[object, ...], mechanism: str, options: EvalOptions, cache_root: Path, launched: subprocess.Popen | None = None
) -> ForkServer:
    """The kept server for ``key``: connected to where one runs, else started now, detached from this
    process (engine.eval.keptserver). Of two processes starting one together, the one that binds the
    name starts it and the other connects to it; a server leaving just as it was reached is started anew.
    ``launched``: the server this process launched in the background, its own to end if it gets stuck."""
    root = jobdirs.jobs_root(shared=True)
    name = kept_address(key, options, cache_root)
    log = _kept_log(root, name)
    why = "no kept fork server could be reached"
    for attempt in range(3):
        process = launched if attempt == 0 and launched is not None and launched.poll() is None else None
        client = keptserver.connect(name)
        if client is None:
            listener = keptserver.listen(name)
            if listener is None:  # another process holds the name: its server is starting
                time.sleep(0.05)
                continue
            process = _launch_kept(options, cache_root, name, listener)
            client = keptserver.connect(name)
            if client is None:
                why = f"the kept fork server ended before it listened: {_log_tail(log)}"
                continue
        credentials = _ready_from(client)
        if credentials is not None:
            refused = keptserver.impostor(name, *credentials, mechanism)
            if refused:  # never handed a pipe: this process's workers start anew
                client.close()
                raise ForkError(refused)
            return ForkServer(key, process, client, mechanism, root, kept=True, pidfd=_pidfd_while(credentials[0], client))
        client.close()
        why = f"the kept fork server did not get ready: {_log_tail(log)}"
        if process is not None and process.poll() is None:
            procgroups.kill_tree(process.pid)  # started here and stuck in its start: not left behind
            process.wait()
    raise ForkError(why)


def _launch_kept(options: EvalOptions, cache_root: Path, name: bytes, listener: socket.socket) -> subprocess.Popen:
    """The kept server's process, detached, handed ``listener`` (bound to ``name``, closed here whatever
    happens: the name goes with the server, or with nothing) and recorded as this user's command's own
    (keptserver.record_start)."""
    try:
        root = jobdirs.jobs_root(shared=True)
        log = _kept_log(root, name)
        extra = {zygote.LISTEN_FD_ENV: str(listener.fileno()), zygote.KEEP_ENV: str(keptserver.keep_seconds())}
        process = _launch(options, cache_root, root, log, extra, listener, outlive=True)
    except OSError as error:
        raise ForkError(f"the kept fork server did not start: {error}") from error
    finally:
        listener.close()
    if process is None:
        raise ForkError(f"the kept fork server did not start: {_log_tail(log)}")
    keptserver.record_start(name, process.pid)
    return process


def _kept_log(root: Path, name: bytes) -> Path:
    """The log of the kept server of this name (its own: rewritten by each start)."""
    return root / f"forkserver-{name[-32:].decode()}.log"


def kept_address(key: tuple[object, ...], options: EvalOptions, cache_root: Path) -> bytes:
    """The abstract socket name of the kept server for these settings: ``key`` and the environment
    the server would start with (what its imports read)."""
    from engine.sandbox.env import is_allowed
    from engine.sandbox.landlock import LANDLOCK_ENV

    root = jobdirs.jobs_root(shared=True)
    launch = sandbox.prepare(options.sandbox, ["python"], job_dir=root, writable=[cache_root])
    # What the server's imports may read (the allow-list: with no sandbox the whole environment would
    # give each folder and shell a server of its own) and, under bwrap, what it mounts (the folders it
    # hides depend on where the command runs); never its Landlock rules, which are each worker's own.
    environment = tuple(sorted((k, v) for k, v in launch.env.items() if is_allowed(k) and k != LANDLOCK_ENV))
    mounts = tuple(launch.argv[: launch.argv.index("--clearenv")]) if launch.mechanism == "bwrap" else ()
    return keptserver.address((*key, environment, mounts))


def _launch(
    options: EvalOptions,
    cache_root: Path,
    root: Path,
    log_path: Path,
    extra_env: dict[str, str],
    passed: socket.socket,
    outlive: bool = False,
) -> subprocess.Popen | None:
    """The server's process in the workers' sandbox, ``passed`` its socket; None (and why, in the log)
    where it could not start. ``outlive``: a kept server, not ended with this process or its thread."""
    try:
        launch = sandbox.prepare(
            options.sandbox,
            [sys.executable, "-m", "engine.eval.zygote"],
            job_dir=root,
            writable=[cache_root],
            extra_env={**extra_env, "PYTHONUNBUFFERED": "1"},
            device=options.device,
            outlive_parent=outlive,
        )
        with open(log_path, "wb" if outlive else "ab") as log:  # a kept server's log is its own name's
            return subprocess.Popen(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=root,
                env=launch.env,
                pass_fds=(passed.fileno(),),
                start_new_session=True,
            )
    except (sandbox.SandboxError, OSError) as error:
        with contextlib.suppress(OSError), open(log_path, "a") as log:
            log.write(f"{error}\n")
        return None


def _ready(control: socket.socket) -> bool:
    try:
        return _wait_readable(control, SERVER_START_TIMEOUT_S) and control.recv(64) == zygote.READY
    except OSError:
        return False


def _ready_from(client: socket.socket) -> tuple[int, int] | None:
    """The kept server's pid (as this process numbers it) and uid, from its ready word's credentials
    (the connection asked for them before it connected; (0, -1) where none came), or None when it did
    not get ready."""
    try:
        if not _wait_readable(client, SERVER_START_TIMEOUT_S):
            return None
        message, ancillary, _, _ = client.recvmsg(64, socket.CMSG_SPACE(struct.calcsize("iII")))
    except OSError:
        return None
    if message != zygote.READY:
        return None
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, uid, _gid = struct.unpack("iII", data[: struct.calcsize("iII")])
            return pid, uid
    return 0, -1


def _pidfd_while(pid: int, client: socket.socket) -> int | None:
    """A pidfd of ``pid``, kept only if the server is still there once it is open: then the pid was
    still its own, not one reused since its ready word."""
    if pid <= 0:
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
    if _connected(client):
        return pidfd
    os.close(pidfd)
    return None


def _log_tail(path: Path) -> str:
    try:
        tail = path.read_bytes()[-400:].decode(errors="replace").strip()
    except OSError:
        tail = ""
    return tail or "no output"


@atexit.register
def close_all() -> None:
    with _LOCK:
        pending = list(_PENDING.values())
        _PENDING.clear()
    concurrent.futures.wait(pending, timeout=SERVER_LAUNCH_WAIT_S)  # a launch under way: done before exit
    for future in pending:  # a one-shot command never asks again: say why the next one will not fork at once
        failed = future.exception() if future.done() else None
        if failed is not None:
            print(f"cudaforge: the fork server kept for the next command could not start: {failed}", file=sys.stderr)
    with _LOCK:
        servers = [*_SERVERS.values(), *_RETIRED]
        _SERVERS.clear()
        _RETIRED.clear()
    for server in servers:
        server.close()
