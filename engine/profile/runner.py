"""Run ncu on a profiling script, under the per-GPU lock and a timeout, and turn the output into a result.

The script itself (which builds the candidate in a fresh worker, warms it up and runs one forward call in
an NVTX range) belongs to the evaluator; this module only wraps it in ncu. Every failure becomes a
`ProfileResult(kind="none", unavailable=...)` — profiling problems never raise into the loop.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engine import procgroups
from engine.profile.availability import ProfileUnavailable, classify_ncu_failure, find_ncu, no_ncu
from engine.profile.lock import gpu_profile_lock
from engine.profile.metrics import resolve_metric_set
from engine.profile.ncu import RULE_SECTIONS, build_import_command, build_ncu_command, resolve_clock_control
from engine.profile.ncu_csv import launch_counts, parse_details_csv, parse_raw_csv
from engine.profile.result import ProfileResult
from engine.profile.specs import GpuSpec
from engine.profile.summary import summarize

DEFAULT_NVTX_RANGE = "cudaforge_forward"  # the range name tests/fixtures/ncu/profile_one.py uses


def run_command(
    cmd: Sequence[str],
    *,
    timeout_s: float,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int | None, str, str, bool]:
    """(returncode, stdout, stderr, timed_out). returncode is None when the program could not be started.

    The command runs in its own session so that a timeout kills ncu *and* the profiled worker processes.
    """
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
        procgroups.track(proc)
    except OSError as exc:
        return None, "", f"{cmd[0]}: {exc}", False
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        procgroups.kill_tree(proc.pid)
        out, err = proc.communicate()
        return proc.returncode, out, err, True


def profile_with_ncu(
    script_args: Sequence[str],
    *,
    workdir: str | Path,
    kernel_names: Sequence[str] = (),
    metrics: str | Sequence[str] = "default",
    nvtx_range: str | None = DEFAULT_NVTX_RANGE,
    launch_count: int = 20,
    clock_control: str = "auto",
    gpu: int | str = 0,
    timeout_s: float = 300.0,
    lock_timeout_s: float | None = 600.0,
    lock_dir: str | Path | None = None,
    python: str = sys.executable,
    ncu_path: str | None = None,
    sections: Sequence[str] = RULE_SECTIONS,
    spec: GpuSpec | None = None,
    duration_ms: float | None = None,
    env: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
    launcher: Callable[[list[str]], tuple[list[str], dict[str, str]]] | None = None,
    locked: bool = False,
) -> ProfileResult:
    """Profile `python script_args...` with ncu and return metrics, rule results and the Judge summary.

    ``locked``: the caller holds the GPU's profile lock when the profiling starts (a run started early
    waits for its go without the lock, and its caller takes it before the go: engine.profile.candidate)."""
    start = time.monotonic()
    ncu = ncu_path or find_ncu(env)
    if ncu is None:
        return _unavailable(
            start,
            no_ncu("not on PATH, not in $CUDA_HOME/bin, /usr/local/cuda/bin or /opt/nvidia/nsight-compute"),
        )

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / "profile.ncu-rep"
    cmd = build_ncu_command(
        python,
        script_args,
        kernel_names,
        resolve_metric_set(metrics),
        nvtx_range,
        launch_count,
        resolve_clock_control(clock_control),
        report,
        extra,
        ncu=ncu,
        sections=sections,
    )
    try:
        held = contextlib.nullcontext() if locked else gpu_profile_lock(gpu, lock_dir=lock_dir, timeout_s=lock_timeout_s)
        with held:
            # the sandbox (engine.sandbox) wraps ncu and the profiled candidate together
            argv, run_env = launcher(cmd) if launcher else (cmd, env)
            rc, out, err, timed_out = run_command(argv, timeout_s=timeout_s, cwd=workdir, env=run_env)
    except TimeoutError as exc:
        return _unavailable(
            start,
            ProfileUnavailable(
                "timeout", str(exc), "Another profile is running on this GPU; try again later."
            ),
            cmd,
        )
    (workdir / "ncu.log").write_text(
        f"$ {' '.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err}\n", encoding="utf-8"
    )
    failure = classify_ncu_failure(rc, out, err, timed_out=timed_out)
    if failure is not None:
        return _unavailable(start, failure, cmd)

    ncu_seconds = time.monotonic() - start
    pages = _report_pages(report, out, ncu=ncu, timeout_s=timeout_s, env=env)
    if isinstance(pages, ProfileUnavailable):
        return _unavailable(start, pages, cmd)
    return _ncu_result(*pages, cmd, spec=spec, duration_ms=duration_ms, start=start, ncu_seconds=ncu_seconds)


def _unavailable(start: float, reason: ProfileUnavailable, cmd: Sequence[str] = ()) -> ProfileResult:
    """The result of a profile that did not happen, with how long it took to find out."""
    return ProfileResult(
        kind="none", unavailable=reason, duration_s=time.monotonic() - start, command=list(cmd)
    )


def _report_pages(
    report: Path, out: str, *, ncu: str, timeout_s: float, env: Mapping[str, str] | None
) -> tuple[str, str] | ProfileUnavailable:
    """(the raw metrics CSV, the rule details CSV) of the saved report; ncu's own output when none was saved."""
    raw_text, details_text = out, ""
    if report.exists():
        # Both pages are read from the saved report at once: each `ncu -i` is a ~1 s process
        # start of its own, and they do not depend on each other.
        with ThreadPoolExecutor(max_workers=2) as pool:
            raw_job = pool.submit(
                run_command, build_import_command(report, "raw", ncu=ncu), timeout_s=timeout_s, env=env
            )
            details_job = pool.submit(
                run_command, build_import_command(report, "details", ncu=ncu), timeout_s=timeout_s, env=env
            )
            rc_raw, raw_text, err_raw, _ = raw_job.result()
            rc_det, details_text, _, _ = details_job.result()
        if rc_raw != 0:
            return ProfileUnavailable(
                "error", f"reading the report failed: {err_raw.strip()[-500:]}", "See ncu.log."
            )
        if rc_det != 0:
            details_text = ""  # rule results are a bonus; the metrics stand on their own
    return raw_text, details_text


def _ncu_result(
    raw_text: str,
    details_text: str,
    cmd: list[str],
    *,
    spec: GpuSpec | None,
    duration_ms: float | None,
    start: float,
    ncu_seconds: float,
) -> ProfileResult:
    """The parsed report: metrics per kernel, rule results, launch counts and the Judge's summary."""
    table = parse_raw_csv(raw_text)
    if not table:
        return _unavailable(
            start,
            ProfileUnavailable(
                "no-kernels-profiled",
                "ncu finished but its output contains no kernel rows",
                "Check the kernel-name filter and the NVTX range, and see ncu.log in the work directory.",
            ),
            cmd,
        )
    rules = parse_details_csv(details_text)
    counts = launch_counts(raw_text)
    summary = summarize(table, rules, spec, duration_ms, launches=counts)
    return ProfileResult(
        kind="ncu",
        metrics=table,
        rules=rules,
        summary=summary,
        duration_s=time.monotonic() - start,
        command=cmd,
        launches=counts,
        phases={"ncu": round(ncu_seconds, 3), "import": round(time.monotonic() - start - ncu_seconds, 3)},
    )
