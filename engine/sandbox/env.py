"""The worker's environment, built from an allow-list rather than copied from the user's.

Only what a build and a run need passes: the path, CUDA/compiler/torch settings, locale. API keys,
tokens, cloud credentials and everything else the user has exported never reach candidate code.
HOME points to a private folder in the job directory, so ``~`` leads nowhere interesting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "CUDAFORGE_BUILD_SPLIT",  # a build setting (stock vs split), never a secret
        "CUDAFORGE_OBJECT_CACHE",  # a build setting (objects reused across builds or not), never a secret
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_MODULE_LOADING",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_CACHE_DISABLE",
        "CC",
        "CXX",
        "CFLAGS",
        "CXXFLAGS",
        "LDFLAGS",
        "NVCC_APPEND_FLAGS",
        "NVCC_PREPEND_FLAGS",
        "LD_LIBRARY_PATH",
        "LIBRARY_PATH",
        "CPATH",
        "MAX_JOBS",
        "TORCH_CUDA_ARCH_LIST",
        "TORCH_EXTENSIONS_DIR",
        "TORCH_DONT_CHECK_COMPILER_ABI",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "CUDAFORGE_CACHE_DIR",
    }
)
ALLOWED_PREFIXES = ("LC_", "NVIDIA_", "NCCL_", "CUDAFORGE_TEST_")
# Belt and braces: a name that looks like a credential is dropped even if a rule above let it through.
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|SESSION)", re.I)
SECRET_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "GCP_", "OPENAI_", "ANTHROPIC_", "HF_", "GITHUB_", "SSH_")


def is_allowed(name: str) -> bool:
    """True when the variable may reach candidate code."""
    if SECRET_NAME.search(name) or name.startswith(SECRET_PREFIXES):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def worker_env(
    parent: Mapping[str, str], home: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allow-listed part of ``parent``, a private ``HOME`` and the engine's own ``extra`` settings."""
    env = {name: value for name, value in parent.items() if is_allowed(name)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["TMPDIR"] = "/tmp"
    env.update(extra or {})
    return env
