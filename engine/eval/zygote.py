"""The fork server's own program: torch imported once, then one forked worker per request.

Why (ARCHITECTURE.md §3, "Workers forked from one that has torch"): a worker spends most of its start
importing torch (1.3-1.4 CPU-s on two cores, seconds on a GPU box), and the test suite and every
multi-evaluation command start hundreds. This program is started by ``engine.eval.forkserver`` inside
the sandbox the workers would get, imports what the stages need (never CUDA), and waits on its control
socket. Each request brings the worker's standard input, its output pipe, its verdict pipe and a reply
socket; the server forks, and the child becomes exactly the worker ``python -m engine.eval.worker``
would be:

- a session and process group of its own (the engine kills it whole), a subreaper (an orphan it leaves
  stays below it, where the engine's kill finds it), killed if the server dies;
- only its own descriptors open, its own folder as working directory, its own allow-listed environment;
- then ``engine.eval.worker.main``, which applies the worker's own Landlock rules (sent in its
  environment) before it reads any candidate code: its job folder only, and no signal or ptrace to a
  process outside its own domain (the server, a sibling).

The child's first message on the reply socket carries its pid as the kernel numbers it for the engine
(``SO_PASSCRED``), so the engine can kill it even across bubblewrap's pid namespace; the server sends
its exit status there when it has reaped it. Nothing here reads candidate code.
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
import traceback
from typing import Any

FD_ENV = "CUDAFORGE_FORKSERVER_FD"
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


def main() -> int:
    control = socket.socket(fileno=int(os.environ.pop(FD_ENV)))
    from engine.sandbox.landlock import LANDLOCK_ENV

    os.environ.pop(LANDLOCK_ENV, None)  # the rules are each worker's own, never the server's
    from engine.eval.worker import warm_imports

    warm_imports()
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    control.send(READY)
    children: dict[int, socket.socket] = {}
    try:
        while True:
            ready, _, _ = select.select([control, wake_read], [], [])
            if wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_read, 512):
                        pass
                _reap(children)
            if control in ready and not _take_request(control, children):
                break  # the engine went away (or closed the server): the workers go with it
    finally:
        for pid in children:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
    os._exit(0)


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = children.pop(pid, None)
        if reply is not None:
            with contextlib.suppress(OSError):
                reply.send(exit_message(os.waitstatus_to_exitcode(status)))
            reply.close()


def _take_request(control: socket.socket, children: dict[int, socket.socket]) -> bool:
    """Fork one worker for the request waiting on ``control``; False once the engine has closed it."""
    try:
        data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 8)
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
    pid = os.fork()
    if pid == 0:
        try:
            _become_worker(json.loads(data), server, stdin_fd, output_fd, verdict_fd, reply)
        except BaseException:  # noqa: BLE001 - said on its output, then a code the engine reads as a failed start
            with contextlib.suppress(OSError):
                os.write(output_fd, traceback.format_exc().encode(errors="replace"))
        os._exit(FAILED_TO_BECOME_WORKER)
    for fd in (stdin_fd, output_fd, verdict_fd):
        os.close(fd)
    children[pid] = reply
    return True


def _become_worker(
    request: dict[str, Any], server: int, stdin_fd: int, output_fd: int, verdict_fd: int, reply: socket.socket
) -> None:
    """In the forked child: everything ``engine.eval.supervisor.start_worker``'s Popen would have set
    up, then the worker itself. Never returns."""
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
    reply.send(STARTED)  # the kernel attaches this process's pid, numbered for the engine
    reply.detach()  # closed below by number; the object must never close a number reused by then
    _close_all_but(verdict_fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ["CUDAFORGE_VERDICT_FD"] = str(verdict_fd)
    from engine.eval.worker import main as worker_main

    sys.argv = ["engine.eval.worker", *request["args"]]
    os._exit(worker_main(sys.argv))


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
