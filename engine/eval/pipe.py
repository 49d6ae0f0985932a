"""The verdict pipe: how the worker tells the engine what happened (ARCHITECTURE.md §3).

The worker writes JSON lines to a private pipe whose descriptor it takes from ``CUDAFORGE_VERDICT_FD``
and removes from its environment before any candidate code runs; the candidate's stdout and stderr are
only ever a log. Both ends import this module, so the message kinds and the bound on a line are one
definition. A line that is not JSON is ignored; a flood without newlines is dropped once it passes
:data:`MAX_MESSAGE_BYTES` (an ``EvalResult`` line is far smaller).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

VERDICT_FD_ENV = "CUDAFORGE_VERDICT_FD"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

# A spare worker (engine.eval.spare) is started with SPARE_FLAG before its job exists, imports what the
# stages need, and waits for GO_LINE on its stdin, sent once the job file is written.
SPARE_FLAG = "--spare"
GO_LINE = b"go\n"
# A gated worker (``WorkerJob.gated``: an exploration's check, engine.explore.devices) builds what its
# source names first, launching nothing on its GPU, then enters the stage GPU_WAIT and waits for a second GO_LINE,
# sent once its GPU is held: a build of many seconds then never holds a GPU others wait for.
GPU_WAIT = "gpu_wait"

# Message kinds, in the order a worker sends them.
READY = "ready"  # the interpreter and torch are up: the ``start`` stage is over
STAGE = "stage"  # a new stage began (``stage``)
BUILD_DIR = "build_dir"  # an extension build folder in use (``path``), so a killed build can be cleaned
BUILD = "build"  # the build's record (``build``), before the check runs
TRIAL = "trial"  # one correctness trial (``trial``)
RESULT = "result"  # the verdict (``result``: an EvalResult dict); nothing follows it
# The verdict so far (``result``), sent before the late stages (ablation, shapes) that may crash the
# process: a crash or hang there keeps it, with the late stage's outcome added (engine.eval.supervisor).
PROVISIONAL = "provisional"

# Each stage's start is also written into the worker's output (STAGE_MARK + name + newline), in order with
# what the worker and its compilers print: the supervisor cuts the build log at these marks, since the
# output is copied to the log by a thread of its own and a log size read when the STAGE message arrives
# can already hold a short build's words. The marks are taken out of every text shown.
STAGE_MARK = b"\x1ecudaforge-stage:"
_MARK_PATTERN = re.compile(re.escape(STAGE_MARK) + rb"([A-Za-z0-9_]{1,40})\n")


def stage_mark(stage: str) -> bytes:
    """The bytes that mark ``stage``'s start in the worker's output."""
    return STAGE_MARK + stage.encode() + b"\n"


def marked_stages(data: bytes) -> list[tuple[str, int, int]]:
    """Each stage mark in ``data``: the stage, where its mark starts, and where the stage's output starts."""
    return [(m.group(1).decode(), m.start(), m.end()) for m in _MARK_PATTERN.finditer(data)]


def without_marks(data: bytes) -> bytes:
    """``data`` with the stage marks taken out."""
    return _MARK_PATTERN.sub(b"", data)


class Channel:
    """The worker's end: JSON-lines messages to the engine."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()  # the prebuild thread sends too: a long line is written in pieces

    def send(self, kind: str, **payload: Any) -> None:
        line = json.dumps({"type": kind, "t": time.time(), **payload}, default=str) + "\n"
        data = line.encode()
        with self._lock:
            while data:
                written = os.write(self.fd, data)
                data = data[written:]


class LineReader:
    """The engine's end: bytes from the pipe in, complete messages out."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> Iterator[dict[str, Any]]:
        """The messages completed by ``chunk`` (partial lines wait for the next one)."""
        self._pending += chunk
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                yield message
        if len(self._pending) > MAX_MESSAGE_BYTES:  # no message is this long: a flood without newlines
            self._pending = b""
