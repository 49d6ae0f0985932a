"""cudaforge's own precompiled ``torch/extension.h``, so a candidate's C++ binding compiles in seconds.

Parsing torch's headers is what a build spends its time on: g++ needs ~19 s for a binding file on
the H200 machine and ~25 s on a 2-core one; with a precompiled header far less. torch's own
``use_pch`` keeps one header inside torch's install tree, rebuilds it whenever the flags change and
deletes it whenever any build runs without it, so concurrent evaluations would thrash it. Here
each distinct flag set gets its own header under the cache, made once in the background after the
first build that uses those flags (with that build's exact compiler command, read from its
``build.ninja``), and published by an atomic rename. Later builds put its folder first on the
include path: g++ looks for ``torch/extension.h.gch`` beside the ``torch/extension.h`` it finds
there and uses it when it is valid for the flags (``-Winvalid-pch`` says in the log when not).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

STALE_MAKING_S = 1800.0  # a "making" marker this old belongs to a maker that was killed
MAX_HEADER_SETS = 3  # each precompiled header is ~0.7 GB; flag sets beyond this build without one
# A full store gives up the set used least recently, once it has gone this long unused (a build may be
# compiling against a set right now: one in use within the hour is never removed).
EVICT_UNUSED_S = 3600.0
# Written into each set made since its key named the torch install: a set without it comes from an older
# cudaforge, whose key no build asks for any more, so it would only fill the store (seen after an upgrade:
# three such sets, no new header ever made, every build cold).
FORMAT_MARKER = "format-2"
_FIRST_INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"]([^>\"]+)[>\"]", re.M)
_EXTENSION_NAME = re.compile(r"\s-DTORCH_EXTENSION_NAME=\S+")


def first_include(cpp_text: str, implicit_headers: bool) -> str | None:
    """The header the binding's translation unit includes first (what a PCH can stand in for)."""
    if implicit_headers:
        return "torch/extension.h"  # load_inline prepends it
    match = _FIRST_INCLUDE.search(re.sub(r"//[^\n]*|/\*.*?\*/", "", cpp_text, flags=re.S))
    return match.group(1) if match else None


def _words(flags: Any) -> list[str]:
    """The flags as the compiler sees them: ``extra_cflags=['']`` (233 of the 413 leaderboard kernels pass
    it) adds no word to the command, so it shares the flag-less header instead of taking a set of its own."""
    if isinstance(flags, str):
        flags = [flags]
    return [str(f) for f in flags or [] if str(f).strip()]


def header_key(call_kwargs: dict[str, Any], with_cuda: bool) -> str:
    """What the header depends on: the toolchain, torch (its version and where it is installed: a header
    made by a deleted virtualenv includes that venv's ``torch/extension.h`` by absolute path), Python's
    headers, and the flags the candidate passed."""
    import sysconfig

    import torch
    import torch.utils.cpp_extension as cpp_extension

    payload = {
        "torch": torch.__version__,
        "torch_include": str(Path(cpp_extension.include_paths()[0]).resolve()),
        "python_include": sysconfig.get_paths().get("include", ""),
        "cxx": os.environ.get("CXX", ""),
        "python": sys.version_info[:2],
        "extra_cflags": _words(call_kwargs.get("extra_cflags")),
        # Not normalised: torch turns an empty include path into -I<cwd>, a folder of its own.
        "extra_include_paths": call_kwargs.get("extra_include_paths") or [],
        "with_cuda": with_cuda,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


class HeaderStore:
    """Precompiled headers under ``<cache>/pch/<key>/torch/extension.h.gch``."""

    def __init__(self, cache_root: Path) -> None:
        self.root = cache_root / "pch"

    def folder(self, key: str) -> Path:
        return self.root / key

    def ready(self, key: str) -> bool:
        """A made header whose stub still leads to a torch header that exists."""
        torch_dir = self.folder(key) / "torch"
        if not (torch_dir / "extension.h.gch").is_file():
            return False
        try:
            target = re.match(r'#include "(.*)"', (torch_dir / "extension.h").read_text())
        except OSError:
            return False
        return bool(target) and Path(target.group(1)).is_file()

    def set_aside(self, key: str, why: str) -> None:
        """A build that used this set failed outside the candidate's code and built without it: the header
        is renamed out of the way with why beside it (``failed.log``), so no build uses it and the next one
        asks for it anew.
        Seen on the H100 (sessions 24 and 25): a stock build's ``main.cpp`` read torch's pybind11 macros as
        garbage from a header another build had just used correctly; the cause is not known."""
        torch_dir = self.folder(key) / "torch"
        with contextlib.suppress(OSError):
            (torch_dir / "extension.h.gch").rename(torch_dir / "extension.h.gch.failed")
        with contextlib.suppress(OSError):
            (self.folder(key) / "failed.log").write_text(why)

    def mark_used(self, key: str) -> None:
        """A build compiles against this set now (its ``used`` time keeps it from eviction)."""
        with contextlib.suppress(OSError):  # a read-only store: the set is still used, it cannot say so
            (self.folder(key) / "used").touch()

    def _last_used(self, folder: Path) -> float:
        for marker in (folder / "used", folder / "torch" / "extension.h.gch", folder):
            try:
                return marker.stat().st_mtime
            except OSError:
                continue
        return 0.0

    def prune_dead(self) -> list[str]:
        """Remove made headers that no build will use: their torch is gone (a recreated virtualenv) or
        they come from an older cudaforge's keys (no format marker); the keys removed."""
        import shutil

        dead = [
            p.name
            for p in self.root.glob("*")
            if (p / "torch" / "extension.h.gch").is_file()
            and (not self.ready(p.name) or not (p / FORMAT_MARKER).exists())
        ]
        for key in dead:
            shutil.rmtree(self.folder(key), ignore_errors=True)
        return dead

    def evict_unused(self, keep: int) -> list[str]:
        """While more than ``keep`` sets exist, remove the least recently used one unused for an hour."""
        import shutil
        import time

        sets = sorted((p for p in self.root.glob("*") if p.is_dir()), key=self._last_used)
        removed: list[str] = []
        for folder in sets:
            if len(sets) - len(removed) <= keep:
                break
            if time.time() - self._last_used(folder) < EVICT_UNUSED_S or (folder / "making").exists():
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
        return removed

    def queue(self, key: str, build_dir: Path) -> bool:
        """Ask for the header of ``key``, made from ``build_dir``'s compile command: the command is written
        beside a ``queued`` marker, and the evaluating process makes it once the verdict is in
        (engine.eval.build.makers). The worker never waits for it."""
        if self.ready(key) or _making_recently(self.folder(key) / "making"):
            return False
        self.prune_dead()
        self.evict_unused(MAX_HEADER_SETS - 1)
        if len([p for p in self.root.glob("*") if p.is_dir() and p.name != key]) >= MAX_HEADER_SETS:
            return False  # (a set asked for before and never made is asked for again, not counted twice)
        command = _header_command(build_dir, self.folder(key))
        if command is None:
            return False
        folder = self.folder(key)
        with contextlib.suppress(OSError):  # the claim of a maker that is gone: the next process may start it
            (folder / CLAIM).unlink()
        (folder / "torch").mkdir(parents=True, exist_ok=True)
        (folder / FORMAT_MARKER).touch()
        tmp, target = (shlex.quote(str(folder / "torch" / n)) for n in ("extension.h.gch.tmp", "extension.h.gch"))
        done = " ".join(shlex.quote(str(folder / n)) for n in ("making", CLAIM))
        script = f"{command} -o {tmp} && mv {tmp} {target}\nstatus=$?\nrm -f {tmp} {done}\nexit $status\n"
        (folder / MAKE_SCRIPT).write_text(script)
        (folder / "making").write_text(QUEUED)
        return True

    def pending(self, key: str) -> bool:
        """A header for ``key`` is asked for or being made (by this evaluation or another)."""
        return not self.ready(key) and _making_recently(self.folder(key) / "making")

    def queued(self) -> list[str]:
        """Keys whose header is asked for and not being made by anyone yet."""
        found = []
        for marker in self.root.glob("*/making"):
            try:
                if marker.read_text().startswith(QUEUED) and not (marker.parent / CLAIM).exists():
                    found.append(marker.parent.name)
            except OSError:
                continue
        return found


# A header asked for by a worker (``queue``) and not yet started; the process that starts it claims it
# with CLAIM (created exclusively), so two cudaforge processes sharing a cache make it once.
QUEUED = "queued"
CLAIM = "maker.claim"
MAKE_SCRIPT = "make.sh"
QUEUED_STALE_S = 900.0  # asked for and never started this long: its evaluating process is gone


def _making_recently(marker: Path) -> bool:
    """True while a header is being made or asked for; a marker left by a killed maker goes stale, at once
    when it names a process of this host that is gone (``makers.making_marker``)."""
    import time

    try:
        age = time.time() - marker.stat().st_mtime
        text = marker.read_text()
        queued = text.startswith(QUEUED) and not (marker.parent / CLAIM).exists()
    except OSError:
        return False
    if not queued and _maker_gone(text):
        return False
    return age < (QUEUED_STALE_S if queued else STALE_MAKING_S)


def making_marker(pid: int) -> str:
    """What a started maker's ``making`` marker says (engine.eval.build.makers): its pid and this host, so
    that a maker killed before its script could clean up is seen as gone instead of blocking its header
    for half an hour."""
    import socket

    return f"making {pid} {socket.gethostname()}"


def _maker_gone(text: str) -> bool:
    """The marker says ``making PID HOST`` (``making_marker``), HOST is this machine and no process PID
    exists any more."""
    import socket

    words = text.split()
    if len(words) != 3 or words[0] != "making" or not words[1].isdigit() or words[2] != socket.gethostname():
        return False  # an older marker, or a maker on another machine sharing the cache: trust its age
    try:
        os.kill(int(words[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, owned by someone else
        return False
    return False


def _header_command(build_dir: Path, folder: Path) -> str | None:
    """The compile command of the build's C++ file, turned into one that precompiles our stub header."""
    import torch.utils.cpp_extension as cpp_extension

    try:
        ninja = (build_dir / "build.ninja").read_text()
    except OSError:
        return None
    values = dict(re.findall(r"^(cxx|cflags|post_cflags)[ \t]*=[ \t]*(.*)$", ninja, flags=re.M))
    if "cxx" not in values or "cflags" not in values:
        return None
    real = Path(cpp_extension.include_paths()[0]) / "torch" / "extension.h"
    stub = folder / "torch" / "extension.h"
    stub.parent.mkdir(parents=True, exist_ok=True)
    stub.write_text(f'#include "{real}"\n')
    flags = (
        _EXTENSION_NAME.sub("", " " + values["cflags"])
        + " "
        + _EXTENSION_NAME.sub("", " " + values.get("post_cflags", ""))
    )
    return f"{values['cxx']} -x c++-header {shlex.quote(str(stub))} {flags.strip()}"
