"""Builds that fail once: a failed source is not built again, a budget caps one evaluation's builds, and the
compiler's first error is read in the candidate's own lines (ARCHITECTURE.md §3, "Builds").

Why: a candidate that calls ``load_inline`` on a failing source in each of its twenty modules kept
``evalset`` busy for over fifteen minutes, each failure costing the split build, the import's retry of it
and the stock build. And an error in the candidate's own CUDA (``blockIdx.q``) took three builds to reach
its verdict. So, within one evaluation (the prebuild thread's recorder and the import's share one
:class:`BuildLedger`):

- a build that failed is remembered by everything that decides it (name, path, sources, arguments); the
  same build asked for again raises the same error at once;
- a build that failed on a compiler error in the candidate's own code is also remembered by its sources and
  options alone (:func:`sources_identity`): the same sources under another extension name fail the same
  way, so they are not built again either. A CUDA-L1 UNet gave each of its twenty blocks its own name for
  one failing source; each block cost a split and a stock build until the budget ran out;
- a split build whose every compiler error is in the candidate's own code, copied verbatim into the
  split's units, is not built again the stock way (:func:`candidate_own_error`); an error the split's
  own rewriting may have caused (a name it left undeclared, a header it left out, the link) still is,
  except a name that torch's headers do not declare and that the split moved nowhere
  (engine.eval.build.torchnames): the stock build would not have it either;
- the builds share a budget (``EvalOptions.build_budget_s``): once spent, the next build raises
  :class:`BuildBudgetSpent`, a ``BaseException`` so that a candidate's ``except Exception`` does not
  swallow it, and the verdict is ``compile_error`` saying so.

This module imports nothing heavy: it reads compiler text only.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.eval.build.split.lines import CUDA_FILE, absolute_lines

DEFAULT_BUILD_BUDGET_S = 180.0
CPP_FILE_NAME = "cpp_sources"  # the #line name the split build gives the candidate's cpp_sources
# A compiler's error line: nvcc ``file(12): error: ...``, g++ ``file:12:5: error: ...`` (``fatal error`` too)
_ERROR = re.compile(r"^(?P<file>[^\s:()][^:()]*?)(?:\((?P<nvcc>\d+)\)|:(?P<gcc>\d+)(?::\d+)?):\s*(?:fatal\s+)?error\b:?\s*(?P<what>.*)$")
# Errors the split build's own rewriting can cause in code the stock build compiles: a name it did not
# declare (torch's headers stay out of the CUDA unit), a header or namespace missing, a link problem
_SPLIT_SUSPECT = re.compile(
    r"is undefined|must be a class or namespace name|namespace \"?[\w:]+\"? has no member|was not declared|"
    r"cannot open source file|No such file|incomplete type|undefined (?:reference|symbol)|not a template",
    re.IGNORECASE,
)


# nvcc's whole message for a name nothing declares (the one split-suspect error a name index can settle)
_UNDEFINED = re.compile(r'identifier "(?P<name>[A-Za-z_]\w*)" is undefined')


class BuildBudgetSpent(BaseException):  # noqa: N818 - a verdict's reason, not an error the candidate may catch
    """The evaluation's build budget is spent: no more builds."""


@dataclass
class CompilerError:
    """One error line of a compiler, with where it is in the candidate's own source when known."""

    file: str
    line: int
    what: str
    own: str | None = None  # "cuda_sources" or "cpp_sources": the candidate's string the line is in
    own_line: int | None = None
    moved: bool = False  # in host code the split build moved to its C++ unit and rewrote (its launches)

    def text(self) -> str:
        where = f"{self.own} line {self.own_line}" if self.own else f"{Path(self.file).name} line {self.line}"
        return f"compiler error at {where}: {self.what.strip()}"


def compiler_errors(log: str, host_lines: dict[str, int] | None = None) -> list[CompilerError]:
    """Every error line of ``log``, in order, placed in the candidate's own numbering where the split
    build's ``#line`` names say where: ``cuda_sources``/``cpp_sources`` as written, and the host pieces its
    C++ unit names ``cuda_sources@TAG.K`` (from ``host_lines``), which are marked ``moved``."""
    found = []
    for raw in log.splitlines():
        match = _ERROR.match(raw.strip())
        if match is None:
            continue
        line = int(match["nvcc"] or match["gcc"])
        error = CompilerError(match["file"], line, match["what"])
        name = Path(error.file).name
        if name in (CUDA_FILE, CPP_FILE_NAME):
            error.own, error.own_line = name, line
        elif name.startswith(f"{CUDA_FILE}@"):
            placed = absolute_lines(f"{name}:{line}", host_lines or {})
            if placed != f"{name}:{line}":
                error.own, error.own_line, error.moved = CUDA_FILE, int(placed.rsplit(":", 1)[1]), True
        found.append(error)
    return found


def place_in_stock_sources(error: CompilerError, build_dir: Path | None, cpp_text: str, cuda_text: str) -> None:
    """A stock build's ``cuda.cu``/``main.cpp`` hold the candidate's strings after torch's own lines: find
    where each starts in the written file and number the error's line from there."""
    name = Path(error.file).name
    written = {"cuda.cu": ("cuda_sources", cuda_text), "main.cpp": ("cpp_sources", cpp_text)}.get(name)
    if error.own or written is None or build_dir is None or not written[1].strip():
        return
    try:
        text = (build_dir / name).read_text()
    except OSError:
        return
    at = text.find(written[1].strip())
    if at < 0:
        return
    first = text.count("\n", 0, at) + 1  # the file's line where the candidate's first non-blank text is
    lead = written[1][: len(written[1]) - len(written[1].lstrip())].count("\n")  # its blank lines before
    own_line = error.line - first + 1 + lead
    if 1 <= own_line <= written[1].count("\n") + 1:
        error.own, error.own_line = written[0], own_line


def candidate_own_error(
    log: str, host_lines: dict[str, int] | None = None, undefined_is_own: Callable[[str], bool] | None = None
) -> bool:
    """True when a failed split build's every compiler error sits in the candidate's code as written and is
    not one the split's rewriting can cause: the stock build would fail on it the same way. An undefined
    identifier is the split's possible doing unless ``undefined_is_own(name)`` says the stock build would
    not declare it either (engine.eval.build.torchnames)."""
    errors = compiler_errors(log, host_lines)
    return all_in_own_code(errors) and not any(_suspect(e.what, undefined_is_own) for e in errors)


def _suspect(what: str, undefined_is_own: Callable[[str], bool] | None) -> bool:
    if not _SPLIT_SUSPECT.search(what):
        return False
    undefined = _UNDEFINED.fullmatch(what.strip())
    return not (undefined and undefined_is_own is not None and undefined_is_own(undefined["name"]))


def build_identity(name: str, path: str, cpp_text: str, cuda_text: str, args: tuple, kwargs: dict[str, Any]) -> str:
    """Everything that decides a build's outcome, hashed."""
    payload = {"name": name, "path": path, "cpp": cpp_text, "cuda": cuda_text, "args": args, "kwargs": kwargs}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


# load_inline's own arguments that never change what the compiler says about the candidate's code
_NOT_THE_SOURCES = frozenset({"build_directory", "verbose"})
EXTENSION_NAME_MACRO = "TORCH_EXTENSION_NAME"  # the one place an extension's name reaches its compiler


def sources_identity(cpp_text: str, cuda_text: str, args: tuple, kwargs: dict[str, Any]) -> str | None:
    """What decides a compile error in the candidate's own code, whatever the extension is named: its
    sources and options. None when the sources read the name (``TORCH_EXTENSION_NAME``), so that a name
    may change what they compile to."""
    if EXTENSION_NAME_MACRO in cpp_text or EXTENSION_NAME_MACRO in cuda_text:
        return None
    options = {key: value for key, value in kwargs.items() if key not in _NOT_THE_SOURCES}
    payload = {"cpp": cpp_text, "cuda": cuda_text, "args": args, "kwargs": options}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def all_in_own_code(errors: list[CompilerError]) -> bool:
    """Every compiler error sits in the candidate's strings as written (none in torch's generated binding,
    where a bad extension name would fail, and none in host code the split build rewrote)."""
    return bool(errors) and all(e.own and not e.moved for e in errors)


@dataclass
class BuildLedger:
    """One evaluation's builds: what failed, what they cost against the budget, the first compiler error."""

    budget_s: float | None = DEFAULT_BUILD_BUDGET_S
    failed: dict[str, BaseException] = field(default_factory=dict)
    builds: int = 0
    spent_s: float = 0.0
    first_error: str | None = None  # the compiler's first error of the last build that failed
    # the prebuild thread's build of a call the import surely makes met a compiler error in the candidate's
    # own code: the import will fail on it (engine.eval.build.prebuild, StaticCall.certain)
    own_error_seen: bool = False
    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)  # finish() notifies
    _started: set[str] = field(default_factory=set, repr=False)
    _running: dict[str, float] = field(default_factory=dict, repr=False)  # identity -> when its build began
    _records: dict[str, Any] = field(default_factory=dict, repr=False)  # identity -> its failed build's record
    _by_sources: dict[str, tuple[str, BaseException, Any]] = field(default_factory=dict, repr=False)  # -> (name, error, record)

    def start(self, identity: str) -> float | None:
        """A build about to run: refused once the budget is spent; the clock it is measured with. A build
        asked for again (the import finding the prebuild thread's) is neither counted nor charged: None."""
        with self._lock:
            if identity in self._started:
                return None
            now = time.monotonic()
            # builds still running count as far as they got: the prebuild thread's may not have been
            # charged yet when the import, finding its library done, asks for the next one
            spent = self.spent_s + sum(now - began for began in self._running.values())
            if self.budget_s is not None and self.builds and spent >= self.budget_s:
                raise BuildBudgetSpent(
                    f"build budget spent after {self.builds} build{'s' * (self.builds != 1)} "
                    f"({spent:.0f} s of {self.budget_s:.0f} s; raise it with --build-budget)"
                )
            self.builds += 1
            self._started.add(identity)
            self._running[identity] = now
        return now

    def finish(self, identity: str, started: float | None) -> None:
        """The build ``start`` let run is over: its time charged to the budget (None: nothing to charge)."""
        if started is None:
            return
        with self._lock:
            self.spent_s += time.monotonic() - started
            self._running.pop(identity, None)
            self._lock.notify_all()

    def failed_record(self, identity: str) -> Any:
        with self._lock:
            return self._records.get(identity)

    def settled(self, identity: str) -> BaseException | None:
        """Wait for another thread's build of this very identity (the prebuild thread's) to end, then the
        error it failed with, if it did. Why: torch's own lock makes the import wait for that build and
        then load its library, which a failed build never wrote; the error would read "cannot open shared
        object file" instead of the compiler's, and could be the one remembered."""
        with self._lock:
            while identity in self._running:
                self._lock.wait()
        return self.remembered(identity)

    def remembered(self, identity: str) -> BaseException | None:
        """The error this very build failed with earlier in this evaluation, as a new exception to raise."""
        with self._lock:
            error = self.failed.get(identity)
        if error is None:
            return None
        again = RuntimeError(f"{error} (this same build failed earlier in this evaluation; not built again)")
        again.__cause__ = error
        return again

    def remember(
        self, identity: str, error: BaseException, errors: list[CompilerError], record: Any = None
    ) -> None:
        """A build that failed, with the compiler's errors and its ExtensionBuild record (what a recorder
        that did not run it lists when asked for it again)."""
        with self._lock:
            self.failed.setdefault(identity, error)
            if record is not None:
                self._records.setdefault(identity, record)
            if errors:  # the failure that ends the evaluation is the last one (a split's, then the stock build's)
                self.first_error = errors[0].text()

    def remember_sources(self, sources: str, name: str, error: BaseException, record: Any = None) -> None:
        """Sources whose build (named ``name``, its ExtensionBuild ``record``) failed on a compiler error in
        the candidate's own code."""
        with self._lock:
            self._by_sources.setdefault(sources, (name, error, record))

    def note_own_error(self) -> None:
        """The prebuild thread's build of a call the import surely makes failed on a compiler error in the
        candidate's own code: the worker need not finish the reference check before the import that will
        fail (engine.eval.worker, ``reference_sound``). Only that thread calls it."""
        with self._lock:
            self.own_error_seen = True

    def sources_record(self, sources: str) -> Any:
        """The failed build's record the sources' error came from (what a recorder asked again lists)."""
        with self._lock:
            earlier = self._by_sources.get(sources)
        return earlier[2] if earlier is not None else None

    def remembered_sources(self, sources: str | None, name: str) -> BaseException | None:
        """The error the same sources failed with earlier in this evaluation (under this name or another),
        as a new exception naming that build; None when they have not failed."""
        with self._lock:
            earlier = self._by_sources.get(sources) if sources is not None else None
        if earlier is None:
            return None
        first, error, _ = earlier
        again = RuntimeError(
            f"{error} (the same sources and options failed to build earlier in this evaluation as {first!r}; "
            f"{name!r} was not built again)"
        )
        again.__cause__ = error
        return again
