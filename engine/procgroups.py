"""The processes cudaforge starts, and killing one with everything under it (ARCHITECTURE.md §4).

Every evaluation worker, header maker and ncu run starts in a process group of its own, yet one
``killpg`` of that group is not enough: ninja runs each compile command in a process group of *its*
own, so the ``sh``/``c++``/``cc1plus`` under a killed worker went on compiling (a stock CUDA build's
cc1plus ran about 25 s after cudaforge had left). :func:`kill_tree` stops the group, reads every
descendant from ``/proc`` while their parents still hold them, then SIGKILLs all of them and their
groups. A second Ctrl-C (or a second ``ctrl+q``) leaves with ``os._exit``, which runs no cleanup:
whoever starts such a process :func:`track`\\ s it, and :func:`kill_all` is the last thing done first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import weakref
from pathlib import Path

_TRACKED: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()
_LOCK = threading.Lock()


def track(process: subprocess.Popen) -> subprocess.Popen:
    """Remember ``process``, a group leader (started with ``start_new_session=True``); returns it. The
    record goes with the Popen object, so nothing is kept once its owner lets it go."""
    with _LOCK:
        _TRACKED.add(process)
    return process


def descendants(root: int) -> list[int]:
    """Every live process under ``root`` (children, theirs, ...), read from ``/proc``; [] elsewhere."""
    parents: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    stat = (entry / "stat").read_text()
                    parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found: list[int] = []
    frontier = {root}
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found.extend(sorted(children))
        frontier = children
    return found


def _signal(kill: object, target: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        kill(target, sig)  # type: ignore[operator]


def kill_tree(leader: int) -> None:
    """SIGKILL ``leader``'s process group and every process under it, with their own groups, and
    ``leader`` itself (which may lead no group: a server under bwrap, whose session is bwrap's). The
    group and the leader are stopped first, so nothing starts another process between the reading and
    the killing. ``leader`` must be the caller's own unreaped child, or known alive, never a pid that
    may have been reused."""
    _signal(os.killpg, leader, signal.SIGSTOP)
    _signal(os.kill, leader, signal.SIGSTOP)
    under = descendants(leader)
    groups = {leader}
    for pid in under:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgid(0))  # never cudaforge's own group
    for group in groups:
        _signal(os.killpg, group, signal.SIGKILL)
    for pid in [leader, *under]:
        _signal(os.kill, pid, signal.SIGKILL)


def kill_all() -> int:
    """:func:`kill_tree` for every tracked process not yet reaped (a reaped leader's id may be another
    process's by now); the number killed."""
    with _LOCK:
        leaders = [p for p in _TRACKED if p.returncode is None]
    for process in leaders:
        kill_tree(process.pid)
    return len(leaders)
