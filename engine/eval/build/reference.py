"""The task's import when its reference builds an extension we have a record of (ARCHITECTURE.md §3, "Builds").

Why: the loop's re-timing (engine.loop.duel) puts the best kernel so far in the reference's seat, and
imported plainly its ``load_inline`` built it the stock way in a folder no later evaluation finds: a whole
stock build (35 s on two cores for a ReLU, about a minute on the H200) before every close call's first
timed call, for a library the best kernel's own evaluation had built already. When the job names the
libraries an earlier evaluation ran (``WorkerJob.trusted_libraries``, sealed by the evaluating process:
engine.eval.build.trust), the task is imported with a build recorder of its own:

- a library is loaded from the shared cache only when its bytes are the recorded ones, and then from a
  private copy of the bytes checked, with no build; anything else (not on record, changed since) is
  built in a folder of this evaluation's own, by torch's plain ``load_inline``, as before;
- what it loaded is recorded apart from the candidate's builds (``BuildInfo.reference_extensions``), so a
  reference's kernel is never counted as the candidate's own, and it is not charged to the candidate's
  build budget;
- torch's ``load_inline`` is put back before the candidate is imported, so the candidate's recorder wraps
  torch's own function.

Without such a record (a user's task with a custom op) the task is imported as it always was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from engine.eval.build.extension import BuildRecorder
from engine.eval.build.failures import BuildLedger
from engine.eval.build.trust import UntrustedLibrary
from engine.eval.result import ExtensionBuild


class ReferenceBuilds:
    """``load_inline`` for the task's import: recorded libraries from the cache, the rest built privately."""

    def __init__(self, cache_root: Path, private_root: Path, trusted: Mapping[str, str], use_pch: bool) -> None:
        self.recorder = BuildRecorder(cache_root, use_pch=use_pch, make_pch=False)
        self.recorder.ledger = BuildLedger(budget_s=None)
        self.recorder.trusted = dict(trusted)
        self.recorder.trusted_copies = private_root / "checked"
        self.private_root = private_root
        self.loaded: list[ExtensionBuild] = []  # the libraries taken from the cache
        self.notices: list[str] = []  # why a library was built privately instead

    def load_inline(self, name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        original = self.recorder._original
        assert original is not None
        if kwargs.get("build_directory"):  # the task chose its folder: torch's own call, as before
            return original(name, cpp_sources, cuda_sources, *args, **kwargs)
        recorded = len(self.recorder.builds)
        try:
            module = self.recorder._build(name, cpp_sources, cuda_sources, args, kwargs)
        except UntrustedLibrary as why:
            del self.recorder.builds[recorded:]
            self.notices.append(f"the reference's {name!r} was built in a folder of its own: {why}")
            print(f"[cudaforge] {self.notices[-1]}", flush=True)
            folder = self.private_root / f"{name}-{len(self.notices)}"
            folder.mkdir(parents=True, exist_ok=True)
            return original(name, cpp_sources, cuda_sources, *args, build_directory=str(folder), **kwargs)
        self.loaded.extend(self.recorder.builds[recorded:])
        return module


@contextlib.contextmanager
def building_references(builds: ReferenceBuilds) -> Iterator[ReferenceBuilds]:
    """``load_inline`` is ``builds.load_inline`` inside the block, torch's own after it."""
    import torch.utils.cpp_extension as cpp_extension

    before: Callable[..., Any] = cpp_extension.load_inline
    builds.recorder.attach()  # its builds run through torch's load_inline, with cudaforge's ninja hooks
    cpp_extension.load_inline = builds.load_inline
    try:
        yield builds
    finally:
        cpp_extension.load_inline = before
