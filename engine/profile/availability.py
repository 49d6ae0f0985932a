"""Can this machine profile with ncu, and if a run failed, why? Each answer carries how to fix it.

Why it matters: profiling is optional feedback. When it is unavailable the loop must go on with the
fallback (PyTorch profiler + roofline estimate) and say so, and `cudaforge doctor` must tell the human the
exact reason and remedy instead of a raw ncu error.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

Reason = Literal["no-ncu", "no-permission", "timeout", "no-kernels-profiled", "error"]

PERMISSION_DOC = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"

FIX_NO_NCU = (
    "Install Nsight Compute (it ships with the CUDA toolkit as `ncu`, or as the nsight-compute package), then "
    "put it on PATH or set CUDA_HOME so that $CUDA_HOME/bin/ncu exists."
)
FIX_PERMISSION = (
    "GPU performance counters are restricted to admin users. Either run as root (or with CAP_SYS_ADMIN), or "
    "allow all users: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in a file under "
    f"/etc/modprobe.d/, rebuild the initramfs if the driver loads early, and reboot. See {PERMISSION_DOC}"
)
FIX_TIMEOUT = (
    "Profiling took longer than the limit. Profile fewer launches (a smaller launch count or a tighter "
    "kernel-name filter), use the 'small' metric set, or raise the profile timeout in the config."
)
FIX_NO_KERNELS = (
    "ncu ran but no kernel matched. Check that the candidate launches its own __global__ kernels inside "
    "the profiled forward call (not only PyTorch ops), and that the kernel-name filter and NVTX range match."
)
FIX_ERROR = "See the ncu output above; run `cudaforge doctor` to check the ncu installation and permissions."


@dataclass(frozen=True)
class ProfileUnavailable:
    """Why hardware-counter feedback is missing, in words for the human and the Judge."""

    reason: Reason
    message: str
    how_to_fix: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileUnavailable:
        return cls(reason=data["reason"], message=data["message"], how_to_fix=data["how_to_fix"])


def no_ncu(detail: str = "") -> ProfileUnavailable:
    msg = "Nsight Compute (ncu) was not found on this machine"
    return ProfileUnavailable("no-ncu", f"{msg}{': ' + detail if detail else ''}", FIX_NO_NCU)


def _error_lines(text: str, limit: int = 6) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("==ERROR==")]
    return "\n".join((errors or lines)[-limit:])


def classify_ncu_failure(
    returncode: int | None, stdout: str, stderr: str, *, timed_out: bool = False
) -> ProfileUnavailable | None:
    """None when the ncu run produced results; otherwise the reason.

    `returncode` None means the process could not be started at all (the executable is missing).
    ncu reports "No kernels were profiled" as a warning with exit code 0, so the text is checked even
    when the exit code is 0.
    """
    text = f"{stdout}\n{stderr}"
    if timed_out or returncode == 124:
        return ProfileUnavailable("timeout", "ncu did not finish within the time limit", FIX_TIMEOUT)
    if returncode is None or returncode == 127:  # 127: the shell's "command not found"
        return no_ncu("the ncu executable could not be started")
    if "ERR_NVGPUCTRPERM" in text or "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in text:
        return ProfileUnavailable(
            "no-permission",
            "The user does not have permission to access NVIDIA GPU Performance Counters (ERR_NVGPUCTRPERM)",
            FIX_PERMISSION,
        )
    if re.search(r"==WARNING==\s+No kernels were profiled", text):
        return ProfileUnavailable("no-kernels-profiled", "ncu ran but profiled no kernels", FIX_NO_KERNELS)
    if returncode != 0:
        detail = _error_lines(text) or "(no output)"
        return ProfileUnavailable("error", f"ncu exited with code {returncode}:\n{detail}", FIX_ERROR)
    return None


def find_ncu(
    environ: Mapping[str, str] | None = None,
    *,
    default_dirs: tuple[str, ...] = ("/usr/local/cuda/bin",),
    install_globs: tuple[str, ...] = ("/opt/nvidia/nsight-compute/*/ncu",),
) -> str | None:
    """Path of the ncu executable: PATH, then $CUDA_HOME/bin (and $CUDA_PATH), /usr/local/cuda/bin, then the
    standalone installs under /opt/nvidia/nsight-compute/<version>/ (newest version first)."""
    env = os.environ if environ is None else environ
    found = shutil.which("ncu", path=env.get("PATH", ""))
    if found:
        return found
    dirs = [str(Path(env[v]) / "bin") for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)]
    for d in (*dirs, *default_dirs):
        candidate = Path(d) / "ncu"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    for pattern in install_globs:
        hits = [h for h in glob.glob(pattern) if os.access(h, os.X_OK)]
        if hits:
            return max(hits, key=_version_key)
    return None


def _version_key(path: str) -> tuple[int, ...]:
    """Sort key for .../nsight-compute/2025.3.1/ncu by its version numbers."""
    return tuple(int(n) for n in re.findall(r"\d+", Path(path).parent.name)) or (0,)


CounterStatus = Literal["ok", "restricted", "unknown"]


def counters_permission_status(
    params_path: str | Path = "/proc/driver/nvidia/params", euid: int | None = None
) -> tuple[CounterStatus, str]:
    """Whether this user may read GPU performance counters, from the driver's `RmProfilingAdminOnly` flag.

    `RmProfilingAdminOnly: 1` means only admin users (root / CAP_SYS_ADMIN) may profile. The file exists only
    where the NVIDIA kernel driver is loaded (not in every container), hence "unknown".
    """
    uid = os.geteuid() if euid is None else euid
    try:
        text = Path(params_path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return "unknown", f"cannot read {params_path} ({exc.strerror or exc}); no NVIDIA driver visible here?"
    m = re.search(r"^\s*RmProfilingAdminOnly\s*:\s*(\d+)", text, flags=re.M)
    if not m:
        return "unknown", f"{params_path} has no RmProfilingAdminOnly entry"
    if m.group(1) == "0":
        return "ok", "GPU performance counters are open to all users (RmProfilingAdminOnly: 0)"
    if uid == 0:
        return (
            "ok",
            "counters are restricted to admin users (RmProfilingAdminOnly: 1) and this process is root",
        )
    return "restricted", (
        f"counters are restricted to admin users (RmProfilingAdminOnly: 1) and this process runs as uid {uid}"
    )


def check_profiling_available(
    environ: Mapping[str, str] | None = None,
    params_path: str | Path = "/proc/driver/nvidia/params",
    euid: int | None = None,
) -> tuple[str | None, ProfileUnavailable | None]:
    """For `cudaforge doctor` and the loop: (ncu path, None) when profiling should work, else (path, reason).

    Only a definite "restricted" blocks: "unknown" (no /proc entry, e.g. inside a container) lets ncu try,
    since the real answer then comes from ncu itself.
    """
    path = find_ncu(environ)
    if path is None:
        return None, no_ncu(
            "not on PATH, not in $CUDA_HOME/bin, /usr/local/cuda/bin or /opt/nvidia/nsight-compute"
        )
    status, detail = counters_permission_status(params_path, euid)
    if status == "restricted":
        return path, ProfileUnavailable("no-permission", detail, FIX_PERMISSION)
    return path, None
