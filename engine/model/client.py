"""Run a job in the model process (``engine.model.child``) and hand its progress and result back.

The parent never imports the user's model or torch for it: the command line and the workbench stay
light and survive whatever the model does. A child that dies or is killed is reported as such; an
error the child caught comes back as its one-line message (:class:`ModelError`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.model.spec import ModelError, ModelSpec

PROGRESS = "cf-progress: "
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def run_job(
    action: str, spec: ModelSpec, on_progress: Callable[[str], None] | None = None, timeout: float = 3600.0, **job: Any
) -> dict[str, Any]:
    """Do ``action`` (profile, extract, plan) for ``spec`` in a child process; its JSON result."""
    with tempfile.TemporaryDirectory(prefix="cudaforge-model-") as folder:
        job_path, result_path = Path(folder) / "job.json", Path(folder) / "result.json"
        job_path.write_text(json.dumps({"action": action, "spec": spec.to_dict(), **job}))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        process = subprocess.Popen(
            [sys.executable, "-m", "engine.model.child", str(job_path), str(result_path)],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=os.getcwd(),
        )  # fmt: skip
        tail: list[str] = []
        try:
            assert process.stderr is not None
            for line in process.stderr:
                if line.startswith(PROGRESS):
                    if on_progress:
                        on_progress(line[len(PROGRESS) :].rstrip())
                else:
                    tail = (tail + [line.rstrip()])[-20:]
            process.wait(timeout=timeout)
        except BaseException:
            process.kill()
            process.wait()
            raise
        if not result_path.is_file():
            raise ModelError(_no_result(process.returncode, tail))
        result = json.loads(result_path.read_text())
    if "error" in result:
        raise ModelError(result["error"])
    return result


def _no_result(returncode: int, tail: list[str]) -> str:
    """Why the model process left no result, in words: a kill by signal says which, and SIGKILL names the
    usual culprit (the host's out-of-memory killer), so the person is not left with a bare exit code."""
    last = next((t for t in reversed(tail) if t.strip()), "")
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        why = f"the model process was killed by {name}"
        if number == signal.SIGKILL:
            why += " (on Linux most often the out-of-memory killer: the host ran out of memory)"
    else:
        why = f"the model process ended without a result (exit {returncode})"
    return why + (f": {last}" if last else "")
