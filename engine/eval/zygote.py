"""The fork server's own program: torch imported once, then one forked worker per request.

Why (ARCHITECTURE.md §3, "Workers forked from one that has torch"): a worker spends most of its start
importing torch (1.3-1.4 CPU-s on two cores, seconds on a GPU box), and the test suite and every
multi-evaluation command start hundreds. This program is started by ``engine.eval.forkserver`` inside
the sandbox the workers would get, imports what the stages need (never CUDA), and waits on its control
socket. Each request brings the worker's standard input, its output pipe, its verdict pipe and a reply
socket; the server forks, and the child becomes exactly the worker ``python -m engine.eval.worker``
would be:

- a session and process group of its own (the engine kills it whole), killed if the server dies, and
  a subreaper that forks the worker and stays as its init: once the worker ends, whatever it left behind
  (reparented to the init, not to the sandbox's) is killed before the init ends as the worker did;
- only its own descriptors open, its own folder as working directory, its own allow-listed environment;
- then ``engine.eval.worker.main``, which applies the worker's own Landlock rules (sent in its
  environment) before it reads any candidate code: its job folder only, and no signal or ptrace to a
  process outside its own domain (the server, a sibling).

The child's first message on the reply socket carries its pid as the kernel numbers it for the engine
(``SO_PASSCRED``), so the engine can kill it even across bubblewrap's pid namespace; the server sends
its exit status there once it has ended, and reaps it only when the engine closes its end, so the pid
the engine kills is never another process's. Nothing here reads candidate code.

A server of one evaluating process gets its control socket and ends when that closes. A kept server
(engine.eval.keptserver) gets a listening socket instead: each connection of this user's is one engine,
whose workers are killed when it goes away, and the server leaves once it has had no engine and no
worker for its time.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

FD_ENV = "CUDAFORGE_FORKSERVER_FD"  # its one engine's control socket (a server of that process alone)
LISTEN_FD_ENV = "CUDAFORGE_FORKSERVER_LISTEN_FD"  # or a listening socket: a kept server (engine.eval.keptserver)
KEEP_ENV = "CUDAFORGE_FORKSERVER_KEEP_S"  # how long a kept server stays with no client and no worker
MAX_REQUEST_BYTES = 1 << 20
STARTED = b"started"
READY = b"ready"  # sent once on the control socket: torch and the stages' modules are imported
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
FAILED_TO_BECOME_WORKER = 70  # the child's exit code when it could not set itself up (its error is in the log)


def exit_message(code: int) -> bytes:
    """What the server sends on a worker's reply socket once it has reaped it (``subprocess``'s sign:
    a negative code is the signal that killed it)."""
    return json.dumps({"exit": code}).encode()


@dataclass
class _Child:
    """One forked worker as the server keeps it: its reply socket, whether its exit was reported, and
    whether the engine has let it go (closed its end): only then is it reaped, so that until the engine
    has killed what it left, its pid cannot be another process's."""

    reply: socket.socket
    client: socket.socket  # the control socket of the engine it was forked for
    reported: bool = False
    released: bool = False


def main() -> int:
    control_fd, listen_fd = os.environ.pop(FD_ENV, None), os.environ.pop(LISTEN_FD_ENV, None)
    keep_s = float(os.environ.pop(KEEP_ENV, "0") or 0)
    from engine.sandbox.landlock import LANDLOCK_ENV

    os.environ.pop(LANDLOCK_ENV, None)  # the rules are each worker's own, never the server's
    # torch.utils.cpp_extension's import asks torch.cuda.is_available(), which by default counts devices
    # through the CUDA runtime and marks every later fork unable to use CUDA ("Cannot re-initialize CUDA
    # in forked subprocess", seen on the H200); torch's NVML-based check counts them without that.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    from engine.eval.worker import warm_imports

    warm_imports()
    _release_nvml()
    poisoned = _cuda_unusable_after_fork()
    if poisoned:
        print(f"cudaforge fork server: {poisoned}", flush=True)
        os._exit(FAILED_TO_BECOME_WORKER)  # the engine starts each worker anew and says why
    # Orphans of a killed worker's init (a candidate's process in a session of its own) come here,
    # not to the system's init, where they would outlive their evaluation: they are ended as they come.
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(fileno=int(listen_fd)) if listen_fd else None
    clients: dict[int, socket.socket] = {}
    if control_fd:
        control = socket.socket(fileno=int(control_fd))
        control.send(READY)
        clients[control.fileno()] = control
    children: dict[int, _Child] = {}
    idle_since = time.monotonic()
    try:
        while True:
            timeout = None
            if listener is not None and not clients and not children:
                timeout = min(max(0.0, idle_since + keep_s - time.monotonic()), 3600.0)
                if timeout == 0.0:
                    break  # kept long enough with nothing to do
            poller = select.poll()
            waiting = (c.reply.fileno() for c in children.values() if not c.released)
            always = (wake_read, *([listener.fileno()] if listener is not None else []))
            for fd in (*always, *clients, *waiting):
                poller.register(fd, select.POLLIN)
            busy = bool(clients or children)
            ready = {fd for fd, _ in poller.poll(None if timeout is None else int(timeout * 1000) + 1)}
            # the engines to read, named before a descriptor is closed (a reply) or opened (a new engine):
            # a number closed and given again must not stand for the other
            asking = [clients[fd] for fd in clients if fd in ready]
            if wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_read, 512):
                        pass
                _end_strays(children)
            _let_go(children, ready)
            _report_exits(children)
            if listener is not None and listener.fileno() in ready:
                _accept(listener, clients)
            for connection in asking:
                if not _take_request(connection, children):  # that engine went away: its workers go with it
                    _end_client(clients.pop(connection.fileno()), children)
            if listener is None and not clients:
                break  # its one engine went away (or closed the server): the workers go with it
            if busy or clients or children:
                idle_since = time.monotonic()  # the kept time counts from the last client's or worker's end
    finally:
        if listener is not None:
            listener.close()  # the name is free at once: a later command starts a new server
        for pid in children:
            _kill_whole(pid)
        _end_strays({})
    os._exit(0)


def _release_nvml() -> int:
    """Ends the NVML session the imports left open, and says how many initialisations it undid.

    Torch's fork-safe device count initialises NVML on each call and never shuts it down. A forked
    child inherits that state but not its driver descriptors (it closes all but its own), so its next
    count talks to closed numbers, or to whatever the CUDA driver opened on them since: on the H200 some
    forked workers saw "Can't initialize NVML" and then no device ("Invalid device id"). With NVML shut
    down here each worker starts its own session, as a new interpreter does."""
    try:  # only a library the imports loaded: a machine without the driver has none to release
        nvml = ctypes.CDLL("libnvidia-ml.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return 0
    undone = 0
    while undone < 100_000 and nvml.nvmlShutdown() == 0:  # 0: one initialisation undone; then "uninitialized"
        undone += 1
    return undone


def _cuda_unusable_after_fork() -> str | None:
    """Why a forked worker could not use CUDA (something the server imported started it), or None: a
    child forked now says whether torch has marked it a bad fork."""
    import torch

    in_bad_fork = getattr(torch._C, "_cuda_isInBadFork", None)
    if in_bad_fork is None:
        return None  # a torch without CUDA: nothing to poison
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write, b"1" if in_bad_fork() else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(child, 0)
    return "CUDA was started before the fork: a forked worker could not use it" if answer == b"1" else None


def _accept(listener: socket.socket, clients: dict[int, socket.socket]) -> None:
    """A new engine on a kept server: told it is ready, unless it is another user's."""
    from engine.eval.keptserver import peer_is_this_user

    try:
        connection, _ = listener.accept()
    except OSError:
        return
    if not peer_is_this_user(connection):
        connection.close()
        return
    try:
        connection.send(READY)
    except OSError:
        connection.close()
        return
    clients[connection.fileno()] = connection


def _end_client(connection: socket.socket, children: dict[int, _Child]) -> None:
    """An engine went away: every worker forked for it that is not reaped yet is killed (a worker it had
    let go has ended, or was given up on; one it had not let go was let go as it died, its reply
    sockets closing with it, so whether it was let go says nothing here). They are reaped once ended."""
    connection.close()
    for pid, child in children.items():
        if child.client is connection:
            _kill_whole(pid)


def _kill_whole(pid: int) -> None:
    """A worker's init, its group and every process under it (one in a session of its own too); the
    init is not reaped yet, so its pid is still its own."""
    from engine.procgroups import kill_tree

    kill_tree(pid)


def _end_strays(children: dict[int, _Child]) -> None:
    """Every child of the server that is not a worker's init: an orphan reparented here (the server
    is a subreaper) after its init was killed, ended with all under it and reaped."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in children or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat_file:
                stat = stat_file.read()
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == me:
            _kill_whole(int(entry))
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry), os.WNOHANG)


def _report_exits(children: dict[int, _Child]) -> None:
    """Each worker that has ended: its status sent, the process left unreaped (``WNOWAIT``) until the
    engine lets it go; one the engine let go already is reaped now."""
    for pid, child in list(children.items()):
        if child.reported:
            continue
        try:
            ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            ended = None
            child.released = True
        if ended is None and not child.released:
            continue
        if ended is not None and not child.released:
            code = ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status
            with contextlib.suppress(OSError):
                child.reply.send(exit_message(code))
            child.reported = True
            continue
        _reap(children, pid)


def _let_go(children: dict[int, _Child], ready: set[int]) -> None:
    """Workers whose engine closed its end of the reply socket: reaped when they have ended."""
    for pid, child in list(children.items()):
        if child.reply.fileno() in ready:
            child.released = True
            if child.reported:
                _reap(children, pid)


def _reap(children: dict[int, _Child], pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        ended, _ = os.waitpid(pid, os.WNOHANG)
        if ended == 0:
            return  # still running: reaped once it ends (its reply is closed, nothing is reported)
    child = children.pop(pid)
    child.reply.close()


def _take_request(control: socket.socket, children: dict[int, _Child]) -> bool:
    """Fork one worker for the request waiting on ``control``; False once the engine has closed it."""
    try:
        data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 8, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True  # nothing to read after all: never wait here while the other engines wait
    except OSError:
        return False
    if not data:
        return False
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return True
    stdin_fd, output_fd, verdict_fd, reply_fd = fds
    reply = socket.socket(fileno=reply_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError as error:  # no process to be had (a candidate's fork bomb, memory): the engine starts one anew
        with contextlib.suppress(OSError):
            reply.send(f"fork failed: {error}".encode())
        reply.close()
        pid = -1
    if pid == 0:
        try:
            _become_worker(json.loads(data), server, stdin_fd, output_fd, verdict_fd, reply)
        except BaseException:  # noqa: BLE001 - said on its output, then a code the engine reads as a failed start
            with contextlib.suppress(OSError):
                os.write(output_fd, traceback.format_exc().encode(errors="replace"))
        os._exit(FAILED_TO_BECOME_WORKER)
    for fd in (stdin_fd, output_fd, verdict_fd):
        os.close(fd)
    if pid > 0:
        children[pid] = _Child(reply, control)
    return True


def _become_worker(
    request: dict[str, Any], server: int, stdin_fd: int, output_fd: int, verdict_fd: int, reply: socket.socket
) -> None:
    """In the forked child: everything ``engine.eval.supervisor.start_worker``'s Popen would have set
    up; then it forks the worker itself and stays as its init (``_watch``). Never returns."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:  # the server died before the line above took effect
        os._exit(FAILED_TO_BECOME_WORKER)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    os.dup2(stdin_fd, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ["CUDAFORGE_VERDICT_FD"] = str(verdict_fd)
    if sys.path and sys.path[0] == os.path.dirname(request["cwd"]):  # ``-m``'s entry: the server's folder
        sys.path[0] = request["cwd"]  # as a worker started in its job folder has it
    reply.send(STARTED)  # the kernel attaches this process's pid, numbered for the engine
    reply.detach()  # closed below by number; the object must never close a number reused by then
    _close_all_but(verdict_fd)
    init = os.getpid()
    worker = os.fork()
    if worker == 0:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != init:
            os._exit(FAILED_TO_BECOME_WORKER)
        from engine.eval.worker import main as worker_main

        sys.argv = ["engine.eval.worker", *request["args"]]
        os._exit(worker_main(sys.argv))
    _watch(worker, verdict_fd)


def _watch(worker: int, verdict_fd: int) -> None:
    """The worker's init: waits for it, ends every process it left behind (they were reparented here,
    a subreaper, and would otherwise outlive the evaluation in the server's sandbox), and ends as the
    worker ended, so the server reports the worker's own status. Runs no candidate code."""
    os.close(verdict_fd)
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    _, status = os.waitpid(worker, 0)
    _end_orphans()
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os._exit(128 - code)  # a signal whose default is not to end a process
    os._exit(code)


def _end_orphans(limit_s: float = 10.0) -> None:
    from engine.procgroups import descendants

    me, deadline = os.getpid(), time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for pid in descendants(me):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if reaped == 0:
            time.sleep(0.01)


def _close_all_but(keep: int) -> None:
    """Every descriptor above the standard three closed except ``keep``: the server's control socket,
    its wake-up pipe and the other workers' reply sockets never reach candidate code."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
