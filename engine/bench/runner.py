"""Run one headless session per task, a bounded number at a time, resumably.

Each task's loop runs as its own ``python -m engine.cli_run … --headless --auto-approve``
subprocess: one process per task keeps a crashing kernel, a CUDA context or a GIL-bound build
from touching its neighbours, and on CUDA lets each worker own one GPU through
``CUDA_VISIBLE_DEVICES``. Workers are slots: on CUDA one per GPU of ``--gpus``, on CPU
``--workers`` of them; a slot runs one task at a time.

Resume needs no bookkeeping of its own: a task whose session reached its rounds is skipped, one
whose session exists is continued with ``--session`` (the loop redoes only the stage that was
interrupted), and one without a session starts fresh. A killed bench therefore loses at most the
stage each running task was in.

Progress goes to one stream, a line per event: ``[task] <stage line of the loop>``, and
``[k/N done] task: …`` when a task ends.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from engine.bench.results import DONE, read_status, session_dir, task_row, write_status
from engine.bench.tasks import BenchTask
from sessions.paths import is_session_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
_BEST = re.compile(r"→ correct · ([0-9.]+)x")
_STAGE_LINE = re.compile(r"^iter \d+ ·")


@dataclass
class BenchOptions:
    """How to run the set; ``gpus`` set means one worker per listed GPU (``CUDA_VISIBLE_DEVICES``)."""

    out: Path
    rounds: int | None = None
    coder: str | None = None
    judge: str | None = None
    device: str = "auto"
    workers: int = 1
    gpus: list[str] | None = None
    cwd: Path = field(default_factory=Path.cwd)
    python: str = sys.executable


def task_command(task: BenchTask, options: BenchOptions) -> list[str]:
    """The ``cli_run`` command line for a task: a new session, or ``--session`` to continue its own."""
    cmd = [options.python, "-m", "engine.cli_run"]
    if is_session_dir(session_dir(options.out, task)):
        cmd += ["--session", task.name]
    else:
        cmd += [str(task.path), "--name", task.name]
    cmd += ["--headless", "--auto-approve", "--sessions-dir", str(options.out / "sessions")]
    cmd += ["--device", options.device]
    if options.rounds is not None:
        cmd += ["--rounds", str(options.rounds)]
    for flag, value in (("--coder", options.coder), ("--judge", options.judge)):
        if value:
            cmd += [flag, value]
    return cmd


def child_env(gpu: str | None) -> dict[str, str]:
    """The parent's environment, with this package importable and the worker's GPU, if any."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


class Bench:
    """Runs the unfinished tasks of a set and reports progress to ``out``."""

    def __init__(self, tasks: Sequence[BenchTask], options: BenchOptions, out: TextIO) -> None:
        self.tasks = list(tasks)
        self.options = options
        self.stream = out
        self.lock = threading.Lock()
        self.finished = 0
        self.stopping = threading.Event()

    def say(self, line: str) -> None:
        with self.lock:
            print(line, file=self.stream, flush=True)

    def run(self) -> int:
        """Run every task that is not done; the number of tasks whose run exited with an error."""
        todo = []
        for task in self.tasks:
            if task_row(self.options.out, task, self.options.rounds).status == DONE:
                self.finished += 1
                self.say(f"[{self.finished}/{len(self.tasks)} done] {task.name}: already done, skipped")
            else:
                todo.append(task)
        slots: queue.Queue[str | None] = queue.Queue()
        for slot in self.options.gpus or [None] * max(1, self.options.workers):
            slots.put(slot)
        failures = 0
        with ThreadPoolExecutor(max_workers=max(1, slots.qsize())) as pool:
            futures = [pool.submit(self._run_in_slot, task, slots) for task in todo]
            for future in futures:
                while True:
                    try:
                        failures += future.result()
                        break
                    except KeyboardInterrupt:
                        # the children got the same SIGINT and stop after their stage; start no more
                        self.stopping.set()
        return failures

    def _run_in_slot(self, task: BenchTask, slots: queue.Queue[str | None]) -> int:
        slot = slots.get()
        try:
            if self.stopping.is_set():
                return 0
            return self._run_task(task, slot)
        finally:
            slots.put(slot)

    def _run_task(self, task: BenchTask, gpu: str | None) -> int:
        cmd = task_command(task, self.options)
        resumed = "--session" in cmd
        where = f" on GPU {gpu}" if gpu is not None else ""
        self.say(f"[{task.name}] {'continuing' if resumed else 'starting'}{where}")
        self.options.out.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        best: float | None = None
        proc = subprocess.Popen(
            cmd,
            cwd=self.options.cwd,
            env=child_env(gpu),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            match = _BEST.search(line)
            if match:
                speedup = float(match.group(1))
                best = speedup if best is None else max(best, speedup)
            if line.strip():
                suffix = f"  (best {best:.2f}x)" if best is not None and _STAGE_LINE.match(line) else ""
                self.say(f"[{task.name}] {line}{suffix}")
        code = proc.wait()
        previous = read_status(self.options.out, task)
        write_status(
            self.options.out,
            task,
            {
                "exit_code": code,
                "attempts": int(previous.get("attempts", 0)) + 1,
                "wall_seconds": round(
                    float(previous.get("wall_seconds", 0.0)) + time.monotonic() - started, 3
                ),
            },
        )
        row = task_row(self.options.out, task, self.options.rounds)
        with self.lock:
            self.finished += 1
            done = f"[{self.finished}/{len(self.tasks)} done]"
        best_text = f"{row.best_speedup:.2f}x" if row.best_speedup is not None else "no correct kernel"
        self.say(f"{done} {task.name}: {row.status} · exit {code} · rounds {row.rounds} · best {best_text}")
        return 0 if code == 0 else 1
