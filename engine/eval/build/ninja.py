"""torch's ninja run, its output both shown and kept, stopped at its first failed unit (ARCHITECTURE.md §3,
"Builds").

torch's own ``_run_ninja_build`` either streams the compiler's output to the process's stdout (verbose:
the worker's log, live) or keeps it for its error message (quiet), never both. cudaforge needs both: the
log for the person, and the error's text to read the compiler's first error in the candidate's own lines
and to tell a split build's fault from the candidate's (engine.eval.build.failures). So this runs the same
command as torch does on Linux, echoes each line as it comes and raises torch's error with the output in
it, as a quiet run would. ``-j`` follows ``MAX_JOBS`` by torch's rule, read here rather than through torch's
private helper: a torch without that helper would otherwise fail every build, and the failure would read
as the kernel's.

Why it stops at the first failure: ninja lets the units already running finish before it exits. On the
H200 a split build whose CUDA unit failed in nvcc after two seconds still waited for its C++ unit, which
parses torch's headers (about twenty seconds without the precompiled header): a candidate's own typo took
28 s to reach its verdict. The build has failed either way, so once ninja has printed a failed unit and its
output, ninja is interrupted; it stops the compilers it runs (each in its own process group) and removes
their half-written outputs, so no partial object reaches the object cache.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading

from engine.procgroups import kill_tree

# ninja prints a failed unit's whole output at once after its ``FAILED:`` line; a pause this long after it
# means the output is all there (a bound on reading, not a claim about the compilers' speed)
AFTER_FAILURE_QUIET_S = 0.5
STOP_WAIT_S = 10.0  # how long ninja may take to stop its compilers before it is killed
FAILED_PREFIX = "FAILED: "
_STATUS = re.compile(r"^\[\d+/\d+\] ")  # ninja's "[k/n] command" line, printed as a unit ends
STOPPED_NOTE = "[cudaforge] stopped the build's other units after the first failure: the verdict does not wait for them\n"


def ninja_jobs() -> int | None:
    """ninja's ``-j`` as torch chooses it: ``MAX_JOBS`` when it is a whole number, else None (ninja's
    own default)."""
    value = os.environ.get("MAX_JOBS")
    return int(value) if value is not None and value.isdigit() else None


def run_ninja_teed(build_directory: str, error_prefix: str) -> None:
    """``ninja -v`` in ``build_directory`` (``-j`` as :func:`ninja_jobs`), echoed line by line to stdout;
    a failure raises ``RuntimeError(f"{error_prefix}: {output}")``, torch's own form, as soon as the first
    failed unit's output has been read (the units still compiling are stopped)."""
    command = ["ninja", "-v"]
    workers = ninja_jobs()
    if workers is not None:
        command += ["-j", str(workers)]
    sys.stdout.flush()
    sys.stderr.flush()
    kept: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=build_directory, env=os.environ.copy()
    ) as ninja:
        assert ninja.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(ninja.stdout, lines), daemon=True)
        reader.start()
        failed = stopped = False
        while True:
            try:
                line = lines.get(timeout=AFTER_FAILURE_QUIET_S) if failed and not stopped else lines.get()
            except queue.Empty:  # the failed unit's output is in: stop the rest
                stopped = True
                _stop(ninja)
                kept.append(STOPPED_NOTE)
                sys.stdout.write(STOPPED_NOTE)
                continue
            if line is None:
                break
            # ninja's own line, right after the failed unit's status line (not a compiler's output)
            failed = failed or (line.startswith(FAILED_PREFIX) and bool(kept) and _STATUS.match(kept[-1]) is not None)
            kept.append(line)
            sys.stdout.write(line)
            sys.stdout.flush()
        code = ninja.wait()
        reader.join()
    if code != 0:
        raise RuntimeError(f"{error_prefix}: {''.join(kept)}")


def _read_lines(stream: object, lines: queue.Queue[str | None]) -> None:
    try:
        for raw in stream:  # type: ignore[attr-defined]
            lines.put(raw.decode("utf-8", "replace"))
    finally:
        lines.put(None)


def _stop(ninja: subprocess.Popen) -> None:
    """Interrupt ninja as Ctrl-C would: it signals each running compiler's process group and deletes
    their outputs. A ninja that does not stop in time is killed outright."""
    with contextlib.suppress(ProcessLookupError):
        ninja.send_signal(signal.SIGINT)
    try:
        ninja.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        kill_tree(ninja.pid)  # its compilers and their process groups (ninja gives each unit one)
        ninja.kill()
        ninja.wait()
