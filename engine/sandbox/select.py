"""Pick the sandbox for a run and turn a worker command into the confined command and environment.

``auto`` picks the strongest mechanism that works on this machine: bwrap (namespaces), then Landlock
(in-process rules), then nothing. ``off`` runs candidate code with the user's full rights and says so
in every result. The mechanism actually used is recorded in ``EvalResult.sandbox``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import SANDBOX_MODES
from engine.sandbox import bwrap, cudaprobe, landlock
from engine.sandbox.env import worker_env

MODES = SANDBOX_MODES  # the [eval] sandbox choices (engine.config)
OFF_WARNING = (
    "sandbox is off: candidate code ran with your full rights (files, network, environment); "
    'set [eval] sandbox = "auto"'
)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class SandboxError(RuntimeError):
    """The sandbox asked for cannot run here (e.g. ``bwrap`` requested but not installed)."""


@dataclass
class Launch:
    """How to start one confined run: the argv, its whole environment, and what confines it."""

    argv: list[str]
    env: dict[str, str]
    mechanism: str  # "bwrap" | "landlock" | "off"
    warnings: list[str] = field(default_factory=list)


def available_mechanisms(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """For each mechanism: None when it works here, else why not (what ``cudaforge doctor`` shows)."""
    env = os.environ if env is None else env
    found = bwrap.find_bwrap(env)
    if found is None:
        why_bwrap: str | None = (
            f"bwrap not found (${bwrap.BWRAP_ENV} unset and no bwrap on PATH)"
            if not env.get(bwrap.BWRAP_ENV)
            else f"${bwrap.BWRAP_ENV}={env[bwrap.BWRAP_ENV]} is not executable"
        )
    else:
        why_bwrap = bwrap.probe(found)
    abi = landlock.abi_version()
    return {
        "bwrap": why_bwrap,
        "landlock": None if abi >= 1 else "the kernel has no Landlock (Linux 5.13+ with landlock enabled)",
        "off": None,
    }


def resolve_mode(mode: str, env: Mapping[str, str] | None = None) -> str:
    """The mechanism ``mode`` means here; raises SandboxError when an explicit one cannot run."""
    if mode not in MODES:
        raise SandboxError(f"unknown sandbox {mode!r}: use one of {', '.join(MODES)}")
    if mode == "off":
        return "off"
    status = available_mechanisms(env)
    if mode == "auto":
        return next(m for m in ("bwrap", "landlock", "off") if status[m] is None)
    if status[mode] is not None:
        raise SandboxError(f"sandbox {mode!r} cannot run here: {status[mode]}")
    return mode


def _python_dirs() -> list[Path]:
    """Folders the interpreter and its packages live in (bound back when hidden, readable under Landlock)."""
    dirs = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
    for entry in sys.path:
        with contextlib.suppress(OSError):
            if entry and Path(entry).is_dir():
                dirs.add(Path(entry))
    return sorted(dirs)


def hidden_dirs(env: Mapping[str, str], extra: Sequence[Path | str] = ()) -> list[Path]:
    """What the candidate must not see: the user's home, the sessions root, the working directory."""
    from sessions.paths import default_sessions_root  # the sessions root the user configured

    folders = [Path(os.path.expanduser("~")), Path.cwd(), *map(Path, extra)]
    if env.get("HOME"):
        folders.append(Path(env["HOME"]))
    with contextlib.suppress(Exception):  # a broken sessions setting must not stop an evaluation
        folders.append(default_sessions_root())
    return folders


def _engine_env(parent_env: Mapping[str, str], extra_env: Mapping[str, str] | None) -> dict[str, str]:
    """What the engine sets for every worker: cudaforge on the path, then the caller's own settings."""
    extra = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), parent_env.get("PYTHONPATH")]))}
    extra.update(extra_env or {})
    return extra


def _readable(parent_env: Mapping[str, str]) -> list[Path]:
    """Folders a confined worker may read besides the system's: Python, cudaforge, its tools' paths."""
    return [
        *_python_dirs(),
        PACKAGE_ROOT,
        *(
            Path(p)
            for name in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH")
            for p in parent_env.get(name, "").split(os.pathsep)
            if p
        ),
        *(Path(parent_env[n]) for n in ("CUDA_HOME", "CUDA_PATH") if parent_env.get(n)),
    ]


def _confine_to(env: dict[str, str], job_dir: Path, readable: Sequence[Path], writable: Sequence[Path]) -> None:
    """Landlock's rules for one worker, in ``env``: its temporary files in its own job folder."""
    tmp = job_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp)
    env[landlock.LANDLOCK_ENV] = json.dumps(landlock.rules_for(readable, writable))


def prepare(
    mode: str,
    command: Sequence[str],
    *,
    job_dir: Path,
    writable: Sequence[Path],
    extra_env: Mapping[str, str] | None = None,
    parent_env: Mapping[str, str] | None = None,
    hidden: Sequence[Path | str] = (),
    device: str | None = None,
    outlive_parent: bool = False,
) -> Launch:
    """The confined form of ``command`` (run with cwd ``job_dir``), for the sandbox ``mode``.

    ``writable`` are the folders besides ``job_dir`` the run may write (the build cache). For a CUDA
    ``device`` under Landlock, CUDA must be seen to start under the rules first (engine.sandbox.cudaprobe).
    ``outlive_parent``: bwrap's child does not die with the starting thread (a kept fork server).
    """
    parent_env = dict(os.environ if parent_env is None else parent_env)
    mechanism = resolve_mode(mode, parent_env)
    home = job_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    extra = _engine_env(parent_env, extra_env)
    readable = _readable(parent_env)
    if mechanism == "off":
        env = {**parent_env, **extra}
        return Launch(list(command), env, "off", [OFF_WARNING])
    env = worker_env(parent_env, home, extra)
    env["CUDAFORGE_SANDBOX"] = mechanism  # what confines it, for the confined program to read
    writable_dirs = [job_dir, *writable]
    if mechanism == "bwrap":
        exe = bwrap.find_bwrap(parent_env)
        assert exe is not None
        argv = bwrap.bwrap_command(
            exe,
            command,
            env=env,
            writable=writable_dirs,
            hidden=hidden_dirs(parent_env, hidden),
            keep_readable=readable,
            chdir=job_dir,
            outlive_parent=outlive_parent,
        )
        return Launch(argv, env, "bwrap")
    _confine_to(env, job_dir, readable, writable_dirs)
    if device and device.startswith("cuda"):
        why = cudaprobe.landlock_blocks_cuda(env)
        if why:
            chosen = (
                "auto picked Landlock because bwrap cannot start here"
                if mode == "auto"
                else "sandbox = landlock"
            )
            raise SandboxError(
                f"CUDA does not start under the Landlock sandbox on this machine ({why}; {chosen}). "
                "Install bubblewrap so auto can use it (apt install bubblewrap), or, knowing candidate code "
                'then runs with your full rights, set [eval] sandbox = "off"'
            )
    return Launch(list(command), env, "landlock")


def fork_blocker(mechanism: str) -> str | None:
    """None when workers forked from one sandboxed server can each be confined apart under
    ``mechanism``, else why not (engine.eval.forkserver then starts each worker the usual way).

    Under bubblewrap the server's workers share its namespaces, so each confines itself with Landlock
    too: its own job folder only, and no signal to a process outside its own domain (a sibling, the
    server), which needs Landlock's scopes (ABI 6, Linux 6.12).
    """
    if mechanism == "off":
        return None
    abi = landlock.abi_version()
    if abi < 6:
        return f"workers forked under {mechanism} need Landlock ABI 6 (signal scopes) to be kept apart; this kernel has {abi}"
    return None


def prepare_forked(
    mechanism: str,
    *,
    job_dir: Path,
    writable: Sequence[Path],
    extra_env: Mapping[str, str] | None = None,
    parent_env: Mapping[str, str] | None = None,
) -> Launch:
    """The environment of one worker forked by a fork server that ``prepare`` started under the resolved
    ``mechanism``; its argv is empty (nothing is executed). Under bwrap and Landlock it carries the
    worker's own Landlock rules (its job folder and ``writable``, read as ``prepare``'s worker reads),
    which the worker applies before reading any candidate code, as a Landlock worker always has."""
    parent_env = dict(os.environ if parent_env is None else parent_env)
    home = job_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    extra = _engine_env(parent_env, extra_env)
    if mechanism == "off":
        return Launch([], {**parent_env, **extra}, "off", [OFF_WARNING])
    env = worker_env(parent_env, home, extra)
    env["CUDAFORGE_SANDBOX"] = mechanism
    _confine_to(env, job_dir, _readable(parent_env), [job_dir, *writable])
    return Launch([], env, mechanism)
