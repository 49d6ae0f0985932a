"""Which launched kernels are the candidate's own, from its built binary (ARCHITECTURE.md §4).

A kernel counts as the candidate's only when it was compiled into one of the candidate's extensions: for
every ``__global__`` function nvcc emits a host-side stub with the kernel's own (mangled) name, so the
extension's symbol table lists every kernel it can launch. Matching the profiler's kernel names against
the ``__global__`` names *written in the source* is not evidence: ATen's
``void at::native::(anonymous namespace)::hardsigmoid_kernel<float>(...)`` matched a candidate's
``hardsigmoid_kernel``, and a candidate whose extension never loaded borrowed PyTorch's time as its own.

The names compared are the full demangled signatures (namespaces, template arguments, parameter types):
``nm -C`` demangles with the same GNU scheme the PyTorch profiler uses for CUPTI's names. A match must
also have nvcc's kernel stub beside it (``__device_stub__…``), so a plain host function named like one
of cuBLAS's kernels is no kernel of the candidate's. binutils' ``nm`` is on every machine that can build
an extension at all (the C++ toolchain needs its linker).

An optimised host build (``-O3``, as most kernels ask) inlines the stub into the launch function and
drops its symbol, but the stub's static locals stay in the table (``__device_stub__…(params)::__handle``,
a data symbol): they are read as the stub's mark too.

One more case is refused credit: a launched kernel that the *reference* launches too. A candidate can
only share a full signature with one of PyTorch's kernels by copying its namespaces and template
arguments on purpose; its time is then PyTorch's as far as anything here can tell.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_FUNCTION_TYPES = set("tTwW")  # text (code) symbols, local or global, and weak ones (template instances)
_DATA_TYPES = set("bBdDvV")  # data symbols: where an inlined stub's static locals are
_SPACES = re.compile(r"\s+")


class AttributionUnavailable(RuntimeError):
    """The extension's symbols could not be read (no ``nm``, or an unreadable library)."""


def canonical(name: str) -> str:
    """A kernel's signature in one form: no return type in front (CUPTI writes ``void`` for templates
    only), single spaces, none around punctuation."""
    text = _SPACES.sub(" ", name.strip())
    if text.startswith("void "):
        text = text[5:]
    return re.sub(r"\s*([(),<>*&])\s*", r"\1", text)


def _split(name: str) -> tuple[str, str | None]:
    """(identifier, parameter list) of a canonical signature: ``ns::k<float>(float*,int)`` gives
    ``("k", "float*,int")``; an ``extern "C"`` kernel's bare name gives ``(name, None)``."""
    text, params = name, None
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text, params = text[:i], text[i + 1 : -1]
                break
    if text.endswith(">"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i]
                break
    return text.rsplit("::", 1)[-1], params


_STUB = "__device_stub__"


@dataclass
class Binary:
    """What the candidate's libraries define: every function's canonical name, and the host stubs nvcc
    emits for kernels only (``__device_stub__<mangled kernel>(params)``). ``name in binary`` is True
    for a kernel of these libraries: a function of that exact signature *and* a kernel stub for it, so
    a plain host function named like a library kernel does not pass for one."""

    functions: set[str] = field(default_factory=set)
    stubs: list[tuple[str, str]] = field(default_factory=list)  # (mangled kernel, canonical params)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in self.functions:
            return False
        identifier, params = _split(name)
        mark = f"{len(identifier)}{identifier}"
        return any(mark in mangled and (params is None or params == theirs) for mangled, theirs in self.stubs)

    def add(self, canonical_name: str) -> None:
        self.functions.add(canonical_name)
        if canonical_name.startswith(_STUB) and canonical_name.endswith(")"):
            self._stub(canonical_name)

    def add_data(self, canonical_name: str) -> None:
        """A data symbol: a stub's static local (``__device_stub__…(params)::__handle``) marks its stub."""
        if canonical_name.startswith(_STUB) and ")::" in canonical_name:
            self._stub(canonical_name[: canonical_name.rindex(")::") + 1])

    def _stub(self, signature: str) -> None:
        mangled, _, params = signature[len(_STUB) :].partition("(")
        if (mangled, params[:-1]) not in self.stubs:
            self.stubs.append((mangled, params[:-1]))


def defined_functions(library: Path) -> Binary:
    """The functions ``library`` defines, read from its static symbol table. A stripped library (no
    static table) cannot show its kernel stubs: :class:`AttributionUnavailable`, never a guess."""
    nm = shutil.which("nm")
    if nm is None:
        raise AttributionUnavailable("binutils' nm was not found, so the extension's kernels cannot be read")
    try:
        done = subprocess.run([nm, "--defined-only", "-C", str(library)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AttributionUnavailable(f"nm could not read {library.name}: {error}") from None
    found = Binary()
    for line in done.stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] in _FUNCTION_TYPES:
            found.add(canonical(parts[2]))
        elif len(parts) == 3 and parts[1] in _DATA_TYPES:
            found.add_data(canonical(parts[2]))
    if done.returncode != 0 or not found.functions:
        why = done.stderr.strip()[:200] or "no symbol table (a stripped library)"
        raise AttributionUnavailable(f"nm could not read {library.name}: {why}")
    return found


@dataclass
class Attribution:
    """Each launched kernel's owner, by the evidence above."""

    own: list[str] = field(default_factory=list)  # compiled into one of the candidate's extensions
    library: list[str] = field(default_factory=list)  # everything else (cuBLAS, cuDNN, ATen, ...)
    # named like one of the source's __global__ functions, yet not in its extensions: PyTorch's, by name only
    lookalikes: list[str] = field(default_factory=list)
    # in an extension of the candidate's *and* launched by the reference: not credited
    shared_with_reference: list[str] = field(default_factory=list)

    def note(self) -> str | None:
        """What the attribution refused to credit, for the result's messages; None when nothing."""
        parts = []
        if self.lookalikes:
            parts.append(
                "named like the source's kernels but not compiled into its extensions (so not its own): "
                + ", ".join(self.lookalikes)
            )
        if self.shared_with_reference:
            parts.append(
                "in the candidate's extension but also launched by the reference (credited to PyTorch): "
                + ", ".join(self.shared_with_reference)
            )
        return "; ".join(parts) or None


def attribute(
    launched: Iterable[str],
    compiled: Binary,
    source_names: Iterable[str] = (),
    reference_launched: Iterable[str] = (),
) -> Attribution:
    """Split ``launched`` kernel names into the candidate's own and the library's.

    ``compiled``: :func:`extension_functions` over every extension the candidate loaded;
    ``source_names``: its ``__global__`` names (only to say which library kernels merely look like
    them); ``reference_launched``: the kernels the reference's forward launches."""
    from engine.guard.runtime import own_kernels_in

    reference = {canonical(n) for n in reference_launched}
    names = list(dict.fromkeys(launched))
    by_name = set(own_kernels_in(names, list(source_names)))
    out = Attribution()
    for name in names:
        key = canonical(name)
        if key in compiled and key in reference:
            out.shared_with_reference.append(name)
            out.library.append(name)
        elif key in compiled:
            out.own.append(name)
        else:
            out.library.append(name)
            if name in by_name:
                out.lookalikes.append(name)
    return out


def extension_functions(libraries: Iterable[str | Path]) -> Binary:
    """:func:`defined_functions` over several libraries together."""
    together = Binary()
    for library in libraries:
        found = defined_functions(Path(library))
        together.functions |= found.functions
        together.stubs += found.stubs
    return together
