"""Profile a correct candidate for the Judge: NCU when it can, the PyTorch profiler when it cannot.

The loop calls ``profile_candidate`` after an evaluation passed. It never raises: a machine with no
ncu, no counter permission, or a profile that fails still gives the Judge a ``ProfileResult`` that
says which kind of feedback it is (``ncu``, ``torch-profiler`` or ``none``), and why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from engine import sandbox
from engine.eval.build.extension import default_cache_root
from engine.profile.availability import ProfileUnavailable
from engine.profile.fallback import summarize_torch_profiler
from engine.profile.kernels import kernel_names_from_source
from engine.profile.ncu import RULE_SECTIONS
from engine.profile.result import ProfileResult
from engine.profile.runner import profile_with_ncu
from engine.profile.specs import GpuSpec, spec_for_device
from engine.profile.summary import summarize

PACKAGE_ROOT = Path(__file__).resolve().parents[2]


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
            extra_env={"PYTHONUNBUFFERED": "1"},
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
    options = options or ProfileOptions()
    work = Path(tempfile.mkdtemp(prefix="cudaforge-profile-"))
    cache_root = (options.cache_root or default_cache_root()).resolve()
    cache_root.mkdir(parents=True, exist_ok=True)
    try:
        launch = _launcher(work, cache_root, options.sandbox)
    except sandbox.SandboxError as error:
        shutil.rmtree(work, ignore_errors=True)
        return ProfileResult(kind="none", unavailable=ProfileUnavailable("error", str(error), "")), None
    try:
        (work / "task.py").write_text(task_source)
        (work / "kernel.py").write_text(kernel_source)
        job = {
            "task_path": str(work / "task.py"),
            "kernel_path": str(work / "kernel.py"),
            "cache_root": str(cache_root),
            "output": str(work / "report.json"),
        }
        started = time.monotonic()
        result = None
        if options.use_ncu:
            (work / "job.json").write_text(json.dumps({**job, "mode": "ncu"}))
            result = profile_with_ncu(
                ["-m", "engine.profile.target", str(work / "job.json")],
                workdir=work,
                kernel_names=kernel_names_from_source(kernel_source),
                metrics=options.metrics,
                clock_control=options.clock_control,
                gpu=options.gpu_index,
                timeout_s=options.timeout_s,
                duration_ms=duration_ms,
                env=_env(),
                sections=options.sections,
                launcher=launch,
            )
        spec = _spec(work / "report.json")
        if result is not None and result.kind == "ncu":
            if spec is not None:  # the GPU is known only now: redo the roofline against its peaks
                result.summary = summarize(result.metrics, result.rules, spec, duration_ms=duration_ms)
            return result, spec
        fallback = _torch_profiler(work, job, options, result.unavailable if result else None, launch)
        fallback.duration_s = time.monotonic() - started
        return fallback, _spec(work / "report.json") or spec
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
):
    """The loop's profiler hook: ``(task_source, kernel_source, EvalResult) -> profile.json dict``.

    The dict carries ``judge_block``, the hardware section of the Judge's optimize prompt (which kind of
    feedback it is, the GPU's spec, the summary).
    """

    def profile(task_source: str, kernel_source: str, result) -> dict:
        duration = result.timing.candidate.median_ms if getattr(result, "timing", None) else None
        options = ProfileOptions(metrics=metrics, cache_root=cache_root, sandbox=sandbox)
        profiled, spec = profile_candidate(task_source, kernel_source, duration, options)
        data = profiled.to_dict()
        data["judge_block"] = profiled.judge_block(spec)
        return data

    return profile
