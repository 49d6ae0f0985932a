"""Named stage boundaries at which a test can hold a real loop, so a real signal lands exactly there.

The fault-injection tests (``tests/test_interrupt_*.py``) interrupt a real ``cudaforge`` process
(SIGINT, SIGHUP, SIGKILL, ``q``) at every stage boundary. Sleeping and hoping the process has
reached a stage would make them flaky, and mocking the loop would test nothing, so the loop calls
:func:`hold` at each boundary; it does nothing unless the environment names that boundary:

* ``CUDAFORGE_TEST_HOLD=build@0,judge@1`` — boundaries ``STAGE@ITERATION`` to hold at, each once;
* ``CUDAFORGE_TEST_HOLD_FILE=PATH`` — at a named boundary the process writes ``STAGE@ITERATION PID``
  there and waits while the file exists (the test deletes it to let the process go on), until the
  loop is asked to stop (for boundaries a stop may cut short: an LLM call, the gate, the commit),
  or for at most :data:`MAX_HOLD_S` seconds; the file is removed when the hold ends.

Boundaries: ``reference`` (the task check), ``seed``, ``judge``, ``gate``, ``coder``, ``evaluate``,
``build``, ``check``, ``time`` (as the worker reports them), ``profile`` and ``commit`` (the
journal is saved, the commit not yet made). Nothing here changes what the loop does: a held
stage goes on exactly as it would have.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

HOLD_ENV = "CUDAFORGE_TEST_HOLD"
HOLD_FILE_ENV = "CUDAFORGE_TEST_HOLD_FILE"
MAX_HOLD_S = 120.0
_POLL_S = 0.02

_lock = threading.Lock()
_used: set[tuple[str, str]] = set()  # (hold file, boundary): each boundary holds once per file


def _wanted() -> set[str]:
    return {part.strip() for part in os.environ.get(HOLD_ENV, "").split(",") if part.strip()}


def hold(boundary: str, iteration: int, release: threading.Event | None = None) -> None:
    """Wait here if a test asked to (see the module docstring); return at once otherwise."""
    if HOLD_ENV not in os.environ:
        return
    name = f"{boundary}@{iteration}"
    path_text = os.environ.get(HOLD_FILE_ENV)
    with _lock:
        if name not in _wanted() or not path_text or (path_text, name) in _used:
            return
        _used.add((path_text, name))
    path = Path(path_text)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(f"{name} {os.getpid()}\n", encoding="utf-8")
    os.replace(temp, path)
    deadline = time.monotonic() + MAX_HOLD_S
    try:
        while path.exists() and time.monotonic() < deadline:
            if release is not None and release.is_set():
                break
            time.sleep(_POLL_S)
    finally:  # the file exists only while a process is held
        path.unlink(missing_ok=True)
