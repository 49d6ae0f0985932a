"""What ``cudaforge doctor`` says about the sandbox: which one is active and how to get a stronger one."""

from __future__ import annotations

import os
from collections.abc import Mapping

from engine.sandbox import landlock
from engine.sandbox.select import SandboxError, available_mechanisms, fork_blocker, resolve_mode

HOW_TO_GET_BWRAP = (
    "install bubblewrap (apt-get install bubblewrap), or unpack its .deb with dpkg -x and set "
    "CUDAFORGE_BWRAP=/path/to/bwrap"
)


def sandbox_status(configured: str, env: Mapping[str, str] | None = None) -> tuple[str, str, str]:
    """(state, detail, fix) for the doctor's ``sandbox`` line."""
    env = os.environ if env is None else env
    status = available_mechanisms(env)
    try:
        active = resolve_mode(configured, env)
    except SandboxError as error:
        return "missing", f"[eval] sandbox = {configured!r}: {error}", HOW_TO_GET_BWRAP
    if active == "bwrap":
        return "ok", f"bwrap (configured: {configured}) · namespaces, no network, private home and tmp", ""
    if active == "landlock":
        abi = landlock.abi_version()
        detail = f"landlock ABI {abi} (configured: {configured}); bwrap unavailable: {status['bwrap']}"
        blocked = _landlock_blocks_cuda(env)
        if blocked:
            return (
                "missing",
                f"{detail}; CUDA does not start under it ({blocked}): CUDA runs are refused",
                HOW_TO_GET_BWRAP,
            )
        return "warn", detail, f"for the stronger bwrap sandbox: {HOW_TO_GET_BWRAP}"
    why = (
        "configured off"
        if configured == "off"
        else f"bwrap: {status['bwrap']}; landlock: {status['landlock']}"
    )
    return (
        "warn",
        f"off: candidate code runs with your full rights ({why})",
        ('set [eval] sandbox = "auto" and ' + HOW_TO_GET_BWRAP),
    )


def workers_status(workers: str, sandbox: str, env: Mapping[str, str] | None = None) -> tuple[str, str, str]:
    """(state, detail, fix) for the doctor's ``workers`` line: how evaluation workers start here
    (engine.eval.forkserver: forked from one server that imported torch, or each a new interpreter)."""
    env = os.environ if env is None else env
    if workers == "exec":
        return "ok", "each a new interpreter ([eval] workers = exec)", ""
    try:
        active = resolve_mode(sandbox, env)
    except SandboxError as error:
        return "warn", f"each a new interpreter: {error}", HOW_TO_GET_BWRAP
    blocker = fork_blocker(active)
    if blocker:
        return "warn", f"each a new interpreter: {blocker}", "a kernel with Landlock ABI 6 (Linux 6.12+)"
    apart = "each confined to its own job folder by Landlock" if active != "off" else "no sandbox"
    return "ok", f"CPU and CUDA workers forked from one server that imported torch once ({apart})", ""


def _landlock_blocks_cuda(env: Mapping[str, str]) -> str | None:
    """Whether CUDA starts under the Landlock rules a worker would get here (None: it does, or there is no CUDA)."""
    import shutil
    import tempfile
    from pathlib import Path

    from engine.sandbox import cudaprobe
    from engine.sandbox.select import prepare

    scratch = Path(tempfile.mkdtemp(prefix="cudaforge-doctor-"))
    try:
        launch = prepare("landlock", ["true"], job_dir=scratch / "job", writable=[scratch], parent_env=env)
        return cudaprobe.landlock_blocks_cuda(launch.env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
