"""Run one headless session per task, a bounded number at a time, resumably.

Each task's loop runs as its own ``python -m engine.cli.run … --headless --auto-approve``
subprocess: one process per task keeps a crashing kernel, a CUDA context or a GIL-bound build
from touching its neighbours, and on CUDA lets each worker own one GPU through
``CUDA_VISIBLE_DEVICES``. Workers are slots: on CUDA one per GPU of ``--gpus``, on CPU
``--workers`` of them; a slot runs one task at a time.

Resume needs no bookkeeping of its own: a task whose session reached its rounds is skipped, one
whose session exists is continued with ``--session`` (the loop redoes only the stage that was
interrupted), and one without a session starts fresh. A killed bench therefore loses at most the
stage each running task was in.

Where tasks run: local worker slots (this module), or Ray tasks that each ask for one GPU (or one
CPU) when the command hands the bench a ``Backend`` for ``--ray`` (:mod:`engine.bench.ray_backend`).
Both run the same commands through
:func:`execute`, and the bench process alone writes statuses and prints progress
(:mod:`engine.batch.progress`); every child line is also kept in ``OUT/logs/<task>.log``.

With ``--explore K`` a task's session is two commands: its seed (``run --headless --rounds 0``,
skipped once ``main`` has iteration 0) and ``cudaforge explore SESSION --from 0 --width K --rounds R``
(skipped once the exploration is done, :func:`engine.bench.results.exploration_state`). Both resume
as they are, so an interrupted bench runs the same commands again; a seed that fails skips the
exploration (and the baseline) until the next run.

With ``--compile-baseline`` a task's commands are its session run and then, once, the
``torch.compile`` baseline worker (:mod:`engine.bench.compile_baseline`) in the same slot, so the
baseline is timed on the task's own GPU with nothing else running there.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from engine.batch.progress import LineProgress
from engine.batch.statistics import TaskRow
from engine.bench.compile_baseline import baseline_command, read_baseline
from engine.bench.results import (
    DONE,
    ERROR,
    explore_summary_file,
    read_status,
    seeded,
    session_dir,
    task_row,
    write_status,
)
from engine.bench.tasks import BenchTask
from sessions.paths import is_session_dir
from sessions.secrets import Scrubber

REPO_ROOT = Path(__file__).resolve().parents[2]
INTERRUPTED = 130


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
    compile_baseline: bool = False
    ray: str | None = None  # a Ray address, or "auto" for a local instance
    guard: str | None = None  # --guard for every task's session (engine.guard.policy)
    relax: list[str] = field(default_factory=list)
    refuse: list[str] = field(default_factory=list)
    shapes: bool = True  # every round's kernel re-checked at perturbed sizes (``run --shapes``)
    explore: int | None = None  # --explore K: after the seed, K ideas from it, a branch each for ``rounds``
    beam: int | None = None  # --beam W, passed on to the exploration


def task_command(task: BenchTask, options: BenchOptions) -> list[str]:
    """The ``cli_run`` command line for a task: a new session, or ``--session`` to continue its own."""
    cmd = [options.python, "-m", "engine.cli.run"]
    if is_session_dir(session_dir(options.out, task)):
        cmd += ["--session", task.name]
    else:
        cmd += [str(task.path), "--name", task.name]
    cmd += ["--headless", "--auto-approve", "--sessions-dir", str(options.out / "sessions")]
    cmd += ["--device", options.device]
    if options.rounds is not None:
        cmd += ["--rounds", str(options.rounds)]
    cmd += _model_and_guard_flags(options)
    cmd.append("--shapes" if options.shapes else "--no-shapes")
    return cmd


def _model_and_guard_flags(options: BenchOptions) -> list[str]:
    cmd: list[str] = []
    for flag, value in (("--coder", options.coder), ("--judge", options.judge), ("--guard", options.guard)):
        if value:
            cmd += [flag, value]
    for flag, values in (("--relax", options.relax), ("--refuse", options.refuse)):
        for value in values or []:
            cmd += [flag, value]
    return cmd


def explore_command(task: BenchTask, options: BenchOptions) -> list[str]:
    """``cudaforge explore`` of the task's seed (``--explore K``): the same line starts and resumes it.

    The scripted provider gives each branch its own replies where the Coder's folder has ``branch-k``.
    """
    assert options.explore is not None and options.rounds
    cmd = [options.python, "-m", "tui.cli", "explore", task.name, "--from", "0"]
    cmd += ["--width", str(options.explore), "--rounds", str(options.rounds)]
    if options.beam is not None:
        cmd += ["--beam", str(options.beam)]
    cmd += ["--sessions-dir", str(options.out / "sessions"), "--device", options.device]
    cmd += ["--json", str(explore_summary_file(options.out, task))]
    return cmd + _model_and_guard_flags(options)


def child_env(gpu: str | None) -> dict[str, str]:
    """The parent's environment, with this package importable and the worker's GPU, if any."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


@dataclass
class TaskPlan:
    """What is left to run for one task, decided once before it is queued."""

    commands: list[list[str]]
    resumed: bool  # its session exists and is continued
    runs_session: bool  # commands[0] is the session run
    runs_baseline: bool  # commands[-1] is the compile baseline
    session_commands: int = 1  # how many commands, from the first, run the session (seed + explore: 2)
    stop_after: tuple[int, ...] = ()  # commands whose failure skips the rest (a seed before its exploration)


def execute(
    commands: Sequence[Sequence[str]],
    cwd: Path | None,
    env: dict[str, str],
    on_line: Callable[[str], None],
    log_path: Path | None = None,
    on_command: Callable[[str], None] | None = None,
    stop_after: Collection[int] = (),
) -> list[int]:
    """Run ``commands`` one after the other, each line of output to ``on_line``; their exit codes.

    Stops after a command that was interrupted (exit 130, or a KeyboardInterrupt here, which is
    passed on to the child as SIGINT so it can finish its stage and leave the session resumable),
    and after a failed one whose index is in ``stop_after``.
    """
    codes: list[int] = []
    scrub = Scrubber().text  # a child's output never puts a key in the bench log or on the screen
    log = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("a", encoding="utf-8")
    try:
        for cmd in commands:
            if log is not None:
                log.write(f"$ {' '.join(cmd)}\n")
            if on_command is not None:
                on_command(" ".join(cmd))
            proc = subprocess.Popen(
                list(cmd),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            assert proc.stdout is not None
            try:
                for raw in proc.stdout:
                    line = scrub(raw.rstrip("\n"))
                    if log is not None:
                        log.write(line + "\n")
                        log.flush()
                    if line.strip():
                        on_line(line)
                code = proc.wait()
            except KeyboardInterrupt:
                proc.send_signal(signal.SIGINT)
                code = proc.wait()
                codes.append(code if code else INTERRUPTED)
                break
            codes.append(code)
            if code == INTERRUPTED or code < 0 or (code != 0 and len(codes) - 1 in stop_after):
                break
    finally:
        if log is not None:
            log.close()
    return codes


#: Somewhere else to run the tasks (``--ray``: ``engine.bench.ray_backend.run_on_ray``): it runs ``todo``
#: through ``bench.record`` and returns the number of tasks whose run failed. Without one, the bench runs
#: them in local worker slots.
Backend = Callable[["Bench", "list[tuple[BenchTask, TaskPlan]]"], int]


class Bench:
    """Runs the unfinished tasks of a set, reporting to a progress view."""

    def __init__(
        self,
        tasks: Sequence[BenchTask],
        options: BenchOptions,
        progress: LineProgress | TextIO,
        backend: Backend | None = None,
    ) -> None:
        self.tasks = list(tasks)
        self.options = options
        self.backend = backend
        if not isinstance(progress, LineProgress):  # a plain stream: one line per event
            progress = LineProgress(len(self.tasks), progress, options.rounds)
        self.progress = progress
        self.stopping = threading.Event()

    def row(self, task: BenchTask) -> TaskRow:
        """The task's summary row, as this bench reads it (over every branch with ``--explore``)."""
        options = self.options
        return task_row(options.out, task, options.rounds, options.explore, options.beam)

    def plan(self, task: BenchTask) -> TaskPlan:
        """What is left to run for ``task``: its session unless done, then the baseline unless measured."""
        runs_session = self.row(task).status != DONE
        runs_baseline = self.options.compile_baseline and read_baseline(self.options.out, task) is None
        commands: list[list[str]] = []
        stop_after: tuple[int, ...] = ()
        if runs_session and self.options.explore is not None:
            if not seeded(self.options.out, task):
                commands.append(task_command(task, replace(self.options, rounds=0)))
                stop_after = (0,)
            commands.append(explore_command(task, self.options))
        elif runs_session:
            commands.append(task_command(task, self.options))
        session_commands = len(commands)
        if runs_baseline:
            device = "cuda" if self.options.device == "cuda" else "cpu"
            commands.append(baseline_command(task, self.options.out, device, self.options.python))
        resumed = is_session_dir(session_dir(self.options.out, task))
        return TaskPlan(commands, resumed, runs_session, runs_baseline, session_commands, stop_after)

    def log_path(self, task: BenchTask) -> Path:
        return self.options.out / "logs" / f"{task.name}.log"

    def run(self) -> int:
        """Run every task that is not done; the number of tasks whose run exited with an error."""
        todo = []
        for task in self.tasks:
            plan = self.plan(task)
            if plan.commands:
                todo.append((task, plan))
            else:
                self.progress.skipped(task.name, "already done, skipped")
        self.options.out.mkdir(parents=True, exist_ok=True)
        if self.options.explore is not None:  # where each exploration writes its summary (explore --json)
            (self.options.out / "explore").mkdir(exist_ok=True)
        if self.backend is not None:
            return self.backend(self, todo)
        return self._run_locally(todo)

    def _run_locally(self, todo: list[tuple[BenchTask, TaskPlan]]) -> int:
        slots: queue.Queue[str | None] = queue.Queue()
        for slot in self.options.gpus or [None] * max(1, self.options.workers):
            slots.put(slot)
        failures = 0
        with ThreadPoolExecutor(max_workers=max(1, slots.qsize())) as pool:
            futures = [pool.submit(self._run_in_slot, task, plan, slots) for task, plan in todo]
            for future in futures:
                while True:
                    try:
                        failures += future.result()
                        break
                    except KeyboardInterrupt:
                        # the children got the same SIGINT and stop after their stage; start no more
                        self.stopping.set()
        return failures

    def _run_in_slot(self, task: BenchTask, plan: TaskPlan, slots: queue.Queue[str | None]) -> int:
        slot = slots.get()
        try:
            if self.stopping.is_set():
                return 0
            self.progress.started(task.name, f"GPU {slot}" if slot is not None else "", plan.resumed)
            started = time.monotonic()
            codes = execute(
                plan.commands,
                self.options.cwd,
                child_env(slot),
                lambda line: self.progress.line(task.name, line),
                self.log_path(task),
                stop_after=plan.stop_after,
            )
            return self.record(task, plan, codes, time.monotonic() - started)
        finally:
            slots.put(slot)

    def record(self, task: BenchTask, plan: TaskPlan, codes: list[int], seconds: float) -> int:
        """Store the attempt in the task's status file and report it; 1 when the session run failed."""
        # the session's code: its first command that failed, else its last (seed, then exploration)
        session_codes = codes[: plan.session_commands] if plan.runs_session else []
        session_code = next(
            (c for c in session_codes if c != 0), session_codes[-1] if session_codes else None
        )
        # the baseline ran only if no command before it was interrupted
        baseline_code = codes[-1] if plan.runs_baseline and len(codes) == len(plan.commands) else None
        previous = read_status(self.options.out, task)
        status = dict(previous)
        status["attempts"] = int(previous.get("attempts", 0)) + (1 if plan.runs_session else 0)
        status["wall_seconds"] = round(float(previous.get("wall_seconds", 0.0)) + seconds, 3)
        if session_code is not None:
            status["exit_code"] = session_code
        if baseline_code is not None:
            status["baseline_exit_code"] = baseline_code
        write_status(self.options.out, task, status)
        row = self.row(task)
        best = f"{row.best_speedup:.2f}x" if row.best_speedup is not None else "no correct kernel"
        if row.best_branch and row.best_speedup is not None:
            best += f" on {row.best_branch}"
        code_text = f"exit {session_code}" if session_code is not None else "session already done"
        extra = ""
        if baseline_code is not None:
            baseline = read_baseline(self.options.out, task)
            extra = " · compile baseline " + (
                f"{baseline['eager_ms'] / baseline['compiled_ms']:.2f}x over eager"
                if baseline
                else f"failed (exit {baseline_code}, see {self.log_path(task)})"
            )
        self.progress.finished(
            task.name, f"{row.status} · {code_text} · rounds {row.rounds} · best {best}{extra}"
        )
        failed_branch = plan.runs_session and self.options.explore is not None and row.status == ERROR
        return 1 if session_code not in (None, 0) or failed_branch else 0
