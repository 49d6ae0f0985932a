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
) -> list[str]:
    """The argv that runs ``command`` under bwrap with ``env`` as its whole environment.

    Mount order matters (later mounts cover earlier ones): the read-only root, then tmpfs over
    ``hidden`` (home, sessions, cwd), then ``keep_readable`` bound back read-only where it lies
    below a hidden folder, then the ``writable`` folders.
    """
    hidden_dirs = [d for d in _existing_dirs(hidden) if d != Path("/tmp")]
    writable_dirs = _existing_dirs(writable)
    argv = [bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # A hidden folder that contains a needed one (the venv under $HOME) is still hidden; the needed
    # one is bound back below. A hidden folder inside a writable one (a cwd inside the job dir) is not.
    for folder in sorted(hidden_dirs, key=lambda p: len(p.parts)):
        if not any(folder == w or w in folder.parents for w in writable_dirs):
            argv += ["--tmpfs", str(folder)]
    for folder in _existing_dirs(keep_readable):
        if _below(folder, hidden_dirs) or _below(folder, [Path("/tmp")]):
            argv += ["--ro-bind", str(folder), str(folder)]
    for folder in writable_dirs:
        argv += ["--bind", str(folder), str(folder)]
    argv += _namespace_flags()
    argv += ["--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    argv += ["--chdir", str(chdir), "--", *command]
    return argv
