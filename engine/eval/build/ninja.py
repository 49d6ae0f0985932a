"""torch's ninja run, its output both shown and kept (ARCHITECTURE.md §3, "Builds").

torch's own ``_run_ninja_build`` either streams the compiler's output to the process's stdout (verbose:
the worker's log, live) or keeps it for its error message (quiet), never both. cudaforge needs both: the
log for the person, and the error's text to read the compiler's first error in the candidate's own lines
and to tell a split build's fault from the candidate's (engine.eval.build.failures). So this runs the same
command as torch does on Linux, echoes each line as it comes and raises torch's error with the output in
it, as a quiet run would. ``-j`` follows ``MAX_JOBS`` by torch's rule, read here rather than through torch's
private helper: a torch without that helper would otherwise fail every build, and the failure would read
as the kernel's.
"""

from __future__ import annotations

import os
import subprocess
import sys


def ninja_jobs() -> int | None:
    """ninja's ``-j`` as torch chooses it: ``MAX_JOBS`` when it is a whole number, else None (ninja's
    own default)."""
    value = os.environ.get("MAX_JOBS")
    return int(value) if value is not None and value.isdigit() else None


def run_ninja_teed(build_directory: str, error_prefix: str) -> None:
    """``ninja -v`` in ``build_directory`` (``-j`` as :func:`ninja_jobs`), echoed line by line to stdout;
    a failure raises ``RuntimeError(f"{error_prefix}: {output}")``, torch's own form."""
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
        for raw in ninja.stdout:
            line = raw.decode("utf-8", "replace")
            kept.append(line)
            sys.stdout.write(line)
            sys.stdout.flush()
        code = ninja.wait()
    if code != 0:
        raise RuntimeError(f"{error_prefix}: {''.join(kept)}")
