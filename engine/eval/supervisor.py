"""The worker supervisor: one worker process from spawn to verdict, with per-stage deadlines.

The engine never runs candidate code itself (ARCHITECTURE.md §3): the supervisor starts
``python -m engine.eval.worker`` in a new process group inside the sandbox, hands it a job file, and
listens on a private pipe (``engine.eval.pipe``) for its stage changes and verdict. Each stage has its
own timeout; when one runs over, the whole process group is killed (ninja and nvcc included) and the
result says which stage it was. A worker that dies without a verdict (a segfault, an abort,
``os._exit``) is a ``runtime_error`` built from what it reported before dying: the verdict decides,
never the exit code. A worker that never reaches the task is cudaforge's own fault.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import procgroups, sandbox
from engine.eval import faults, forkserver, jobdirs, pipe
from engine.eval.build.extension import remove_stale_torch_lock
from engine.eval.build.split.lines import absolute_lines
from engine.eval.build.trust import seal
from engine.eval.job import WorkerJob
from engine.eval.options import EvalEvent, EvalOptions, EvaluationError
from engine.eval.result import (
    CANDIDATE_SIDE,
    HARNESS_ERROR,
    HARNESS_SIDE,
    LATE_STAGES,
    REJECTED,
    RUNTIME_ERROR,
    TIMEOUT,
    BuildInfo,
    EvalResult,
    ExtensionBuild,
    TrialResult,
)
from engine.guard.policy import GuardSettings
from engine.guard.runtime import refuses, runtime_finding
from engine.sandbox.logcap import CappedLog

DRAIN_AFTER_EXIT_S = 1.0  # how long the pipe is still read once the worker has exited
DRAIN_AFTER_EXIT_BYTES = 8 * 1024 * 1024
KERNEL_FILE = "kernel.py"  # the candidate's file name in the job folder unless the caller names it
LOG_LIMIT_BYTES = 400_000
STDERR_TAIL_LINES = 40
FORKED_STATUS_WAIT_S = 30.0  # for a killed forked worker's status from its server (engine.eval.forkserver)
MAX_HOST_PIECES = 10_000  # entries of a split build's piece lines taken from one worker message


class WorkerSupervisor:
    """One worker process from spawn to verdict, with per-stage deadlines."""

    def __init__(
        self,
        job_dir: Path,
        options: EvalOptions,
        cache_root: Path,
        on_event: Callable[[EvalEvent], None] | None,
        kernel_names: list[str] | None = None,
        reference_only: bool = False,
        spare: StartedWorker | None = None,
        gate: Callable[[], None] | None = None,
    ) -> None:
        """The device and the guard settings are the options' own (resolved and validated by the
        front end, engine.eval.options): taken from there, never passed beside them to disagree."""
        self.job_dir = job_dir
        self.reference_only = reference_only  # the task check: the worker stops after the reference
        self.guard: GuardSettings = options.guard  # the worker enforces its runtime rules
        self.kernel_names = list(kernel_names or [])  # the source's __global__ names, for the launch check
        self.device = options.device
        self.options = options
        self.cache_root = cache_root
        self.on_event = on_event
        self.log_path = job_dir / "worker.log"
        self.stage = "start"
        self.stage_started = time.monotonic()
        self._whole_deadline = float("inf")  # EvalOptions.max_seconds from the worker's start, when set
        self.whole_limit_hit = False  # the whole evaluation's cap, not a stage's limit, ended it
        self.stage_marks: dict[str, int] = {}  # log offset at which each stage began
        self.durations: dict[str, float] = {}
        self.build_dirs: list[str] = []
        self.host_lines: dict[str, int] = {}  # a split build's C++ unit pieces: where each starts in cuda_sources
        self.trials: list[TrialResult] = []
        self.build: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None
        self.provisional: dict[str, Any] | None = None  # the verdict so far, before the late stages
        self._log_offset = 0
        self._reader = pipe.LineReader()
        self.sandbox_used = ""
        self.sandbox_warnings: list[str] = []
        self.spare = spare  # a worker started before this evaluation, waiting in job_dir (engine.eval.spare)
        # called when the worker has built and waits for its GPU (pipe.GPU_WAIT): returns once the GPU
        # is the caller's to use, and the worker is told to go on
        self.gate = gate
        self._worker: StartedWorker | None = None

    def _emit(self, event: EvalEvent) -> None:
        if self.on_event:
            self.on_event(event)

    def write_job(
        self, task_source: str, kernel_source: str, task_name: str, kernel_name: str = KERNEL_FILE
    ) -> Path:
        (self.job_dir / "task.py").write_text(task_source)
        kernel_path = self.job_dir / KERNEL_FILE
        if Path(kernel_name).name not in (KERNEL_FILE, ""):  # the user's name, in a folder of its own
            kernel_path = self.job_dir / "candidate" / Path(kernel_name).name
            kernel_path.parent.mkdir()
        kernel_path.write_text(kernel_source)
        job = WorkerJob(
            task_path=str(self.job_dir / "task.py"),
            kernel_path=str(kernel_path),
            cache_root=str(self.cache_root),
            device=self.device,
            seed=self.options.seed,
            trials=self.options.trials,
            task_name=task_name,
            tolerances=dict(self.options.tolerances),
            timing=self.options.timing if self.options.do_timing else None,
            use_pch=self.options.use_pch,
            make_pch=self.options.make_pch,
            guards=self.options.guards,
            relax_runtime=tuple(self.guard.runtime_relax),
            refuse_runtime=tuple(self.guard.runtime_refuse),
            kernel_names=tuple(self.kernel_names),
            cpu_threads=self.options.cpu_threads or 0,
            reference_only=self.reference_only,
            prebuild=self.options.prebuild,
            build_budget_s=self.options.build_budget_s,
            trusted_libraries=dict(self.options.trusted_libraries),
            check_shapes=self.options.shapes and not self.reference_only,
            gated=self.gate is not None,
        )
        path = job.write(self.job_dir / "job.json")
        return path

    def execute(
        self, task_source: str, kernel_source: str, task_name: str, kernel_name: str = KERNEL_FILE
    ) -> EvalResult:
        job_path = self.write_job(task_source, kernel_source, task_name, kernel_name)
        spare, self.spare = self.spare, None
        gated = self.gate is not None
        started = time.monotonic()  # the start stage counts the fork server's own start, when it starts now
        worker = spare or start_worker(self.job_dir, self.options, self.cache_root, job_path, gated=gated)
        self._worker = worker
        process, read_fd, output = worker.process, worker.read_fd, worker.output
        self.sandbox_used, self.sandbox_warnings = worker.mechanism, worker.warnings
        self._whole_deadline = started + self.options.max_seconds if self.options.max_seconds else float("inf")
        self._set_stage("start")
        self.stage_started = started
        if spare is not None:
            spare.go(keep_open=gated)  # the job is written: the waiting worker reads it and goes on
        timed_out = False
        try:
            timed_out = self._listen(process, read_fd)
        finally:
            os.close(read_fd)
            worker.close_go()  # a gated worker that never reached its gate: its stdin's write end too
            if not timed_out:  # bwrap reports its child's death a moment after the pipe closes
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=2.0)
            _kill_group(process)  # also what the worker left behind in its group (ninja, a stray child)
            wait_for_status(process)
        output.join(timeout=2.0)
        self._drain_log()
        if self.final is None:  # the stage it died or was killed in still gets its time
            self.durations[self.stage] = (
                self.durations.get(self.stage, 0.0) + time.monotonic() - self.stage_started
            )
        self.durations["total"] = time.monotonic() - started
        returncode = process.returncode
        if worker.mechanism == "bwrap" and not worker.forked and returncode is not None and returncode > 128:
            returncode = 128 - returncode  # bwrap exits 128+N when its child died of signal N
        result = self._assemble(returncode, timed_out)
        if isinstance(process, forkserver.ForkedProcess) and process.server_lost and self.final is None:
            self._blame_lost_server(result)
        result.settings["worker"] = "spare" if spare is not None else "cold"  # started ahead (engine.eval.spare) or now
        result.settings["worker_start"] = "fork" if worker.forked else "exec"  # engine.eval.forkserver
        if isinstance(process, forkserver.ForkedProcess):  # its server: own, kept-started or kept-found
            result.settings["fork_server"] = process.server
        if (result.error or {}).get("type") == "JobError":  # the harness's own fault: blame no side
            raise EvaluationError(f"cudaforge's worker refused its job: {result.error.get('message')}")
        return result

    def _set_stage(self, stage: str) -> None:
        now = time.monotonic()
        key = "process_start" if self.stage == "start" else self.stage
        if stage != "start":
            self.durations[key] = self.durations.get(key, 0.0) + now - self.stage_started
        self.stage = stage
        self.stage_started = now
        if stage == "build":  # a gated worker builds twice (ahead, then its import): the log is the import's
            self.stage_marks[stage] = self._log_size()
        self.stage_marks.setdefault(stage, self._log_size())
        self._emit(EvalEvent(kind="stage", stage=stage))

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _stage_limit(self) -> float:
        if self.stage == pipe.GPU_WAIT:  # the worker waits for the caller's GPU: no limit of its own
            return float("inf")
        return float(getattr(self.options.timeouts, self.stage, self.options.timeouts.check))

    def _open_gate(self) -> None:
        """The gated worker has built and waits: once the caller holds its GPU (``gate`` returns), it
        is told to go on, and the setup stage's clock starts (its CUDA start, then the task)."""
        assert self.gate is not None and self._worker is not None
        gate, self.gate = self.gate, None  # once
        gate()
        self._worker.go()
        self._set_stage("setup")

    def _listen(self, process: subprocess.Popen | forkserver.ForkedProcess, read_fd: int) -> bool:
        """Read messages until the worker is gone; True when a stage timed out."""
        while True:
            now = time.monotonic()
            remaining = self.stage_started + self._stage_limit() - now
            whole = self._whole_deadline - now
            if min(remaining, whole) <= 0 and self.final is None:
                self.whole_limit_hit = whole <= 0 and remaining > 0
                _kill_group(process)
                return True
            remaining = min(remaining, whole)
            ready, _, _ = select.select([read_fd], [], [], max(0.0, min(0.2, remaining)))
            self._drain_log()  # may take long: a front end's callback runs here
            if ready and not self._read_messages(read_fd):
                return False  # every holder of the pipe's write end is gone
            if self.stage == pipe.GPU_WAIT and self.gate is not None and process.poll() is None:
                self._open_gate()
            if process.poll() is not None:
                # Exited. What it sent while the log callback ran (``ready`` is from before) is still in
                # the pipe: read it, but only briefly and boundedly, since a leftover child of the
                # candidate may hold the pipe open and write to it forever.
                deadline, budget = time.monotonic() + DRAIN_AFTER_EXIT_S, DRAIN_AFTER_EXIT_BYTES
                while budget > 0 and time.monotonic() < deadline:
                    if not select.select([read_fd], [], [], 0)[0]:
                        break
                    read = self._read_messages(read_fd)
                    if not read:
                        break
                    budget -= read
                return False

    def _read_messages(self, read_fd: int) -> int:
        """Handle the complete messages in one read of the pipe; the bytes read, 0 at its end."""
        chunk = os.read(read_fd, 65536)
        for message in self._reader.feed(chunk):
            self._handle(message)
        return len(chunk)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == pipe.READY and self.stage == "start":
            self.durations["process_start"] = time.monotonic() - self.stage_started
            self.stage_started = time.monotonic()
            self.stage = "setup"
        elif kind == pipe.STAGE:
            self._set_stage(str(message.get("stage")))
        elif kind == pipe.BUILD_DIR:
            self.build_dirs.append(str(message.get("path")))
            self._learn_lines(message.get("host_lines"))
        elif kind == pipe.BUILD:
            self.build = message.get("build")
        elif kind == pipe.TRIAL:
            trial = TrialResult(**message["trial"])
            self.trials.append(trial)
            self._emit(EvalEvent(kind="trial", stage=self.stage, data=message["trial"]))
        elif kind == pipe.PROVISIONAL:
            self.provisional = message.get("result")
        elif kind == pipe.RESULT:
            self.final = message.get("result")

    def _learn_lines(self, lines: object) -> None:
        """Where each piece of a split build's C++ unit starts in cuda_sources (what the worker sent;
        only well-formed entries are kept, a bounded number)."""
        if not isinstance(lines, dict):
            return
        for name, line in list(lines.items())[:MAX_HOST_PIECES]:
            if isinstance(name, str) and isinstance(line, int) and not isinstance(line, bool) and line > 0:
                self.host_lines.setdefault(name, line)

    def _candidate_lines(self, text: str) -> str:
        """``text`` with a split build's piece-relative lines written as the candidate's own."""
        return absolute_lines(text, self.host_lines)

    def _drain_log(self) -> None:
        """Forward new log lines to the front end (the build log streams as it happens)."""
        if not self.on_event:
            return
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                data = log.read()
        except FileNotFoundError:
            return
        cut = data.rfind(b"\n") + 1
        if cut:
            self._log_offset += cut
            for text in pipe.without_marks(data[:cut]).decode(errors="replace").splitlines():
                self._emit(EvalEvent(kind="log", stage=self.stage, text=self._candidate_lines(text)))

    def _build_span(self) -> tuple[int, int | None] | None:
        """Where the build's output lies in the log: from the last build stage's mark (a gated worker builds
        twice: the log is the import's) to the first check mark after it, the worker's own marks written in
        order with its output (engine.eval.pipe). Where the log holds no build mark (its head cap dropped
        it), the log's sizes when the stage messages arrived, which a short build can outrun."""
        try:
            marks = pipe.marked_stages(self.log_path.read_bytes())
        except FileNotFoundError:
            marks = []
        builds = [end for stage, _, end in marks if stage == "build"]
        if builds:
            check = next((start for stage, start, _ in marks if stage == "check" and start >= builds[-1]), None)
            return builds[-1], check
        if self.stage_marks.get("build") is not None:
            return self.stage_marks["build"], self.stage_marks.get("check")
        return None

    def _log_text(self, start: int = 0, end: int | None = None) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(start)
                data = log.read() if end is None else log.read(max(0, end - start))
        except FileNotFoundError:
            return ""
        data = pipe.without_marks(data)
        if len(data) > LOG_LIMIT_BYTES:
            half = LOG_LIMIT_BYTES // 2
            data = data[:half] + b"\n[... log truncated ...]\n" + data[-half:]
        return data.decode(errors="replace")

    def _assemble(self, returncode: int | None, timed_out: bool) -> EvalResult:
        if self.final is not None:
            result = EvalResult.from_dict(self.final)
        elif self.provisional is not None and self.stage in LATE_STAGES:
            result = EvalResult.from_dict(self.provisional)
            late_stage_death(result, self.stage, self._death_words(returncode, timed_out), self.guard, self.options.guards)
        else:
            result = EvalResult(status=RUNTIME_ERROR, stage=self.stage, device=self.device)
            result.trials = list(self.trials)
            if self.build:
                result.build = EvalResult.from_dict({"status": "", "build": self.build}).build
            self._explain_death(result, returncode, timed_out)
        build_span = self._build_span()
        if build_span is not None:
            result.build.log = self._log_text(*build_span)
        if not result.build.extensions and self.build_dirs and self.final is None:
            result.build = BuildInfo(
                log=result.build.log,
                extensions=[
                    ExtensionBuild(
                        name=Path(d).name, build_dir=d, cached=False, seconds=0.0, path="unknown", ok=False
                    )
                    for d in self.build_dirs
                ],
            )
        seal(result.build.extensions)  # the digests are read here, never taken from the worker
        lines = self._log_text().splitlines()
        result.stderr_tail = "\n".join(lines[-STDERR_TAIL_LINES:])
        self._show_candidate_lines(result)
        result.exit_code = returncode
        result.sandbox = self.sandbox_used
        # The sandbox was chosen before anything ran: its warnings come first, so the last message stays
        # the outcome (the loop reports ``messages[-1]`` as a task's problem).
        result.messages[:0] = [w for w in self.sandbox_warnings if w not in result.messages]
        result.durations = {
            **self.durations,
            **{k: v for k, v in result.durations.items() if k not in self.durations},
        }
        return result

    def _show_candidate_lines(self, result: EvalResult) -> None:
        """Every text of the result that may quote a split build's C++ unit (compiler messages, c10's
        "Exception raised from f at FILE:LINE") names the candidate's own cuda_sources lines."""
        for build in result.build.extensions:
            self._learn_lines(build.host_lines)
        if not self.host_lines:
            return
        fix = self._candidate_lines
        result.build.log, result.stderr_tail = fix(result.build.log), fix(result.stderr_tail)
        result.messages = [fix(m) for m in result.messages]
        if result.error:
            result.error = {k: fix(v) if isinstance(v, str) else v for k, v in result.error.items()}

    def _death_words(self, returncode: int | None, timed_out: bool) -> str:
        if timed_out:
            return f"ran over the {self._stage_limit():g} s limit"
        if returncode is not None and returncode < 0:
            return f"was killed by {_signal_name(-returncode)}"
        return f"exited (code {returncode}) without a verdict"

    def _explain_death(self, result: EvalResult, returncode: int | None, timed_out: bool) -> None:
        stage = self.stage
        result.stage = stage
        if stage in ("start", "setup", pipe.GPU_WAIT):  # no task or candidate code has run yet: cudaforge's own start-up
            self._explain_startup_failure(result, returncode, timed_out)
            return
        if timed_out:
            limit = self._stage_limit()
            result.status = TIMEOUT
            if self.whole_limit_hit:
                result.messages.append(
                    f"the evaluation reached its limit of {self.options.max_seconds:g} s for the whole pair "
                    f"(--max-pair-seconds) during the {stage} stage; the worker's process group was killed"
                )
            else:
                result.messages.append(
                    f"the {stage} stage ran over its {limit:g} s limit; the worker's process group was killed"
                )
            if stage == "build":
                removed = [d for d in self.build_dirs if remove_stale_torch_lock(Path(d))]
                if removed:
                    result.messages.append("removed the build lock the killed build left behind")
            return
        if returncode is not None and returncode < 0:
            name = _signal_name(-returncode)
            result.signal = name
            result.status = RUNTIME_ERROR
            result.messages.append(
                f"the worker was killed by {name} during the {stage} stage (a native crash in the candidate)"
            )
            return
        result.status = RUNTIME_ERROR
        result.messages.append(
            f"the worker exited (code {returncode}) during the {stage} stage without a verdict "
            "(the candidate may have called exit() or crashed the interpreter)"
        )

    def _blame_lost_server(self, result: EvalResult) -> None:
        """The fork server ended (or stopped answering) before this worker's verdict: its workers die
        with it, so the death is cudaforge's, never the kernel's."""
        message = f"the fork server that started this worker ended during the {self.stage} stage (engine.eval.forkserver)"
        result.status = HARNESS_ERROR
        result.failed_side = HARNESS_SIDE
        result.harness_fault = faults.record(faults.ENVIRONMENT, message, stage=self.stage)
        result.messages.append(f"cudaforge's own fault ({faults.ENVIRONMENT}), not the kernel's: {message}")

    def _explain_startup_failure(self, result: EvalResult, returncode: int | None, timed_out: bool) -> None:
        """The worker (or its sandbox) never got to the task: a harness fault, with its last words."""
        tail = [line for line in self._log_text().splitlines() if line.strip()]
        last = tail[-1].strip()[:500] if tail else "no output"
        if timed_out:
            message = f"the worker did not get through its {self.stage} stage within {self._stage_limit():g} s"
        else:
            how = f"by {_signal_name(-returncode)}" if returncode is not None and returncode < 0 else f"with code {returncode}"
            message = f"the worker ended {how} during its {self.stage} stage, before the reference or the kernel ran"
        kind = faults.IMPORT if ("ModuleNotFoundError" in last or "ImportError" in last) else faults.ENVIRONMENT
        result.status = HARNESS_ERROR
        result.failed_side = HARNESS_SIDE
        result.harness_fault = faults.record(kind, f"{message}: {last}", stage=self.stage)
        result.messages.append(f"cudaforge's own fault ({kind}), not the kernel's: {message}: {last}")


@dataclass
class StartedWorker:
    """A worker process under its sandbox: the verdict pipe's read end, its output being logged, and,
    for a spare (engine.eval.spare), the pipe on which it waits for the word to go. ``forked``: a fork
    of the fork server (engine.eval.forkserver), whose exit code is its own, never bwrap's."""

    process: subprocess.Popen | forkserver.ForkedProcess
    read_fd: int
    output: CappedLog
    mechanism: str
    warnings: list[str]
    go_fd: int | None = None

    @property
    def forked(self) -> bool:
        return isinstance(self.process, forkserver.ForkedProcess)

    def go(self, keep_open: bool = False) -> None:
        """The word to go on; ``keep_open`` for a gated job, whose worker waits for a second one."""
        if self.go_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.go_fd, pipe.GO_LINE)
            if not keep_open:
                self.close_go()

    def close_go(self) -> None:
        if self.go_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.go_fd)
            self.go_fd = None


def start_worker(
    job_dir: Path, options: EvalOptions, cache_root: Path, job_path: Path, spare: bool = False, gated: bool = False
) -> StartedWorker:
    """Start the worker for ``job_path`` in the sandbox, in its own process group, on ``options.device``
    (its GPU: ``options.gpu_index``): forked by the fork server where these options' workers are
    (engine.eval.forkserver), else ``python -m engine.eval.worker``. A ``spare`` imports what the stages
    need and waits on its stdin until the job is written; a ``gated`` job's worker waits there for its
    GPU (pipe.GPU_WAIT)."""
    extra = {"PYTHONUNBUFFERED": "1"}
    if options.gpu_index is not None:
        extra["CUDA_VISIBLE_DEVICES"] = str(options.gpu_index)
    args = [*([pipe.SPARE_FLAG] if spare else []), str(job_path)]
    in_root = job_dir.parent == jobdirs.jobs_root(forkserver.kept(options))
    server = forkserver.server_for(options, cache_root) if in_root else None
    if server is not None:
        try:
            return _fork_worker(server, job_dir, cache_root, args, extra, needs_stdin=spare or gated)
        except forkserver.ForkError as error:
            forkserver.give_up(server, str(error), stuck=error.stuck)
    return _exec_worker(job_dir, options, cache_root, args, extra, needs_stdin=spare or gated)


def _exec_worker(
    job_dir: Path, options: EvalOptions, cache_root: Path, args: list[str], extra: dict[str, str], needs_stdin: bool
) -> StartedWorker:
    read_fd, write_fd = os.pipe()
    extra = {**extra, pipe.VERDICT_FD_ENV: str(write_fd)}
    command = [sys.executable, "-m", "engine.eval.worker", *args]
    try:
        launch = sandbox.prepare(
            options.sandbox, command, job_dir=job_dir, writable=[cache_root], extra_env=extra, device=options.device
        )
    except sandbox.SandboxError as error:
        os.close(read_fd)
        os.close(write_fd)
        raise EvaluationError(str(error)) from error
    out_read, out_write = os.pipe()
    go_read, go_write = os.pipe() if needs_stdin else (None, None)
    output = CappedLog(out_read, job_dir / "worker.log")
    try:
        process = subprocess.Popen(
            launch.argv,
            stdin=go_read if go_read is not None else subprocess.DEVNULL,
            stdout=out_write,
            stderr=subprocess.STDOUT,
            cwd=job_dir,
            env=launch.env,
            pass_fds=(write_fd,),
            start_new_session=True,  # its own process group: one killpg takes ninja and nvcc too
        )
        procgroups.track(process)
    finally:
        os.close(out_write)
        os.close(write_fd)
        if go_read is not None:
            os.close(go_read)
    output.start()
    return StartedWorker(process, read_fd, output, launch.mechanism, launch.warnings, go_write)


def _fork_worker(
    server: forkserver.ForkServer,
    job_dir: Path,
    cache_root: Path,
    args: list[str],
    extra: dict[str, str],
    needs_stdin: bool,
) -> StartedWorker:
    """The worker forked by ``server``, given the same pipes a started one gets (raises ForkError)."""
    launch = sandbox.prepare_forked(server.mechanism, job_dir=job_dir, writable=[cache_root], extra_env=extra)
    read_fd, write_fd = os.pipe()
    out_read, out_write = os.pipe()
    go_read, go_write = os.pipe() if needs_stdin else (os.open(os.devnull, os.O_RDONLY), None)
    try:
        process = server.spawn(job_dir, args, launch.env, go_read, out_write, write_fd)
    except forkserver.ForkError:
        for fd in (read_fd, out_read, go_write):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in (write_fd, out_write, go_read):
            os.close(fd)
    procgroups.track(process)  # type: ignore[arg-type]  # a Popen's pid and returncode, which is all it reads
    output = CappedLog(out_read, job_dir / "worker.log")
    output.start()
    return StartedWorker(process, read_fd, output, launch.mechanism, launch.warnings, go_write)


def late_stage_death(result: EvalResult, stage: str, how: str, guard: GuardSettings, guards: bool) -> None:
    """The verdict so far, kept when the worker died in a late stage, with that stage's outcome: a
    forward without its own kernels that crashes needs them; a crash at another shape is a failure
    there (engine.eval.late), a refusal where the run refuses ``shape-specific``."""
    if stage == "ablation":
        share = result.kernel_share if result.kernel_share is not None else {}
        share["test"] = "ablation"
        share["ablation"] = {"outcome": "needed", "seconds": None, "how": f"the forward without them {how}"}
        result.kernel_share = share
        result.messages.append(f"the forward without the own kernels {how}: they are needed")
    elif stage == "shapes" and result.shapes is not None:
        result.shapes["crashed"] = True
        pending = [v for v in result.shapes.get("variants", []) if v.get("status") == "skipped" and not v.get("message")]
        if pending:
            pending[-1]["status"], pending[-1]["message"] = "error", f"the worker {how} at this shape"
        finding = runtime_finding(
            "shape-specific", f"the worker {how} at a perturbed shape", guard.runtime_relax, guard.runtime_refuse
        )
        result.findings.append(finding)
        if guards and refuses(finding):
            result.status, result.failed_side = REJECTED, CANDIDATE_SIDE
            result.messages.append(f"refused by the runtime guard [shape-specific]: {finding['message']}")
        else:
            result.messages.append(f"the shape check {how}; the verdict at the task's own shape stands")
    result.stage = "done"


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def wait_for_status(process: subprocess.Popen | forkserver.ForkedProcess) -> None:
    """The killed worker's exit status. A forked one's comes from its server: a stuck server gives
    none, and the worker is then read as lost with it; once read, the server may reap it."""
    if not isinstance(process, forkserver.ForkedProcess):
        process.wait()
        return
    try:
        process.wait(timeout=FORKED_STATUS_WAIT_S)
    except subprocess.TimeoutExpired:
        process.abandon()
    process.release()


def _kill_group(process: subprocess.Popen | forkserver.ForkedProcess) -> None:
    """The worker's group and everything under it (ninja puts each compile in a group of its own)."""
    procgroups.kill_tree(process.pid)
