"""Which built libraries a reference may load from the shared build cache (ARCHITECTURE.md §3, "Builds").

Why: every candidate's worker may write the build cache, so a library found there may have been
rewritten by a kernel that gains from it: a candidate slowing down the best kernel it is re-timed
against (engine.loop.duel) would win that re-timing. A reference's library is therefore loaded from the
cache only when its bytes are the very bytes an earlier evaluation ran, as recorded by the evaluating
process outside the sandbox (``seal``, into ``ExtensionBuild.digest``), and it is loaded from a private
copy of the bytes that were checked, without a build (``load_inline``'s own path could relink or
version the name and load another file); otherwise the reference builds in a folder of its own, as a
plain ``load_inline`` would.

Reading a file the sandbox could write is done with care: no symlink is followed, only a regular file
is read, and one larger than ``MAX_LIBRARY_BYTES`` gets no digest (a FIFO or a huge file must not hang or
flood the evaluating process).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

MAX_LIBRARY_BYTES = 1 << 30
LIBRARY_SUFFIX = ".so"


class UntrustedLibrary(BaseException):  # noqa: N818 - raised past the candidate-facing ``except Exception``s
    """A cached library a reference may not load: not recorded, or changed since it was."""


def library_path(build_dir: str | Path, name: str) -> Path:
    """Where torch puts the library of extension ``name`` built in ``build_dir``."""
    return Path(build_dir) / f"{name}{LIBRARY_SUFFIX}"


@contextlib.contextmanager
def _regular_file(path: str | Path) -> Iterator[BinaryIO | None]:
    """The regular file at ``path``, opened without following a symlink; None when there is none, it is
    something else, or it is larger than ``MAX_LIBRARY_BYTES``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        yield handle if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_LIBRARY_BYTES else None


def library_bytes(path: str | Path) -> bytes | None:
    """The bytes of the regular file at ``path`` (see :func:`_regular_file`), or None."""
    try:
        with _regular_file(path) as handle:
            return handle.read(MAX_LIBRARY_BYTES) if handle is not None else None
    except OSError:
        return None


def library_digest(path: str | Path) -> str | None:
    """sha256 of the regular file at ``path``, read in blocks (the evaluating process seals every build);
    None as :func:`library_bytes`."""
    try:
        with _regular_file(path) as handle:
            if handle is None:
                return None
            digest = hashlib.sha256()
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
            return digest.hexdigest()
    except OSError:
        return None


def seal(extensions: Iterable[Any]) -> None:
    """Each built extension's ``digest``, read here by the evaluating process (whatever the worker said)."""
    for ext in extensions:
        ext.digest = library_digest(library_path(ext.build_dir, ext.name)) if ext.ok else None


def trusted_libraries(eval_result: Mapping[str, Any] | None) -> dict[str, str]:
    """{library path: digest} of a recorded evaluation's sealed builds (``eval.json``'s ``build``)."""
    build = (eval_result or {}).get("build") or {}
    found: dict[str, str] = {}
    for ext in build.get("extensions") or []:
        digest, name, folder = ext.get("digest"), ext.get("name"), ext.get("build_dir")
        if ext.get("ok", True) and isinstance(digest, str) and isinstance(name, str) and isinstance(folder, str):
            found[str(library_path(folder, name))] = digest
    return found


def load_trusted(trusted: Mapping[str, str], build_dir: str | Path, name: str, into: Path) -> Any:
    """The extension module of the library in ``build_dir``, imported from a copy in ``into`` of the very
    bytes whose digest was checked (no build, no window in which the cached file could change between
    the check and the load); :class:`UntrustedLibrary` unless those bytes are the recorded ones."""
    import importlib.util

    path = library_path(build_dir, name)
    expected = trusted.get(str(path))
    if expected is None:
        raise UntrustedLibrary(f"{path} was not built by an evaluation on record")
    data = library_bytes(path)
    if data is None or hashlib.sha256(data).hexdigest() != expected:
        raise UntrustedLibrary(f"{path} changed since its evaluation recorded it")
    folder = into / expected[:16]
    folder.mkdir(parents=True, exist_ok=True)
    copy = library_path(folder, name)
    copy.write_bytes(data)
    spec = importlib.util.spec_from_file_location(name, copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
