"""bubblewrap: the worker in its own mount, pid, network, IPC and UTS namespaces.

The whole file system is visible read-only (the toolchain, CUDA, the Python environment), with
``/dev`` passed through for the GPU. Writable: the job directory, the build cache and a private
``/tmp``. Hidden behind empty tmpfs: the user's home (``~/.ssh``, ``~/.config``, ``~/.netrc``, cloud
credentials), the sessions root and the working directory; the Python environment and cudaforge
itself are bound back read-only when they live below one of those. ``--die-with-parent`` and the
pid namespace mean that nothing the candidate starts outlives the worker, and ``kill(getppid())``
reaches only bwrap's own init inside the namespace.

bwrap is found as ``$CUDAFORGE_BWRAP`` (a binary unpacked from the Debian package with ``dpkg -x``
on machines without it installed), else on ``PATH``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

BWRAP_ENV = "CUDAFORGE_BWRAP"
# Never hidden, nor anything inside them (a cwd of /usr/local would otherwise hide the toolchain).
SYSTEM_DIRS = tuple(
    Path(p)
    for p in (
        "/usr",
        "/lib",
        "/lib32",
        "/lib64",
        "/bin",
        "/sbin",
        "/etc",
        "/opt",
        "/var",
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/snap",
        "/nix",
        "/boot",
    )
)
# Always hidden when present: other users' homes and the machine's own secrets.
ALWAYS_HIDDEN_DIRS = ("/home", "/root", "/etc/ssh", "/etc/sudoers.d")
ALWAYS_HIDDEN_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")


def find_bwrap(env: Mapping[str, str] | None = None) -> str | None:
    """``$CUDAFORGE_BWRAP`` when it names an executable, else ``bwrap`` on PATH, else None."""
    env = os.environ if env is None else env
    explicit = env.get(BWRAP_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("bwrap", path=env.get("PATH"))


@functools.lru_cache(maxsize=4)
def probe(bwrap: str) -> str | None:
    """None when bwrap can start the namespaces we use here, else why not (its own error)."""
    try:
        done = subprocess.run(
            [bwrap, *_namespace_flags(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")


def _namespace_flags() -> list[str]:
    return [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        # Run as root, bwrap would keep every capability: CAP_SYS_ADMIN alone could unmount the tmpfs
        # over the home folder or remount / read-write. Measured: as root without this, CapEff was full.
        "--cap-drop",
        "ALL",
    ]


def _existing_dirs(paths: Iterable[Path | str | None]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        if not path:
            continue
        try:
            resolved = Path(path).resolve()
            is_dir = resolved.is_dir()
        except OSError:  # a folder this user may not look into is not one the sandbox can bind
            continue
        if is_dir and resolved != Path("/") and resolved not in seen:
            seen.append(resolved)
    return seen


def _touches_system(folder: Path) -> bool:
    """True when hiding ``folder`` would hide (part of) the system: it is, contains or lies in one."""
    return any(folder == s or s in folder.parents or folder in s.parents for s in SYSTEM_DIRS)


def _below(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def bwrap_command(
    bwrap: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    writable: Iterable[Path | str],
    hidden: Iterable[Path | str | None],
    keep_readable: Iterable[Path | str | None],
    chdir: Path | str,
    outlive_parent: bool = False,
) -> list[str]:
    """The argv that runs ``command`` under bwrap with ``env`` as its whole environment.

    ``outlive_parent``: without ``--die-with-parent``, for a program meant to outlive the command that
    started it (a kept fork server, engine.eval.keptserver); everything else dies with its starter.

    Mount order matters (later mounts cover earlier ones): the read-only root, then tmpfs over
    ``hidden`` (home, sessions, cwd), then ``keep_readable`` bound back read-only where it lies
    below a hidden folder, then the ``writable`` folders.
    """
    hidden_dirs = [
        d
        for d in _existing_dirs([*ALWAYS_HIDDEN_DIRS, *hidden])
        if d != Path("/tmp") and (str(d).startswith("/etc/") or not _touches_system(d))
    ]
    writable_dirs = _existing_dirs(writable)
    argv = [bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # A hidden folder that contains a needed one (the venv under $HOME) is still hidden; the needed
    # one is bound back below. A hidden folder inside a writable one (a cwd inside the job dir) is not.
    for folder in sorted(hidden_dirs, key=lambda p: len(p.parts)):
        if not any(folder == w or w in folder.parents for w in writable_dirs):
            argv += ["--tmpfs", str(folder)]
    for name in ALWAYS_HIDDEN_FILES:
        if os.path.isfile(name):
            argv += ["--ro-bind", "/dev/null", name]
    # A folder this user cannot enter (root's pyenv seen by an ordinary user) is not bound: the
    # candidate could not read it either, and bwrap would refuse to start over it.
    readable = [d for d in _existing_dirs(keep_readable) if os.access(d, os.R_OK | os.X_OK)]
    for folder in readable:
        if any(other in folder.parents for other in readable):
            continue  # its parent is bound already
        if _below(folder, hidden_dirs) or _below(folder, [Path("/tmp")]):
            argv += ["--ro-bind", str(folder), str(folder)]
    for folder in writable_dirs:
        argv += ["--bind", str(folder), str(folder)]
    argv += [flag for flag in _namespace_flags() if not (outlive_parent and flag == "--die-with-parent")]
    argv += ["--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    argv += ["--chdir", str(chdir), "--", *command]
    return argv
