"""Landlock: the fallback where bubblewrap cannot start (no user namespaces, e.g. some containers).

Applied in-process by the worker (``apply_from_env``) after its own imports and before it reads any
candidate code; the rules hold for the process and everything it starts, and cannot be lifted.
- files: read and execute only below the system folders, the Python environment, cudaforge and the
  build/job folders (so ``$HOME``, the sessions and the working directory are unreadable), and of
  ``/proc`` only the confined process's own entry and machine-wide files (``PROC_READ``); write only
  to the job folder, the build cache and ``/dev`` (the GPU's device files), plus *writing* (no
  creating or deleting; opening with ``O_TRUNC`` as ``fopen(…, "w")`` does) the files of the confined
  process's own threads,
  ``/proc/<own pid>/task``: CUDA's start-up names its threads through
  ``/proc/self/task/<tid>/comm`` and ``cuInit`` fails with error 304 when that write is refused
  (traced on the H200 by ``benchmarks/landlock_cuda.py``; nothing else under ``/proc`` is needed).
  The rule is resolved in the process that applies it, so it names that process and no other; a
  child gets no write right to its own ``/proc`` entry;
- network (ABI 4+): no TCP bind or connect;
- scopes (ABI 6+): no signals to processes outside the sandbox (``kill(getppid())`` fails with EPERM)
  and no connect to abstract unix sockets outside it.
Not covered, unlike bwrap: UDP and named unix sockets, and a ``setsid`` daemon of a worker started
anew is not tied to the run (the engine kills the worker's process group, which a new session leaves;
a forked worker's init, engine.eval.zygote, ends what it leaves behind).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import platform
import sys
from collections.abc import Iterable
from pathlib import Path

LANDLOCK_ENV = "CUDAFORGE_LANDLOCK"  # JSON {"read": [...], "write": [...], "write_files": [...]} set by the engine
# Resolved by the process that applies the rules (``/proc/self`` is that process): its threads' files.
OWN_THREADS = "/proc/self/task"
_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ_ACCESS = EXECUTE | READ_FILE | READ_DIR
# What of /proc a confined process may read: its own entry (``/proc/self`` is resolved by the process that
# applies the rules, so it names that process alone) and the machine-wide files the toolchain and CUDA's
# start-up read. Never another process's entry: Landlock refuses a ptrace *attach* outside the domain but
# not a ptrace *read*, so with all of /proc readable a worker read ``/proc/<pid>/environ`` of the process
# that started it, API keys included (tests/fixtures/escape/proc_environ.py).
PROC_READ = (
    "/proc/self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/devices",
    "/proc/sys",
    "/proc/driver",
)
SYSTEM_READ = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/sys",
    "/dev",
    "/run",
    "/var/lib",
    "/snap",
)


class LandlockError(OSError):
    """Landlock is not available or could not be applied."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _numbers() -> tuple[int, int, int]:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise LandlockError(f"Landlock syscalls not known for {platform.machine()}")
    return numbers


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or it is disabled at boot)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        create, _, _ = _numbers()
    except LandlockError:
        return 0
    version = _libc().syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def _fs_access(abi: int) -> int:
    access = (1 << 13) - 1
    if abi >= 2:
        access |= REFER
    if abi >= 3:
        access |= TRUNCATE
    if abi >= 5:
        access |= IOCTL_DEV
    return access


def restrict(read: Iterable[str], write: Iterable[str], write_files: Iterable[str] = ()) -> int:
    """Confine this process (and its future children) for good; returns the ABI version used.

    ``read``: read and execute beneath; ``write``: every file right beneath; ``write_files``: only
    writing (and truncating) existing files beneath (paths are opened here, so ``/proc/self`` means
    this process).
    """
    abi = abi_version()
    if abi < 1:
        raise LandlockError("this kernel has no Landlock (needs Linux 5.13+ with landlock in the LSM list)")
    create, add_rule, restrict_self = _numbers()
    libc = _libc()
    handled = _fs_access(abi)
    attr = _RulesetAttr(
        handled,
        NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
        SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if abi >= 6 else 0,
    )
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise LandlockError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for paths, access in ((read, READ_ACCESS), (write, handled), (write_files, WRITE_FILE | TRUNCATE)):
            for path in paths:
                _add_path(libc, add_rule, ruleset, path, access & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(restrict_self, ruleset, ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _add_path(libc: ctypes.CDLL, add_rule: int, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a folder this machine does not have
    try:
        if not os.path.isdir(path):
            access &= WRITE_FILE | READ_FILE | EXECUTE | TRUNCATE | IOCTL_DEV
        rule = _PathBeneathAttr(access, fd)
        if libc.syscall(add_rule, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)


def rules_for(readable: Iterable[Path | str | None], writable: Iterable[Path | str]) -> dict[str, list[str]]:
    """The JSON the engine hands the worker in ``$CUDAFORGE_LANDLOCK``."""
    write = [str(Path(p).resolve()) for p in writable]
    read = [*SYSTEM_READ, *PROC_READ, *(str(Path(p).resolve()) for p in readable if p)]
    return {"read": read, "write": [*write, "/dev"], "write_files": [OWN_THREADS]}


def apply_from_env() -> int | None:
    """Apply the rules the engine passed, if any (called by the worker before candidate code runs)."""
    text = os.environ.pop(LANDLOCK_ENV, None)
    if not text:
        return None
    rules = json.loads(text)
    return restrict(rules["read"], rules["write"], rules.get("write_files", ()))
