"""``cudaforge doctor``: what this machine has for building, checking, timing and profiling kernels.

Each check is one line with a state (ok / warn / missing) and, where something is missing, how to
fix it. API keys are reported as set or not set: their values are never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.eval import envinfo
from engine.eval.build.extension import default_cache_root

API_KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
BASE_URL_VARIABLES = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


@dataclass
class Check:
    name: str
    state: str  # "ok" | "warn" | "missing"
    detail: str
    fix: str = ""


def _version_line(command: list[str]) -> str | None:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[-1].strip() if text else None


def _find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and (Path(base) / "bin" / "nvcc").is_file():
            return str(Path(base) / "bin" / "nvcc")
    return None


def run_checks() -> list[Check]:
    """Every check, in the order a user reads them."""
    checks = [Check("python", "ok", sys.version.split()[0])]
    try:
        import torch
    except ImportError:
        return [*checks, Check("torch", "missing", "not importable", "pip install torch")]
    checks.append(Check("torch", "ok", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none'})"))

    checks += _gpu_checks(torch)
    checks += _toolchain_checks()
    checks.extend(_profiling_checks())
    checks.append(_sandbox_check())
    checks.append(_workers_check())
    checks.extend(_dependency_checks())
    checks += _provider_checks()
    checks.append(_cache_check())
    return checks


def _gpu_checks(torch) -> list[Check]:  # noqa: ANN001 - the torch module, imported by the caller
    """The GPUs torch sees (with their compute capability) and the NVIDIA driver."""
    checks: list[Check] = []
    if torch.cuda.is_available():
        names = [
            f"{i}: {torch.cuda.get_device_name(i)} (sm_{''.join(map(str, torch.cuda.get_device_capability(i)))})"
            for i in range(torch.cuda.device_count())
        ]
        checks.append(Check("gpu", "ok", "; ".join(names)))
    else:
        checks.append(
            Check("gpu", "warn", "torch sees no CUDA GPU", "kernels can still be evaluated with --device cpu")
        )
    driver = envinfo.driver_version()
    checks.append(Check("driver", "ok" if driver else "warn", driver or "no NVIDIA driver found"))
    return checks


def _toolchain_checks() -> list[Check]:
    """nvcc, the host C++ compiler and ninja: what building an extension needs."""
    checks: list[Check] = []
    nvcc = _find_nvcc()
    if nvcc:
        version = _version_line([nvcc, "--version"]) or "?"
        checks.append(Check("nvcc", "ok", f"{nvcc} · {version}"))
    else:
        checks.append(
            Check(
                "nvcc",
                "missing",
                "not on PATH or in $CUDA_HOME/bin",
                "install the CUDA toolkit or set CUDA_HOME",
            )
        )

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    checks.append(
        Check("c++", "ok", f"{cxx} · {_first_line([cxx, '--version'])}")
        if cxx
        else Check("c++", "missing", "no C++ compiler", "install g++ (extensions are built with it)")
    )
    ninja = shutil.which("ninja")
    checks.append(
        Check(
            "ninja",
            "ok" if ninja else "missing",
            ninja or "not on PATH",
            "" if ninja else "pip install ninja",
        )
    )
    return checks


def _provider_checks() -> list[Check]:
    """Whether each LLM provider's API key is set (never its value) and any base URL given."""
    checks: list[Check] = []
    for variable in API_KEY_VARIABLES:
        state = "ok" if os.environ.get(variable) else "warn"
        checks.append(
            Check(
                variable,
                state,
                "set" if state == "ok" else "not set",
                "" if state == "ok" else f"export {variable}=… to use that provider",
            )
        )
    for variable in BASE_URL_VARIABLES:
        if os.environ.get(variable):
            checks.append(Check(variable, "ok", os.environ[variable]))
    return checks


def _cache_check() -> Check:
    """Whether the build cache folder is writable."""
    cache = default_cache_root()
    writable = _writable(cache)
    return Check(
        "build cache",
        "ok" if writable else "missing",
        str(cache),
        "" if writable else "set CUDAFORGE_CACHE_DIR to a writable folder",
    )


def _dependency_checks() -> list[Check]:
    """What this install lacks of what cudaforge's code imports, and what each gap costs (engine.cli.deps)."""
    from engine.cli.deps import missing_core, missing_optional

    checks = [
        Check(
            f"import {item.module}",
            "missing",
            f"not installed; imported by {', '.join(item.files[:3])}{' …' if len(item.files) > 3 else ''}",
            "reinstall cudaforge (pip install -e .): it is a core dependency",
        )
        for item in missing_core()
    ]
    by_extra: dict[str, list[str]] = {}
    for _module, extra, cost in missing_optional():
        by_extra.setdefault(extra, [])
        if cost not in by_extra[extra]:
            by_extra[extra].append(cost)
    checks += [
        Check(f"extra {extra}", "warn", "; ".join(costs), f"pip install -e '.[{extra}]'")
        for extra, costs in by_extra.items()
    ]
    if not checks:
        checks.append(Check("dependencies", "ok", "every module cudaforge imports is installed, extras included"))
    return checks


def _sandbox_check() -> Check:
    """Which sandbox confines candidate code here, and how to get a stronger one (engine.sandbox)."""
    from engine.config import ConfigError, load_config
    from engine.sandbox.report import sandbox_status

    try:
        configured = load_config().eval.sandbox
    except ConfigError:
        configured = "auto"
    state, detail, fix = sandbox_status(configured)
    return Check("sandbox", state, detail, fix)


def _workers_check() -> Check:
    """How evaluation workers start here (engine.eval.forkserver)."""
    from engine.config import ConfigError, load_config
    from engine.eval.forkserver import WORKERS_ENV, workers_choice
    from engine.eval.options import EvaluationError
    from engine.sandbox.report import workers_status

    try:
        section = load_config().eval
        workers, sandbox = section.workers, section.sandbox
    except ConfigError:
        workers, sandbox = "auto", "auto"
    try:
        chosen = workers_choice(workers)
    except EvaluationError as error:
        return Check("workers", "warn", f"{error}: every evaluation refuses to start", f"unset ${WORKERS_ENV} or say fork or exec")
    state, detail, fix = workers_status(chosen, sandbox)
    if chosen == "exec" and workers != "exec":  # [eval] workers says auto; the environment chose
        detail = f"each a new interpreter (${WORKERS_ENV}=exec)"
    if chosen != "exec" and state == "ok":
        state, kept, kept_fix = _kept_status()
        detail, fix = f"{detail}; {kept}", fix or kept_fix
    return Check("workers", state, detail, fix)


def _kept_status() -> tuple[str, str, str]:
    """Whether fork servers outlive the command that started them (engine.eval.keptserver)."""
    from engine.eval import jobdirs, keptserver

    keptserver.for_one_shot_command()  # the doctor tells what a one-shot ``cudaforge eval`` would do
    try:
        seconds = keptserver.keep_seconds()
    except keptserver.KeepError as error:
        return "warn", str(error), f"unset ${keptserver.KEEP_ENV} or give it seconds"
    if seconds <= 0:
        return "ok", f"each command's server ends with it (${keptserver.KEEP_ENV}=0)", ""
    if jobdirs.private_dir() is None:
        return "warn", "servers are not kept: no private folder of this user's in the temporary folder", "remove a foreign cudaforge-<uid> folder there"
    return "ok", f"a one-shot eval's server is kept {seconds:g} s for the next one (${keptserver.KEEP_ENV})", ""


def _first_line(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "?"


def _profiling_checks() -> list[Check]:
    from engine.profile.availability import counters_permission_status, find_ncu

    ncu = find_ncu()
    if not ncu:
        return [
            Check(
                "ncu",
                "missing",
                "Nsight Compute not found",
                "install Nsight Compute (part of the CUDA toolkit); without it the Judge gets PyTorch-profiler times instead of NCU metrics",
            )
        ]
    version = _version_line([ncu, "--version"]) or "?"
    version = re.sub(r"\s+", " ", version)
    checks = [Check("ncu", "ok", f"{ncu} · {version}")]
    status, detail = counters_permission_status()
    if status == "ok":
        checks.append(Check("perf counters", "ok", detail))
    elif status == "restricted":
        checks.append(
            Check(
                "perf counters",
                "missing",
                detail,
                "run as root, or set `options nvidia NVreg_RestrictProfilingToAdminUsers=0` and reload the driver "
                "(see https://developer.nvidia.com/ERR_NVGPUCTRPERM); until then the Judge gets PyTorch-profiler times",
            )
        )
    else:
        checks.append(Check("perf counters", "warn", detail + "; ncu will tell on the first profile"))
    return checks


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".doctor-probe"
        probe.write_text("ok")
        probe.unlink()
        return True
    except OSError:
        return False


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("doctor", help="what this machine has: GPU, nvcc, ncu, counters, API keys")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(func=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    checks = run_checks()
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
        return 0
    marks = {"ok": "ok  ", "warn": "warn", "missing": "MISS"}
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"[{marks[check.state]}] {check.name.ljust(width)}  {check.detail}")
        if check.fix:
            print(f"       {' ' * width}  → {check.fix}")
    return 0
