"""Profile a correct candidate for the Judge: NCU when it can, the PyTorch profiler when it cannot.

The loop calls ``profile_candidate`` after an evaluation passed. It never raises: a machine with no
ncu, no counter permission, or a profile that fails still gives the Judge a ``ProfileResult`` that
says which kind of feedback it is (``ncu``, ``torch-profiler`` or ``none``), and why.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine import sandbox
from engine.eval.build.extension import default_cache_root
from engine.profile import target
from engine.profile.availability import ProfileUnavailable
from engine.profile.fallback import summarize_torch_profiler
from engine.profile.kernels import kernel_names_from_source
from engine.profile.lock import gpu_profile_lock
from engine.profile.ncu import RULE_SECTIONS
from engine.profile.result import ProfileResult
from engine.profile.runner import profile_with_ncu
from engine.profile.specs import GpuSpec, spec_for_device
from engine.profile.summary import summarize

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
GO_FILE, STOP_FILE = target.GO_FILE, target.STOP_FILE
LOCK_TIMEOUT_S = 600.0  # as long as profile_with_ncu waits for the lock itself


@dataclass
class ProfileOptions:
    metrics: str | list[str] = "default"
    clock_control: str = "none"  # leave shared machines' clocks alone
    timeout_s: float = 300.0
    use_ncu: bool = True
    cache_root: Path | None = None
    gpu_index: int = 0
    sections: tuple[str, ...] = RULE_SECTIONS  # ncu sections whose rules feed the summary
    sandbox: str = "auto"  # what confines the profiled candidate (engine.sandbox): auto|bwrap|landlock|off


def _launcher(work: Path, cache_root: Path, mode: str):
    """Turns a command (ncu + the target, or the target alone) into its sandboxed argv and env."""

    def launch(command: list[str]) -> tuple[list[str], dict[str, str]]:
        prepared = sandbox.prepare(
            mode,
            command,
            job_dir=work,
            writable=[cache_root],
            # ncu keeps its own per-GPU lock under TMPDIR: a private one (as bwrap's private /tmp gives),
            # so profiles started early and waiting for their go never queue on each other there; which
            # profile may use the GPU is decided by cudaforge's lock (engine.profile.lock), taken at the go
            extra_env={"PYTHONUNBUFFERED": "1", "TMPDIR": str(work / "tmp")},
            device="cuda",  # ncu profiles GPU kernels only
        )
        return prepared.argv, prepared.env

    return launch


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def profile_candidate(
    task_source: str,
    kernel_source: str,
    duration_ms: float | None = None,
    options: ProfileOptions | None = None,
) -> tuple[ProfileResult, GpuSpec | None]:
    """Profile one forward of the candidate; returns the result and the GPU spec it was read against."""
    return ProfileRun(task_source, kernel_source, options).start().result(duration_ms)


def profile_for_judge(
    task_source: str,
    kernel_source: str,
    duration_ms: float | None = None,
    options: ProfileOptions | None = None,
) -> dict:
    """:func:`profile_candidate` as the loop keeps it: the profile.json dict with its ``judge_block``
    (what ``LoopProfiler`` returns; ``explore --ray`` runs it as a Ray task)."""
    return _for_judge(*profile_candidate(task_source, kernel_source, duration_ms, options))


def _for_judge(profiled: ProfileResult, spec: GpuSpec | None) -> dict:
    data = profiled.to_dict()
    data["judge_block"] = profiled.judge_block(spec)
    return data


class ProfileRun:
    """One profile of one candidate. ``early``: started while its evaluation still runs, so that ncu and
    the profiled process start (Python, torch, cudaforge: seconds) off the profile stage's clock; the
    target waits for ``go`` (written once the verdict is correct) before it imports the candidate or
    starts CUDA, so nothing of it runs on the GPU beside the evaluation, and ``cancel`` ends it unused."""

    def __init__(
        self, task_source: str, kernel_source: str, options: ProfileOptions | None = None, early: bool = False
    ) -> None:
        self.task_source, self.kernel_source = task_source, kernel_source
        self.options = options or ProfileOptions()
        self.early = early
        self.work = Path(tempfile.mkdtemp(prefix="cudaforge-profile-"))
        self.cache_root = (self.options.cache_root or default_cache_root()).resolve()
        self.job: dict = {}
        self._ncu: ProfileResult | None = None
        self._error: ProfileResult | None = None
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def start(self) -> ProfileRun:
        self.cache_root.mkdir(parents=True, exist_ok=True)
        (self.work / "tmp").mkdir()
        try:
            self._launch = _launcher(self.work, self.cache_root, self.options.sandbox)
        except sandbox.SandboxError as error:
            self._error = ProfileResult(kind="none", unavailable=ProfileUnavailable("error", str(error), ""))
            return self
        (self.work / "task.py").write_text(self.task_source)
        (self.work / "kernel.py").write_text(self.kernel_source)
        self.job = {
            "task_path": str(self.work / "task.py"),
            "kernel_path": str(self.work / "kernel.py"),
            "cache_root": str(self.cache_root),
            "output": str(self.work / "report.json"),
        }
        if self.options.use_ncu:
            held = {"go_file": str(self.work / GO_FILE), "stop_file": str(self.work / STOP_FILE), "parent_pid": os.getpid()} if self.early else {}
            (self.work / "job.json").write_text(json.dumps({**self.job, **held, "mode": "ncu"}))
            self._thread = threading.Thread(target=self._run_ncu, name="cudaforge-profile", daemon=True)
            self._thread.start()
        return self

    def _run_ncu(self) -> None:
        self._ncu = profile_with_ncu(
            ["-m", "engine.profile.target", str(self.work / "job.json")],
            workdir=self.work,
            kernel_names=kernel_names_from_source(self.kernel_source),
            metrics=self.options.metrics,
            clock_control=self.options.clock_control,
            gpu=self.options.gpu_index,
            timeout_s=self.options.timeout_s + (target.HOLD_LIMIT_S if self.early else 0.0),
            env=_env(),
            sections=self.options.sections,
            launcher=self._launch,
            locked=self.early,  # the lock is taken at the go (``result``), not while the target waits
        )

    def result(self, duration_ms: float | None = None) -> tuple[ProfileResult, GpuSpec | None]:
        """The profile (the target told to go when it was started early), then the work folder removed."""
        began = time.monotonic()
        try:
            if self._error is not None:
                return self._error, None
            if self.early and self._thread is not None:
                refused = self._go_under_lock()
                if refused is not None:
                    return refused, None
            else:
                (self.work / GO_FILE).touch()
                if self._thread is not None:
                    self._thread.join()
            result, spec = self._ncu, _spec(self.work / "report.json")
            if result is not None and result.kind == "ncu":
                # the GPU and the kernel's time are known only now: the roofline against its peaks
                result.summary = summarize(result.metrics, result.rules, spec, duration_ms=duration_ms)
                if self.early:  # the stage's own time: from go; what ran before it is kept apart
                    result.phases = {**(result.phases or {}), "before_go": round(began - self._started, 3)}
                    result.duration_s = time.monotonic() - began
                return result, spec
            fallback = _torch_profiler(self.work, self.job, self.options, result.unavailable if result else None, self._launch)
            fallback.duration_s = time.monotonic() - began
            return fallback, _spec(self.work / "report.json") or spec
        finally:
            shutil.rmtree(self.work, ignore_errors=True)

    def _go_under_lock(self) -> ProfileResult | None:
        """The go, holding the GPU's profile lock until ncu is done. A run started early waits without
        the lock: several may wait at once (an exploration's branches), and the one told to go must
        not queue behind one still waiting for its own go. None when it ran; the result when the lock
        never came (then the waiting run is stopped)."""
        try:
            with gpu_profile_lock(self.options.gpu_index, timeout_s=LOCK_TIMEOUT_S):
                (self.work / GO_FILE).touch()
                assert self._thread is not None
                self._thread.join()
        except TimeoutError as error:
            self.cancel()
            why = ProfileUnavailable("timeout", str(error), "Another profile is running on this GPU; try again later.")
            return ProfileResult(kind="none", unavailable=why)
        return None

    def cancel(self) -> None:
        """Not needed (the kernel was not correct): the waiting target exits without touching CUDA."""
        (self.work / STOP_FILE).touch()
        if self._thread is not None:
            self._thread.join(timeout=60.0)
        shutil.rmtree(self.work, ignore_errors=True)


def _spec(report_path: Path) -> GpuSpec | None:
    try:
        props = json.loads(report_path.read_text()).get("device")
    except (OSError, ValueError):
        return None
    return spec_for_device(props) if props else None


def _torch_profiler(
    work: Path, job: dict, options: ProfileOptions, why: ProfileUnavailable | None, launch=None
) -> ProfileResult:
    (work / "job_torch.json").write_text(json.dumps({**job, "mode": "torch-profiler"}))
    command = [sys.executable, "-m", "engine.profile.target", str(work / "job_torch.json")]
    argv, env = launch(command) if launch else (command, _env())
    try:
        done = subprocess.run(
            argv,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=options.timeout_s,
            start_new_session=True,
        )
        report = json.loads((work / "report.json").read_text()) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        report = None
    if not report or "kernels" not in report:
        reason = why or ProfileUnavailable("error", "the PyTorch profiler run failed", "")
        return ProfileResult(kind="none", unavailable=reason)
    spec = spec_for_device(report["device"]) if report.get("device") else None
    summary = summarize_torch_profiler([tuple(k) for k in report["kernels"]], spec, unavailable=why)
    return ProfileResult(kind="torch-profiler", summary=summary, unavailable=why)


def loop_profiler(
    metrics: str | list[str] = "default", cache_root: Path | None = None, sandbox: str = "auto"
) -> LoopProfiler:
    """The loop's profiler hook: ``(task_source, kernel_source, EvalResult) -> profile.json dict``."""
    return LoopProfiler(ProfileOptions(metrics=metrics, cache_root=cache_root, sandbox=sandbox))


class LoopProfiler:
    """The loop's profile stage. ``prepare`` starts the next kernel's profile while it is evaluated
    (``ProfileRun(early=True)``); the call after a correct verdict lets it go, ``cancel`` drops it.

    The dict it returns carries ``judge_block``, the hardware section of the Judge's optimize prompt
    (which kind of feedback it is, the GPU's spec, the summary)."""

    def __init__(self, options: ProfileOptions) -> None:
        self.options = options
        self._pending: tuple[str, str, ProfileRun] | None = None
        atexit.register(self.cancel)

    def prepare(self, task_source: str, kernel_source: str) -> None:
        self.cancel()
        self._pending = (task_source, kernel_source, ProfileRun(task_source, kernel_source, self.options, early=True).start())

    def cancel(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[2].cancel()

    def __call__(self, task_source: str, kernel_source: str, result) -> dict:  # noqa: ANN001
        duration = result.timing.candidate.median_ms if getattr(result, "timing", None) else None
        pending, self._pending = self._pending, None
        if pending is not None and pending[:2] == (task_source, kernel_source):
            return _for_judge(*pending[2].result(duration))
        if pending is not None:
            pending[2].cancel()
        return profile_for_judge(task_source, kernel_source, duration, self.options)
