"""Evaluate a candidate kernel against its task in a fresh, isolated worker process.

The engine never runs candidate code itself: ``evaluate`` starts ``python -m engine.eval.worker`` in a
new process group, hands it a job file, and listens on a private pipe for its stage changes and
verdict. Each stage has its own timeout; when one runs over, the whole process group is killed
(ninja and nvcc included) and the result says which stage it was. A worker that dies without a
verdict (a segfault, an abort, ``os._exit``) is a ``runtime_error`` built from what it reported
before dying: the verdict decides, never the exit code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from engine import sandbox
from engine.eval import faults
from engine.eval.build.extension import default_cache_root, remove_stale_torch_lock
from engine.eval.job import WorkerJob
from engine.eval.result import (
    CANDIDATE_SIDE,
    HARNESS_ERROR,
    HARNESS_SIDE,
    REFERENCE_SIDE,
    REJECTED,
    RUNTIME_ERROR,
    TIMEOUT,
    BuildInfo,
    EvalResult,
    ExtensionBuild,
    TrialResult,
)
from engine.eval.timing import TimingPlan
from engine.eval.tolerances import DEFAULT_TOLERANCES
from engine.eval.worker import VERDICT_FD_ENV
from engine.profile.kernels import kernel_names_from_source
from engine.sandbox.logcap import CappedLog

DRAIN_AFTER_EXIT_S = 1.0  # how long the pipe is still read once the worker has exited
DRAIN_AFTER_EXIT_BYTES = 8 * 1024 * 1024
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # an EvalResult line is far smaller
# Static findings that are not cheats but a candidate that does not load: the build stage reports them
# as a compile_error with the real error, which is what the Judge's repair mode needs.
LEFT_TO_BUILD = frozenset({"syntax-error", "no-modelnew"})
KERNEL_FILE = "kernel.py"  # the candidate's file name in the job folder unless the caller names it
LOG_LIMIT_BYTES = 400_000
STDERR_TAIL_LINES = 40


@dataclass
class StageTimeouts:
    """Seconds each stage may take before the worker's process group is killed."""

    start: float = 120.0  # interpreter + torch import
    setup: float = 120.0  # environment facts + importing the task
    build: float = 900.0  # a cold stock CUDA build takes about a minute; template-heavy ones more
    check: float = 300.0
    time: float = 300.0


@dataclass
class EvalOptions:
    """Settings of one evaluation; defaults follow DESIGN §3."""

    device: str = "auto"  # "auto" → cuda when available, else cpu
    trials: int = 5
    seed: int = 42
    tolerances: dict[str, float] = field(default_factory=dict)
    timing: TimingPlan = field(default_factory=TimingPlan)
    do_timing: bool = True
    timeouts: StageTimeouts = field(default_factory=StageTimeouts)
    cache_root: Path | None = None
    use_pch: bool = True  # cudaforge's precompiled torch header for the C++ binding (engine.eval.build.pch)
    gpu_index: int | None = None
    guards: bool = True  # off only to measure their cost; relax single rules with ``relax`` instead
    relax: tuple[str, ...] = ()  # guard rule ids (static or runtime) to report but not enforce
    guard_policy: str = "default"  # engine.guard.policy: "default" (KernelBench) or "strict"
    refuse: tuple[str, ...] = ()  # guard rule ids whose warnings refuse in this run
    flag_speedup_above: float = 10.0  # a larger speedup is flagged for human review
    # PyTorch's CPU reference runs on one thread by default: its thread pool slows by up to ~80x when
    # other work takes the cores (seen on the 2-core CI machine), which would fake a large speedup.
    cpu_threads: int = 1
    sandbox: str = "auto"  # auto | bwrap | landlock | off: what confines the worker (engine.sandbox)

    @classmethod
    def from_config(
        cls, config: Any, device: str | None = None, cache_root: Path | None = None
    ) -> EvalOptions:
        """The options an ``engine.config.Config``'s ``[eval]`` table describes (every front end uses this)."""
        e = config.eval
        return cls(
            device=device or e.device,
            trials=e.trials,
            seed=e.seed,
            tolerances=dict(e.tolerances),
            timing=TimingPlan(min_trials=e.timing_trials, budget_s=e.timing_budget_s),
            timeouts=StageTimeouts(**vars(e.timeouts)),
            cache_root=cache_root,
            guard_policy=config.guard.policy,
            relax=tuple(config.guard.relax),
            refuse=tuple(config.guard.refuse),
            sandbox=e.sandbox,
        )

    def settings(self) -> dict[str, Any]:
        """What the result records about how it was obtained: every option but the machine-local ones.

        Derived from the fields, so an option added later is recorded without a third hand-kept list.
        """
        recorded = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in NOT_RECORDED}
        recorded["tolerances"] = {**DEFAULT_TOLERANCES, **self.tolerances}
        return json.loads(json.dumps({k: _plain(v) for k, v in recorded.items()}))


# Where and how this machine ran it (the result's ``device``/``env``/``build`` say so), not how it was judged;
# whether it was timed shows in ``timing`` itself (an evalset times in a second pass).
NOT_RECORDED = frozenset({"device", "cache_root", "gpu_index", "use_pch", "do_timing"})


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return list(value) if isinstance(value, tuple) else value


@dataclass
class EvalEvent:
    """Progress of an evaluation for a front end: a stage change, a log line, or a trial."""

    kind: str  # "stage" | "log" | "trial"
    stage: str = ""
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


class EvaluationError(Exception):
    """The evaluation could not be started at all (bad paths, no CUDA when asked for it)."""


def resolve_device(device: str) -> str:
    """Turn ``auto`` into ``cuda`` or ``cpu``; refuse ``cuda`` where there is none."""
    if device not in ("auto", "cpu", "cuda"):
        raise EvaluationError(f"unknown device {device!r}: use cpu, cuda or auto")
    if device == "cpu":
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    if device == "cuda" and not available:
        raise EvaluationError(
            "--device cuda was asked for, but torch sees no CUDA GPU here (try --device cpu)"
        )
    return "cuda" if available else "cpu"


def evaluate_files(
    task_path: str | Path,
    kernel_path: str | Path,
    options: EvalOptions | None = None,
    on_event: Callable[[EvalEvent], None] | None = None,
) -> EvalResult:
    """Evaluate ``kernel_path`` against the task in ``task_path``."""
    task_path, kernel_path = Path(task_path), Path(kernel_path)
    for label, path in (("task", task_path), ("kernel", kernel_path)):
        if not path.is_file():
            raise EvaluationError(f"no such {label} file: {path}")
    return evaluate(
        task_path.read_text(),
        kernel_path.read_text(),
        options,
        on_event,
        task_name=task_path.stem,
        kernel_name=kernel_path.name,
    )


def evaluate(
    task_source: str,
    kernel_source: str,
    options: EvalOptions | None = None,
    on_event: Callable[[EvalEvent], None] | None = None,
    task_name: str = "task",
    kernel_name: str = KERNEL_FILE,
) -> EvalResult:
    """Evaluate a candidate given as source text; blocks until the verdict (or a timeout).

    ``kernel_name``: the file name the candidate is written under for the worker, so Python's own
    messages (``SyntaxError: … (mykernel.py, line 3)``, tracebacks) name the user's file.
    """
    options = options or EvalOptions()
    device = resolve_device(options.device)
    static_relax, runtime_relax = split_relaxations(options.relax)
    static_refuse, runtime_refuse = split_refusals(options.guard_policy, options.refuse)
    started = time.monotonic()
    findings = (
        static_findings(kernel_source, device, static_relax, options.guard_policy, static_refuse)
        if options.guards
        else []
    )
    guard_seconds = time.monotonic() - started
    refusals = [
        f
        for f in findings
        if f["severity"] == "refuse" and not f["relaxed"] and f["rule"] not in LEFT_TO_BUILD
    ]
    if refusals:
        result = EvalResult(status=REJECTED, stage="guard", device=device, findings=findings)
        result.messages = [
            f"refused by the static guard [{f['rule']}] at line {f['line']}: {f['message']}" for f in refusals
        ]
    else:
        cache_root = (Path(options.cache_root) if options.cache_root else default_cache_root()).resolve()
        cache_root.mkdir(parents=True, exist_ok=True)
        job_dir = Path(tempfile.mkdtemp(prefix="cudaforge-eval-"))
        try:
            kernel_names = kernel_names_from_source(kernel_source) if device == "cuda" else []
            run = _WorkerRun(job_dir, device, options, cache_root, on_event, runtime_relax, kernel_names)
            run.runtime_refuse = runtime_refuse
            result = run.execute(task_source, kernel_source, task_name, kernel_name)
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        result.findings = [*findings, *result.findings]
    result.durations["guard"] = guard_seconds
    result.relaxed_rules = sorted(
        set(options.relax) | {f["rule"] for f in result.findings if f.get("relaxed")}
    )
    result.guard_policy = options.guard_policy
    result.guard_refuse = list(dict.fromkeys(options.refuse))
    if result.speedup is not None and result.speedup > options.flag_speedup_above and result.ok:
        result.flags.append(
            f"speedup {result.speedup:.2f}x is above the {options.flag_speedup_above:g}x review threshold: "
            "check by hand that the kernel does the whole computation"
        )
    mark_failed_side(result)
    result.kernel_sha256 = hashlib.sha256(kernel_source.encode()).hexdigest()
    result.task = task_name
    result.device = device
    result.settings = {**options.settings(), **result.settings}
    result.durations.setdefault("total", time.monotonic() - started)
    return result


def mark_failed_side(result: EvalResult) -> None:
    """Blame the right side of a failure the worker could not (a timeout or crash, a static refusal).

    A worker that dies or runs over in the ``reference`` stage was running task code only; a harness
    fault blames neither side.
    """
    if result.harness_failed:
        result.failed_side, result.task_error = HARNESS_SIDE, False
        return
    if result.ok or result.failed_side is not None:
        return
    if result.stage == "reference":
        result.failed_side, result.task_error = REFERENCE_SIDE, True
    else:
        result.failed_side = CANDIDATE_SIDE


def check_task(task_source: str, options: EvalOptions | None = None, task_name: str = "task") -> EvalResult:
    """Run only the worker's reference check (no candidate): ``task_error`` says whether the task is broken.

    The loop calls it before its first LLM request, so a broken task costs no tokens.
    """
    options = options or EvalOptions()
    device = resolve_device(options.device)
    cache_root = (Path(options.cache_root) if options.cache_root else default_cache_root()).resolve()
    cache_root.mkdir(parents=True, exist_ok=True)
    job_dir = Path(tempfile.mkdtemp(prefix="cudaforge-taskcheck-"))
    try:
        run = _WorkerRun(job_dir, device, options, cache_root, None, reference_only=True)
        result = run.execute(task_source, "", task_name)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
    mark_failed_side(result)
    if not result.ok and not result.harness_failed:  # any other failure before a candidate exists is the task's
        result.failed_side, result.task_error = REFERENCE_SIDE, True
    result.task, result.device = task_name, device
    return result


def split_relaxations(relax: tuple[str, ...] | list[str]) -> tuple[list[str], list[str]]:
    """Sort rule ids into static and runtime ones; an unknown id is an error that lists the valid ones."""
    from engine.guard import RULES
    from engine.guard.runtime import RUNTIME_RULES

    unknown = [r for r in relax if r not in RULES and r not in RUNTIME_RULES]
    if unknown:
        valid = ", ".join(sorted([*RULES, *RUNTIME_RULES]))
        raise EvaluationError(f"unknown guard rule(s) {', '.join(unknown)}; valid rules: {valid}")
    return [r for r in relax if r in RULES], [r for r in relax if r in RUNTIME_RULES]


def split_refusals(policy: str, refuse: tuple[str, ...] | list[str]) -> tuple[list[str], list[str]]:
    """Check the policy and sort the ``refuse`` rule ids into static and runtime ones (unknown: an error)."""
    from engine.guard import RULES
    from engine.guard.policy import GuardPolicyError, check_policy, check_rule_ids

    try:
        check_policy(policy)
        ids = check_rule_ids(refuse)
    except GuardPolicyError as error:
        raise EvaluationError(str(error)) from None
    return [r for r in ids if r in RULES], [r for r in ids if r not in RULES]


def static_findings(
    kernel_source: str,
    device: str,
    relax: list[str],
    policy: str = "strict",
    refuse: list[str] | tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The static guard's findings for the source under ``policy``, as result dicts (relaxed ones marked)."""
    from engine.guard import check_source

    findings = check_source(
        kernel_source,
        backend="cuda" if device == "cuda" else "cpu",
        relax=relax,
        policy=policy,
        refuse=refuse,
    )
    return [{**f.to_dict(), "source": "static"} for f in findings]


class _WorkerRun:
    """One worker process from spawn to verdict, with per-stage deadlines."""

    def __init__(
        self,
        job_dir: Path,
        device: str,
        options: EvalOptions,
        cache_root: Path,
        on_event: Callable[[EvalEvent], None] | None,
        runtime_relax: list[str] | None = None,
        kernel_names: list[str] | None = None,
        reference_only: bool = False,
    ) -> None:
        self.job_dir = job_dir
        self.reference_only = reference_only  # the task check: the worker stops after the reference
        self.runtime_relax = list(runtime_relax or [])  # runtime guard rules to report but not enforce
        self.runtime_refuse: list[str] = []  # runtime rules whose warnings refuse in this run
        self.kernel_names = list(kernel_names or [])  # the source's __global__ names, for the launch check
        self.device = device
        self.options = options
        self.cache_root = cache_root
        self.on_event = on_event
        self.log_path = job_dir / "worker.log"
        self.stage = "start"
        self.stage_started = time.monotonic()
        self.stage_marks: dict[str, int] = {}  # log offset at which each stage began
        self.durations: dict[str, float] = {}
        self.build_dirs: list[str] = []
        self.trials: list[TrialResult] = []
        self.build: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None
        self._log_offset = 0
        self._pending = b""
        self.sandbox_used = ""
        self.sandbox_warnings: list[str] = []

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
            guards=self.options.guards,
            relax_runtime=tuple(self.runtime_relax),
            refuse_runtime=tuple(self.runtime_refuse),
            kernel_names=tuple(self.kernel_names),
            cpu_threads=self.options.cpu_threads or 0,
            reference_only=self.reference_only,
        )
        path = job.write(self.job_dir / "job.json")
        return path

    def execute(
        self, task_source: str, kernel_source: str, task_name: str, kernel_name: str = KERNEL_FILE
    ) -> EvalResult:
        job_path = self.write_job(task_source, kernel_source, task_name, kernel_name)
        read_fd, write_fd = os.pipe()
        extra = {VERDICT_FD_ENV: str(write_fd), "PYTHONUNBUFFERED": "1"}
        if self.options.gpu_index is not None:
            extra["CUDA_VISIBLE_DEVICES"] = str(self.options.gpu_index)
        try:
            launch = sandbox.prepare(
                self.options.sandbox,
                [sys.executable, "-m", "engine.eval.worker", str(job_path)],
                job_dir=self.job_dir,
                writable=[self.cache_root],
                extra_env=extra,
                device=self.device,
            )
        except sandbox.SandboxError as error:
            os.close(read_fd)
            os.close(write_fd)
            raise EvaluationError(str(error)) from error
        self.sandbox_used, self.sandbox_warnings = launch.mechanism, launch.warnings
        started = time.monotonic()
        out_read, out_write = os.pipe()
        output = CappedLog(out_read, self.log_path)
        try:
            process = subprocess.Popen(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=subprocess.STDOUT,
                cwd=self.job_dir,
                env=launch.env,
                pass_fds=(write_fd,),
                start_new_session=True,  # its own process group: one killpg takes ninja and nvcc too
            )
        finally:
            os.close(out_write)
        output.start()
        os.close(write_fd)
        self._set_stage("start")
        timed_out = False
        try:
            timed_out = self._listen(process, read_fd)
        finally:
            os.close(read_fd)
            if not timed_out:  # bwrap reports its child's death a moment after the pipe closes
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=2.0)
            _kill_group(process)  # also what the worker left behind in its group (ninja, a stray child)
            process.wait()
        output.join(timeout=2.0)
        self._drain_log()
        if self.final is None:  # the stage it died or was killed in still gets its time
            self.durations[self.stage] = (
                self.durations.get(self.stage, 0.0) + time.monotonic() - self.stage_started
            )
        self.durations["total"] = time.monotonic() - started
        returncode = process.returncode
        if launch.mechanism == "bwrap" and returncode is not None and returncode > 128:
            returncode = 128 - returncode  # bwrap exits 128+N when its child died of signal N
        result = self._assemble(returncode, timed_out)
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
        self.stage_marks.setdefault(stage, self._log_size())
        self._emit(EvalEvent(kind="stage", stage=stage))

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _stage_limit(self) -> float:
        return float(getattr(self.options.timeouts, self.stage, self.options.timeouts.check))

    def _listen(self, process: subprocess.Popen, read_fd: int) -> bool:
        """Read messages until the worker is gone; True when a stage timed out."""
        while True:
            remaining = self.stage_started + self._stage_limit() - time.monotonic()
            if remaining <= 0 and self.final is None:
                _kill_group(process)
                return True
            ready, _, _ = select.select([read_fd], [], [], max(0.0, min(0.2, remaining)))
            self._drain_log()  # may take long: a front end's callback runs here
            if ready and not self._read_messages(read_fd):
                return False  # every holder of the pipe's write end is gone
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
        """Handle the complete lines in one read of the pipe; the bytes read, 0 at its end."""
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return 0
        self._pending += chunk
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            self._handle(line)
        if len(self._pending) > MAX_MESSAGE_BYTES:  # no message is this long: a flood without newlines
            self._pending = b""
        return len(chunk)

    def _handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        kind = message.get("type")
        if kind == "ready" and self.stage == "start":
            self.durations["process_start"] = time.monotonic() - self.stage_started
            self.stage_started = time.monotonic()
            self.stage = "setup"
        elif kind == "stage":
            self._set_stage(str(message.get("stage")))
        elif kind == "build_dir":
            self.build_dirs.append(str(message.get("path")))
        elif kind == "build":
            self.build = message.get("build")
        elif kind == "trial":
            trial = TrialResult(**message["trial"])
            self.trials.append(trial)
            self._emit(EvalEvent(kind="trial", stage=self.stage, data=message["trial"]))
        elif kind == "result":
            self.final = message.get("result")

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
            for text in data[:cut].decode(errors="replace").splitlines():
                self._emit(EvalEvent(kind="log", stage=self.stage, text=text))

    def _log_text(self, start: int = 0, end: int | None = None) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(start)
                data = log.read() if end is None else log.read(max(0, end - start))
        except FileNotFoundError:
            return ""
        if len(data) > LOG_LIMIT_BYTES:
            half = LOG_LIMIT_BYTES // 2
            data = data[:half] + b"\n[... log truncated ...]\n" + data[-half:]
        return data.decode(errors="replace")

    def _assemble(self, returncode: int | None, timed_out: bool) -> EvalResult:
        if self.final is not None:
            result = EvalResult.from_dict(self.final)
        else:
            result = EvalResult(status=RUNTIME_ERROR, stage=self.stage, device=self.device)
            result.trials = list(self.trials)
            if self.build:
                result.build = EvalResult.from_dict({"status": "", "build": self.build}).build
            self._explain_death(result, returncode, timed_out)
        if self.stage_marks.get("build") is not None:
            result.build.log = self._log_text(self.stage_marks["build"], self.stage_marks.get("check"))
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
        lines = self._log_text().splitlines()
        result.stderr_tail = "\n".join(lines[-STDERR_TAIL_LINES:])
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

    def _explain_death(self, result: EvalResult, returncode: int | None, timed_out: bool) -> None:
        stage = self.stage
        result.stage = stage
        if stage in ("start", "setup"):  # no task or candidate code has run yet: cudaforge's own start-up
            self._explain_startup_failure(result, returncode, timed_out)
            return
        if timed_out:
            limit = self._stage_limit()
            result.status = TIMEOUT
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


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
