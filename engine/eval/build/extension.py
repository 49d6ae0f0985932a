"""Extension builds for candidates: one build directory per content hash, full compiler output kept.

The candidate builds its own extension by calling ``torch.utils.cpp_extension.load_inline`` when
it is imported. In the worker we wrap that function (``install_build_hook``) so that:

- each distinct build (sources + flags + target + toolchain) gets its own directory under the
  cache, named by a hash: concurrent evaluations never share a directory unless they build the
  same thing, and re-evaluating the same kernel reuses the finished build (ninja finds nothing
  to do);
- ninja runs verbosely, so the full compiler output lands in the worker's log for the user;
- torch's own ``lock`` file, which a killed build leaves behind and which makes the next build
  of that directory wait forever, is detected as stale and removed. We can tell it is stale
  because every cudaforge build of a directory first takes an ``fcntl`` lock on a file beside
  it, which the kernel releases when its holder dies: holding that lock and still seeing torch's
  ``lock`` means its owner is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from engine.eval import faults
from engine.eval.build.failures import (
    BuildLedger,
    all_in_own_code,
    build_identity,
    candidate_own_error,
    compiler_errors,
    place_in_stock_sources,
    sources_identity,
)
from engine.eval.build.ninja import run_ninja_teed
from engine.eval.build.objects import ObjectCache, build_with_objects, includes_local_header
from engine.eval.build.pch import HeaderStore, first_include, header_key
from engine.eval.build.prebuild import Prebuilt, forget_version, prebuilding
from engine.eval.build.split.rewrite import (
    CPP_FILE,
    CUDA_FILE,
    SplitSkipped,
    host_flags,
    piece_tag,
    split_sources,
)
from engine.eval.build.torchnames import torch_visible_names, undefined_is_own
from engine.eval.build.trust import load_trusted
from engine.eval.result import ExtensionBuild

TORCH_LOCK_NAME = "lock"
OUR_LOCK_NAME = ".cudaforge-build.lock"
PCH_FLAG = (
    "-Winvalid-pch"  # added to builds that use cudaforge's precompiled header; g++ says when it is not used
)
_TORCH_HEADER = re.compile(r"#\s*include\s*[<\"](torch/|ATen/|c10/)")
SPLIT_ENV = (
    "CUDAFORGE_BUILD_SPLIT"  # "0" builds stock-layout candidates the stock way (benchmarks compare both)
)
# A stock CUDA build (torch headers in its .cu) neither uses nor asks for cudaforge's precompiled header. On
# the H100 such builds ended compile_error in 4 s in three device calls of sessions 24-25, their main.cpp
# reading torch's pybind11 macros as garbage from a header that had just built split kernels correctly,
# while a stock build with such a header alone passed (tests/test_build_pch_gpu.py); the cause is not
# known. Stock builds are the rare path (sources the split build leaves alone), so a correct verdict in
# about 50 s wins over a wrong one in 4.
STOCK_WITHOUT_HEADER = True
OBJECTS_ENV = "CUDAFORGE_OBJECT_CACHE"  # "0" compiles every unit of every build (benchmarks compare both)

MAX_PLACED_ERRORS = 20  # a failed build's compiler errors read for where they are (one file read each)


def default_cache_root() -> Path:
    """``$CUDAFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudaforge``, else ``~/.cache/cudaforge``."""
    if os.environ.get("CUDAFORGE_CACHE_DIR"):
        return Path(os.environ["CUDAFORGE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cudaforge"


def extensions_root(cache_root: Path) -> Path:
    return cache_root / "extensions"


def _as_text(sources: Any) -> str:
    if sources is None:
        return ""
    if isinstance(sources, str):
        return sources
    return "\n".join(str(s) for s in sources)


def classify_build_path(cuda_sources: Any, no_implicit_headers: bool) -> str:
    """``fast`` when nvcc never sees torch headers, ``stock`` when it does, ``cpp`` without CUDA."""
    cuda_text = _as_text(cuda_sources)
    if not cuda_text.strip():
        return "cpp"
    if no_implicit_headers and not _TORCH_HEADER.search(cuda_text):
        return "fast"
    return "stock"


def build_key(call: dict[str, Any]) -> str:
    """A short hash of everything that changes what a ``load_inline`` call builds."""
    import torch

    payload = {
        "call": call,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version_info[:2],
        "arch": os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
        "cxx": os.environ.get("CXX", ""),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def remove_stale_torch_lock(build_dir: Path) -> bool:
    """Delete torch's ``lock`` in ``build_dir`` if present; returns whether one was removed.

    Only call this while holding our own lock on the directory (or after killing its builder).
    """
    lock = build_dir / TORCH_LOCK_NAME
    try:
        lock.unlink()
        return True
    except FileNotFoundError:
        return False


class BuildRecorder:
    """Wraps ``load_inline`` for one worker and records every extension it builds."""

    def __init__(
        self,
        cache_root: Path,
        on_build_dir: Callable[[str, dict[str, int]], None] | None = None,
        use_pch: bool = True,
        make_pch: bool = True,
    ) -> None:
        self.cache_root = cache_root
        self.root = extensions_root(cache_root)
        self.on_build_dir = on_build_dir
        self.use_pch = use_pch
        self.make_pch = make_pch  # False: a missing header is not asked for (EvalOptions.make_pch)
        self.headers = HeaderStore(cache_root)
        self.builds: list[ExtensionBuild] = []
        self.notices: list[str] = []
        self._headers_used: dict[str, str] = {}  # build directory -> the header set its build used
        self.modules: list[Any] = []  # what each load_inline returned (the CPU own-kernel share wraps them)
        self.module_paths: list[str] = []  # each module's build path ("split", "stock", "fast", "cpp"), in order
        self.failed: list[str] = []  # the load_inline calls that raised to the candidate, described
        self.failed_errors: list[BaseException] = []  # ... and their errors (an environment's fault is not the candidate's)
        # The first failure of cudaforge's own code in the hook: kept even if the candidate catches it
        self.fault: faults.HarnessFault | None = None
        self._original: Callable[..., Any] | None = None
        # Compiled units shared across builds (engine.eval.build.objects); None: every unit is compiled
        self.objects: ObjectCache | None = ObjectCache(cache_root) if os.environ.get(OBJECTS_ENV, "1") != "0" else None
        # Builds finished by the prebuild thread (engine.eval.build.prebuild), by build directory: its
        # recorder fills this, the import's recorder reads it. A recorder that never falls back to the
        # stock build when a split build fails (the prebuild's: the import does that where it is reported).
        self.prebuilt: dict[str, ExtensionBuild] = {}
        self.fallback = True
        # the last build failed on a compiler error in the candidate's own code (the prebuild thread reads it)
        self.own_error_last = False
        # Failed builds, the build budget and the first compiler error, shared with the prebuild thread's
        # recorder (engine.eval.build.failures)
        self.ledger = BuildLedger()
        # {library path: digest}: only these cached libraries are loaded, from copies in ``trusted_copies``,
        # and nothing is built (engine.eval.build.trust); None: a candidate's builds, as they always were
        self.trusted: dict[str, str] | None = None
        self.trusted_copies: Path | None = None
        self._own_failure = False  # the last build failed on compiler errors in the candidate's code alone
        self._failed_record: ExtensionBuild | None = None  # ... and its record, as the ledger keeps it

    def install(self) -> None:
        """Replace ``torch.utils.cpp_extension.load_inline`` before the candidate is imported."""
        import torch.utils.cpp_extension as cpp_extension

        self.attach()
        recorder = self

        def load_inline(
            name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            return recorder._build(name, cpp_sources, cuda_sources, args, kwargs)

        load_inline.__doc__ = cpp_extension.load_inline.__doc__
        cpp_extension.load_inline = load_inline

    def attach(self) -> None:
        """Build through torch's own ``load_inline`` (never replacing it: the prebuild thread's recorder),
        with torch's ninja runs routed through the object cache of the recorder building in each thread."""
        import torch.utils.cpp_extension as cpp_extension

        self._original = cpp_extension.load_inline
        _patch_torch_once()

    def _run_ninja(self, run: Callable[[], None], build_dir: Path, record: ExtensionBuild | None) -> None:
        """torch's ninja run, with the units an earlier build compiled put in place first."""
        if self.objects is None:
            run()
            return
        plan = None
        try:
            plan = build_with_objects(
                self.objects, build_dir, run, lambda text: print(f"[cudaforge] {text}", flush=True)
            )
        finally:
            if record is not None and plan is not None:
                record.units = plan.units()

    def _build(
        self, name: str, cpp_sources: Any, cuda_sources: Any, args: tuple, kwargs: dict[str, Any]
    ) -> Any:
        """One ``load_inline`` call; a failure that reaches the candidate is remembered in ``failed``
        (the candidate may catch it and fall back, which the worker refuses: extension-load-failed)."""
        try:
            module = self._build_any_path(name, cpp_sources, cuda_sources, args, kwargs)
        except Prebuilt:
            raise
        except BaseException as error:
            if self.fault is None:  # cudaforge's own failure is a harness fault, not the candidate's
                first = _first_words(str(error))
                self.failed.append(f"{name!r} ({type(error).__name__}{': ' + first[:200] if first else ''})")
                self.failed_errors.append(error)
            raise
        # A later load that works answers the earlier failures: a retry with simpler flags is honest, and
        # whether its kernels do the work is the launch check's to judge.
        self.failed.clear()
        self.failed_errors.clear()
        return module

    def _say_again(self, notice: str, again: BaseException, adopted: bool) -> None:
        """That a failed build is not built again and, where another recorder ran it (``adopted``: the prebuild
        thread, mostly during the reference stage, whose output the result's build log does not hold, since it
        starts at the build stage), what its compiler said then: once, since a build is adopted once."""
        print(notice, flush=True)
        if adopted:  # indented: a log that holds the build itself (a thread still running at the stage) counts it once
            said = "\n".join(f"    {line}" for line in str(again.__cause__ or again).splitlines())
            print(f"[cudaforge] what it said then:\n{said}", flush=True)

    def _build_any_path(
        self, name: str, cpp_sources: Any, cuda_sources: Any, args: tuple, kwargs: dict[str, Any]
    ) -> Any:
        """A build, unless the same sources already failed on an error in the candidate's own code under
        another name (then that error at once: the name does not change what the compiler says)."""
        sources = sources_key(cpp_sources, cuda_sources, args, kwargs)
        again = self.ledger.remembered_sources(sources, name)
        self.own_error_last = again is not None  # its sources failed in its own code before
        if again is not None:
            assert sources is not None
            adopted = self._adopt(self.ledger.sources_record(sources))  # the failed build, listed once
            self._say_again(f"[cudaforge] {name!r}: the same sources failed to build earlier in this evaluation: not built again", again, adopted)
            raise again
        self._own_failure, self._failed_record = False, None
        try:
            return self._build_split_or_stock(name, cpp_sources, cuda_sources, args, kwargs)
        except Exception as error:
            self.own_error_last = self.own_error_last or self._own_failure  # (a prebuild's split said so)
            if sources is not None and self._own_failure:
                self.ledger.remember_sources(sources, name, error, self._failed_record)
            raise

    def _build_split_or_stock(
        self, name: str, cpp_sources: Any, cuda_sources: Any, args: tuple, kwargs: dict[str, Any]
    ) -> Any:
        cpp_text, cuda_text = _as_text(cpp_sources), _as_text(cuda_sources)
        path = classify_build_path(cuda_sources, bool(kwargs.get("no_implicit_headers")))
        if path != "stock":
            return self._build_once(name, cpp_sources, cuda_sources, args, kwargs, path)
        if os.environ.get(SPLIT_ENV, "1") == "0":
            return self._build_once(name, cpp_sources, cuda_sources, args, kwargs, path, f"{SPLIT_ENV}=0")
        try:
            split = split_sources(cpp_text, cuda_text, piece_tag(name))
        except SplitSkipped as skip:
            print(f"[cudaforge] building {name!r} the stock way: {skip}", flush=True)
            return self._build_once(name, cpp_sources, cuda_sources, args, kwargs, path, str(skip))
        except Exception as error:  # noqa: BLE001 - the transform's own failure must not fail the kernel
            reason = (
                f"cudaforge's split transform failed ({type(error).__name__}: {str(error)[:200]}); "
                "built the stock way"
            )
            self._notice(reason)
            print(f"[cudaforge] {reason}", flush=True)
            return self._build_once(name, cpp_sources, cuda_sources, args, kwargs, path, reason)
        print(
            f'[cudaforge] split build of {name!r}: compiler messages naming "{CUDA_FILE}" line N mean line N'
            f' of the candidate\'s cuda_sources string, "{CPP_FILE}" its cpp_sources',
            flush=True,
        )
        recorded = len(self.builds)
        try:
            return self._build_once(
                name, split.cpp, split.cuda, args, _split_kwargs(kwargs), "split", host_lines=split.host_lines
            )
        except Exception as error:  # noqa: BLE001 - any failure of the rewrite falls back to the stock build
            undefined_is_own = functools.partial(self._undefined_is_own, cpp_text, cuda_text, split.cuda)
            if not self.fallback:  # the prebuild thread: the import builds again and judges; the worker learns early
                self.own_error_last = candidate_own_error(str(error), split.host_lines, undefined_is_own)
                raise
            if candidate_own_error(str(error), split.host_lines, undefined_is_own):  # stock would fail the same way
                self._notice("the compile error is in the candidate's own code: not built again the stock way")
                self._own_failure = True
                raise
            del self.builds[recorded:]  # the split attempt's record: the stock build's takes its place
            reason = f"the split build failed ({type(error).__name__}); built the stock way"
            print(f"[cudaforge] {reason}", flush=True)
            return self._build_once(name, cpp_sources, cuda_sources, args, kwargs, path, reason)

    def _notice(self, text: str) -> None:
        """A note for the verdict's messages, once however many builds give it (a UNet's twenty blocks)."""
        if text not in self.notices:
            self.notices.append(text)

    def _undefined_is_own(self, cpp_text: str, cuda_text: str, split_cuda: str, name: str) -> bool:
        """Whether a name the split's CUDA unit found undefined is undefined in the stock build too."""
        names = torch_visible_names(self.cache_root, cuda_text)
        return undefined_is_own(name, names, f"{cpp_text}\n{cuda_text}", split_cuda)

    def _build_once(
        self,
        name: str,
        cpp_sources: Any,
        cuda_sources: Any,
        args: tuple,
        kwargs: dict[str, Any],
        path: str,
        split_skipped: str | None = None,
        host_lines: dict[str, int] | None = None,
    ) -> Any:
        assert self._original is not None
        identity = build_identity(name, path, _as_text(cpp_sources), _as_text(cuda_sources), args, kwargs)
        again, clock = self.ledger.remembered(identity), None
        if again is None:
            clock = self.ledger.start(identity)
            if clock is None:  # asked for again, perhaps while the prebuild thread still builds it: its outcome first
                again = self.ledger.settled(identity)
        if again is not None:
            adopted = self._adopt_failed(identity)
            self._failed_record = self.ledger.failed_record(identity)
            self._say_again(f"[cudaforge] {name!r} ({path} path) failed to build earlier in this evaluation: not built again", again, adopted)
            raise again
        build = functools.partial(self._build_counted, name, cpp_sources, cuda_sources, args, kwargs, path, split_skipped, host_lines)
        try:
            try:
                return build()
            except (Prebuilt, faults.HarnessFault):
                raise
            except Exception as error:
                header = self._header_suspect(error, path, cpp_sources, cuda_sources, host_lines)
                if header is None:
                    raise
                return self._build_without_header(build, name, identity, header, error)
        except (Prebuilt, faults.HarnessFault):
            raise
        except Exception as error:
            errors, own = self._placed_errors(error, path, cpp_sources, cuda_sources, host_lines)
            if own:
                self._own_failure = True
            record = self.builds[-1] if self.builds else None
            if record is not None and prebuilding():
                record = replace(record, prebuilt=True)  # the import lists it: its time is the thread's
            self.ledger.remember(identity, error, errors, record)
            self._failed_record = record
            raise
        finally:
            self.ledger.finish(identity, clock)

    def _placed_errors(
        self, error: BaseException, path: str, cpp_sources: Any, cuda_sources: Any, host_lines: dict[str, int] | None
    ) -> tuple[list[Any], bool]:
        """The failed build's compiler errors placed in the candidate's sources, and whether all of them are
        in its own code (a split's own errors are judged by its caller; more errors than were placed: not
        known to be its own)."""
        build_dir = Path(self.builds[-1].build_dir) if self.builds else None
        found = compiler_errors(str(error), host_lines)
        errors = found[:MAX_PLACED_ERRORS]
        for placed in errors:  # messages[0] shows the first; all of them say whose code failed
            place_in_stock_sources(placed, build_dir, _as_text(cpp_sources), _as_text(cuda_sources))
        return errors, path != "split" and len(found) == len(errors) and all_in_own_code(errors)

    def _header_suspect(
        self, error: BaseException, path: str, cpp_sources: Any, cuda_sources: Any, host_lines: dict[str, int] | None
    ) -> str | None:
        """The header set to suspect when a build that used cudaforge's precompiled header failed with
        compiler errors of which none is in the candidate's own code (an error in its code, and the cascade
        into torch's headers it often brings, is its own), else None. A split build's failure is left to its
        caller, which falls back to a stock build, and stock builds use no header (STOCK_WITHOUT_HEADER)."""
        record = self.builds[-1] if self.builds else None
        if record is None or record.pch != "used" or path == "split":
            return None
        errors, _ = self._placed_errors(error, path, cpp_sources, cuda_sources, host_lines)
        if not errors or any(placed.own for placed in errors):  # the compiler's, about the candidate's code
            return None
        return self._headers_used.get(record.build_dir)

    def _build_without_header(
        self, build: Callable[..., Any], name: str, identity: str, header: str, error: BaseException
    ) -> Any:
        """Build once more without the suspected header, counted and within the build budget. Only when that
        build succeeds (the prebuild thread's success is :class:`Prebuilt`) was the header at fault: it is put
        aside (``HeaderStore.set_aside``) to be made anew, and the verdict says so. Failing again, the error
        is the build's own, and the header stays: a candidate's mistake never costs other builds theirs.
        Built under ``name`` itself: torch names a build whose flags changed ``name_v1``, which the import
        after a prebuild (asking for ``name``) would then compile all over again."""
        retry = f"{identity} without the header"
        clock = self.ledger.start(retry)  # past the budget: the failed build's record stays, with its error
        del self.builds[-1]  # the failed build's record: the build without the header takes its place
        forget_version(name)
        try:
            module = build(use_header=False)
        except Prebuilt:
            self._header_was_at_fault(header, error)
            raise
        finally:
            self.ledger.finish(retry, clock)
        self._header_was_at_fault(header, error)
        return module

    def _header_was_at_fault(self, header: str, error: BaseException) -> None:
        """The header is the harness's, so its fault is never the kernel's (ARCHITECTURE.md §3, "Builds")."""
        first = (compiler_errors(str(error)) or [None])[0]
        self.headers.set_aside(header, str(error))
        self._notice(
            "a build with cudaforge's precompiled header failed outside the candidate's code"
            + (f" ({first.text()[:200]})" if first is not None else "")
            + "; built again without it, and that header set aside to be made anew"
        )
        print(f"[cudaforge] {self.notices[-1]}", flush=True)

    def _adopt_failed(self, identity: str) -> bool:
        """List the failed build the remembered error came from when another recorder ran it (the prebuild
        thread's), so the result names the build the candidate's error is from, once however often asked.
        True when it was listed now."""
        return self._adopt(self.ledger.failed_record(identity))

    def _adopt(self, record: ExtensionBuild | None) -> bool:
        if record is None:
            return False
        where = (record.name, record.build_dir, record.path)
        if any((b.name, b.build_dir, b.path) == where for b in self.builds):
            return False
        self.builds.append(record)
        return True

    def _build_counted(
        self,
        name: str,
        cpp_sources: Any,
        cuda_sources: Any,
        args: tuple,
        kwargs: dict[str, Any],
        path: str,
        split_skipped: str | None,
        host_lines: dict[str, int] | None,
        use_header: bool = True,
    ) -> Any:
        try:
            prepared = self._prepare(
                name, cpp_sources, cuda_sources, args, kwargs, path, split_skipped, host_lines or {}, use_header
            )
        except Exception as error:  # noqa: BLE001 - cudaforge's own code failed before any compiler ran
            kind = faults.IMPORT if isinstance(error, ImportError) else faults.INTERNAL
            if isinstance(error, OSError):
                kind = faults.ENVIRONMENT  # a build cache that cannot be written (full disk, permissions)
            self.fault = faults.HarnessFault(
                kind, f"the build hook failed for {name!r}: {type(error).__name__}: {error}"
            )
            raise self.fault from error
        record, build_dir = prepared.record, prepared.build_dir
        if self.trusted is not None:  # a reference's recorded library: its checked bytes, never a build
            assert self.trusted_copies is not None, "a recorder with trusted libraries names where their copies go"
            with prepared.lock:
                module = load_trusted(self.trusted, build_dir, name, self.trusted_copies)
                self._finish(record, prepared)
            self.modules.append(module)
            self.module_paths.append(path)
            return module
        with prepared.lock:
            note = ", precompiled header" if record.pch else ""
            print(f"[cudaforge] building extension {name!r} ({path} path{note}) in {build_dir}", flush=True)
            _ACTIVE.build = (self, record)
            try:
                with _nvcc_dependencies(_watch_headers(cuda_sources, kwargs)):  # the candidate's own, not our -I
                    module = self._original(
                        name, cpp_sources, cuda_sources, *args, build_directory=str(build_dir), **prepared.kwargs
                    )
            except Prebuilt:  # the prebuild thread stops where torch would load the library
                self._finish(record, prepared)
                self.prebuilt[str(build_dir)] = record
                raise
            finally:
                _ACTIVE.build = None
            self._finish(record, prepared)
            done = self.prebuilt.get(str(build_dir))
            if done is not None and record.cached and not done.cached:  # built by this evaluation's prebuild
                self.builds[self.builds.index(record)] = record = replace(done, cached=False, prebuilt=True)
        self.modules.append(module)
        self.module_paths.append(path)
        return module

    def _finish(self, record: ExtensionBuild, prepared: _Prepared) -> None:
        """A build that ninja finished: its time, whether it was a cache hit, the header it may queue."""
        record.seconds = time.monotonic() - prepared.started
        record.ok = True
        record.cached = bool(prepared.before) and _library_mtimes(prepared.build_dir) == prepared.before
        header = prepared.header
        if header and not record.pch:
            asked = self.make_pch and self.headers.queue(header, prepared.build_dir)
            if asked or self.headers.pending(header):
                record.pch = "queued"  # asked for now, or already being made for these flags

    def _prepare(
        self,
        name: str,
        cpp_sources: Any,
        cuda_sources: Any,
        args: tuple,
        kwargs: dict[str, Any],
        path: str,
        split_skipped: str | None,
        host_lines: dict[str, int],
        use_header: bool = True,
    ) -> _Prepared:
        """Everything cudaforge does before the compiler runs: the build directory, its lock, the header
        (none where ``use_header`` is False: a build again after the header failed it)."""
        kwargs = dict(kwargs)
        kwargs.pop("build_directory", None)  # ours, so that builds are isolated by content
        kwargs["verbose"] = True  # the full ninja/nvcc/g++ output goes to the log
        # torch's own precompiled header lives in its install tree and any build without it deletes
        # it; cudaforge keeps its own per flag set instead (engine.eval.build.pch).
        kwargs["use_pch"] = False
        cpp_text, cuda_text = _as_text(cpp_sources), _as_text(cuda_sources)
        call = {"name": name, "cpp": cpp_text, "cuda": cuda_text, "args": args, "kwargs": kwargs}
        build_dir = self.root / f"{name}-{build_key(call)}"
        build_dir.mkdir(parents=True, exist_ok=True)
        if self.on_build_dir:  # before any compiler runs: its messages are read with these lines
            self.on_build_dir(str(build_dir), host_lines)
        header = None
        if (
            self.use_pch
            and use_header
            and not (STOCK_WITHOUT_HEADER and path == "stock")
            and first_include(cpp_text, not kwargs.get("no_implicit_headers")) == "torch/extension.h"
        ):
            header = header_key(kwargs, bool(cuda_text.strip()))
        record = ExtensionBuild(
            name=name,
            build_dir=str(build_dir),
            cached=False,
            seconds=0.0,
            path=path,
            ok=False,
            split_skipped=split_skipped,
            host_lines=dict(host_lines),
        )
        started = time.monotonic()
        guard = open(build_dir / OUR_LOCK_NAME, "w")  # noqa: SIM115 - closed by the caller after the build
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)  # waits for a live builder of the same thing; bounded by the stage timeout
            if remove_stale_torch_lock(build_dir):
                self.notices.append(f"removed a stale build lock left by a killed build in {build_dir}")
            before = _library_mtimes(build_dir)
            # A finished build keeps the flags it was made with, so that re-evaluating it stays a cache hit.
            if header and self.headers.ready(header) and (not before or _built_with_pch(build_dir)):
                kwargs["extra_include_paths"] = [
                    str(self.headers.folder(header)),
                    *(kwargs.get("extra_include_paths") or []),
                ]
                kwargs["extra_cflags"] = [*(kwargs.get("extra_cflags") or []), PCH_FLAG]
                record.pch = "used"
                self._headers_used[str(build_dir)] = header
                self.headers.mark_used(header)
        except BaseException:
            guard.close()
            raise
        self.builds.append(record)
        return _Prepared(build_dir, kwargs, record, header, guard, started, before)


@dataclass
class _Prepared:
    """A build made ready by cudaforge's code: what the compiler call needs, and our lock, held."""

    build_dir: Path
    kwargs: dict[str, Any]
    record: ExtensionBuild
    header: str | None
    lock: IO[str]  # the fcntl lock on the build directory; closing it releases it
    started: float
    before: dict[str, int]  # the libraries' modification times before (unchanged after: a cache hit)


def sources_key(cpp_sources: Any, cuda_sources: Any, args: tuple, kwargs: dict[str, Any]) -> str | None:
    """:func:`sources_identity`, or None where the build also reads header files of the candidate's own
    (a quoted include, an include folder): a rewritten header under a new name is a new build."""
    cpp_text = _as_text(cpp_sources)
    if _watch_headers(cuda_sources, kwargs) or includes_local_header(cpp_text):
        return None
    return sources_identity(cpp_text, _as_text(cuda_sources), args, kwargs)


def _first_words(error_text: str) -> str:
    """What a failed load is described by: the compiler's first error where the text has one (torch's own
    first line is ninja's command line, flags and paths), else its first line."""
    errors = compiler_errors(error_text)
    if errors:
        return errors[0].text()
    return next((line for line in error_text.strip().splitlines() if line.strip()), "")


def _split_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The candidate's ``load_inline`` arguments for its split units (torch headers only in the C++ one)."""
    extra = host_flags(kwargs.get("extra_cuda_cflags"))
    split = {**kwargs, "no_implicit_headers": True}
    if extra:
        split["extra_cflags"] = [*(kwargs.get("extra_cflags") or []), *extra]
    return split


def _built_with_pch(build_dir: Path) -> bool:
    try:
        return PCH_FLAG in (build_dir / "build.ninja").read_text()
    except OSError:
        return False


def _library_mtimes(build_dir: Path) -> dict[str, int]:
    """Modification times of the built libraries: unchanged after a build means ninja had nothing to do."""
    return {p.name: p.stat().st_mtime_ns for p in build_dir.glob("*.so")}


# The recorder and record whose build runs in this thread (the prebuild thread and the import may build
# at once, each through torch's one module).
_ACTIVE = threading.local()
_PATCH_LOCK = threading.Lock()


def _patch_torch_once() -> None:
    """Route torch's ninja runs through the object cache of the recorder building in the calling thread,
    and stop the prebuild thread where torch would import the library it built."""
    import torch.utils.cpp_extension as cpp_extension

    with _PATCH_LOCK:
        if getattr(cpp_extension._run_ninja_build, "_cudaforge", False):
            return
        run_ninja, import_library = cpp_extension._run_ninja_build, cpp_extension._import_module_from_library

        def run_ninja_build(build_directory: str, verbose: bool, error_prefix: str) -> None:
            active = getattr(_ACTIVE, "build", None)
            # shown and kept: the error's text must hold the compiler's lines (engine.eval.build.ninja)
            run = lambda: run_ninja_teed(build_directory, error_prefix) if verbose else run_ninja(build_directory, verbose, error_prefix)  # noqa: E731
            if active is None:
                run()
            else:
                active[0]._run_ninja(run, Path(build_directory), active[1])

        def import_module_from_library(module_name: str, path: str, is_python_module: bool) -> Any:
            if prebuilding():
                raise Prebuilt(path)
            return import_library(module_name, path, is_python_module)

        run_ninja_build._cudaforge = True  # type: ignore[attr-defined]
        cpp_extension._run_ninja_build = run_ninja_build
        cpp_extension._import_module_from_library = import_module_from_library


NVCC_DEPS_ENV = "TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES"  # torch's switch for nvcc's -MD depfile


def _watch_headers(cuda_sources: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ninja must watch the CUDA unit's headers: only when it may include one the candidate can
    change (a quoted include, an include folder of its own). System and CUDA headers are the toolkit's."""
    return bool(kwargs.get("extra_include_paths")) or includes_local_header(_as_text(cuda_sources))


@contextlib.contextmanager
def _nvcc_dependencies(watch: bool) -> Iterator[None]:
    """Build without nvcc's depfile unless the headers need watching. nvcc's -MD lists every system and
    CUDA header; on the H200 machine ninja then compiled the CUDA unit again on every run (1.2-1.5 s and a
    link, in each evaluation and each profile of a kernel built before), while g++'s -MMD binding stayed
    built. The CUDA unit's own source is ninja's input either way."""
    before = os.environ.get(NVCC_DEPS_ENV)
    if not watch:
        os.environ[NVCC_DEPS_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NVCC_DEPS_ENV, None)
        else:
            os.environ[NVCC_DEPS_ENV] = before
