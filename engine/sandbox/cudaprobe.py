"""Does CUDA start under our Landlock rules on this machine? Asked before a CUDA run is confined by Landlock.

Why: on the H200 machine we measured (ARCHITECTURE.md, "Sandbox"), bwrap ran CUDA fine but under
Landlock the reference's first CUDA call failed ("OS call failed or operation not supported on this
OS"), so every evaluation would have ended as a task error that blames the user's task. Landlock is
the fallback where bwrap cannot start, so ``auto`` must not hand a CUDA run to it blindly.

The probe runs the driver's own start-up (``cuInit`` and a device count, through ctypes: no torch
import, well under a second) twice in fresh processes: unconfined, then under the rules the worker
would get. Only a failure that the confinement causes counts against Landlock; a machine whose CUDA
does not start at all is not the sandbox's business (the evaluation says so itself). The answer is
kept for the life of the process, keyed on what the rules let CUDA read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping

from engine.sandbox import landlock

# Prints "<cuInit rc> <cuDeviceGetCount rc> <count>", or "nolib" without a CUDA driver library.
PROBE_CODE = """
import ctypes, sys
from engine.sandbox.landlock import apply_from_env
apply_from_env()
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError:
    print("nolib"); sys.exit(0)
count = ctypes.c_int(0)
init = lib.cuInit(0)
got = lib.cuDeviceGetCount(ctypes.byref(count)) if init == 0 else -1
print(init, got, count.value)
"""
PROBE_TIMEOUT_S = 60.0
_answers: dict[str, str | None] = {}


def _run(env: Mapping[str, str]) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE_CODE],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            cwd="/",  # not the user's folder: nothing there is imported or run
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:200]}"
    return lines[-1]


def _started(answer: str) -> bool:
    parts = answer.split()
    return len(parts) == 3 and parts[0] == "0" and parts[1] == "0" and int(parts[2]) > 0


def landlock_blocks_cuda(env: Mapping[str, str]) -> str | None:
    """Why CUDA cannot start under the Landlock rules in ``env`` (``$CUDAFORGE_LANDLOCK``); None when it can.

    ``env`` is the worker's environment as ``engine.sandbox.prepare`` built it.
    """
    rules = env.get(landlock.LANDLOCK_ENV, "")
    try:  # what CUDA may read decides; the writable folders are each evaluation's own (and /dev)
        key = json.dumps(sorted(json.loads(rules)["read"]))
    except (ValueError, KeyError, TypeError):
        key = rules
    if key in _answers:
        return _answers[key]
    free = {k: v for k, v in env.items() if k != landlock.LANDLOCK_ENV}
    unconfined = _run(free)
    if not _started(unconfined):
        _answers[key] = None  # CUDA does not start here at all: the evaluation reports that itself
        return None
    confined = _run(env)
    why = None if _started(confined) else _describe(confined)
    _answers[key] = why
    return why


def _describe(answer: str) -> str:
    parts = answer.split()
    if len(parts) == 3 and parts[0] != "0":
        return f"cuInit returned CUDA error {parts[0]} under Landlock (0 without it)"
    if len(parts) == 3:
        return f"cuDeviceGetCount returned {parts[1]} with {parts[2]} devices under Landlock"
    return f"the CUDA probe failed under Landlock: {answer}"


def forget() -> None:
    """Drop the kept answers (tests; a machine whose drivers changed)."""
    _answers.clear()
