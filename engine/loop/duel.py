"""A close call is re-timed: the new kernel and the current best, back to back, interleaved (ARCHITECTURE.md §5).

Why: each evaluation times its kernel in a worker of its own, at its own moment; two kernels a few percent
apart can swap order between such runs (identical kernels measured up to 1.23× apart on CPU). When a new
correct kernel's speedup is within ``ranking.CLOSE_CALL`` of the best's, the two are timed again in one
worker, in alternating blocks, so drift and clocks hit both alike: the evaluator's own timing, with the
best kernel in the reference's seat. The ratio of their medians and its bootstrap interval decide
(``sessions.ranking.Duel``): the new kernel leads only when the interval lies wholly above 1.

The best kernel becomes the reference by running its source in a module of its own inside a task file
that keeps the task's inputs, so its names never meet the task's or the candidate's. Both kernels passed
every check and guard in their own evaluations; the re-timing only times (guards, shapes and baselines
off, one correctness trial as a sanity check that the two agree). The best kernel's library is the one its
own evaluation built, loaded from the build cache when its bytes are still the recorded ones
(engine.eval.build.reference); without that, a re-timing began with a whole stock build.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from engine.eval.build.trust import trusted_libraries
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult

_RUNNER = """

# -- cudaforge's re-timing (engine/loop/duel.py): the best kernel so far, in the reference's seat --
import sys as _cudaforge_sys
import types as _cudaforge_types

_cudaforge_best = _cudaforge_types.ModuleType("cudaforge_best_kernel")
_cudaforge_best.__file__ = "best_kernel.py"
_cudaforge_sys.modules["cudaforge_best_kernel"] = _cudaforge_best
exec(compile({source!r}, "best_kernel.py", "exec"), _cudaforge_best.__dict__)
Model = _cudaforge_best.ModelNew
"""


def best_as_reference(task_source: str, best_kernel: str) -> str:
    """A task file whose ``Model`` is ``best_kernel``'s ``ModelNew``, with the task's inputs."""
    return task_source.rstrip("\n") + "\n" + _RUNNER.format(source=best_kernel)


def retiming_options(options: EvalOptions, best_record: Mapping[str, Any] | None = None) -> EvalOptions:
    """``options`` for timing only: guards, shapes and baselines off, one trial. ``best_record`` (the best
    kernel's ``eval.json``) names the libraries its evaluation ran, which the reference then loads from
    the build cache instead of building them again (engine.eval.build.reference)."""
    return dataclasses.replace(
        options, guards=False, static_guard=False, shapes=False, compile_baselines=(), trials=1,
        trusted_libraries=trusted_libraries(best_record),
    )  # fmt: skip


def retime(
    evaluator: Callable[..., EvalResult],  # the plain evaluator: an exploration's shared one does not re-time
    task_source: str,
    kernel: str,
    best_kernel: str,
    options: EvalOptions,
    task_name: str,
    best_record: Mapping[str, Any] | None = None,
) -> EvalResult:
    """Time ``kernel`` against ``best_kernel`` in one worker; its ``speedup`` is best time / new time.
    ``best_record``: the best kernel's ``eval.json``, whose sealed libraries spare the reference a build."""
    return evaluator(
        best_as_reference(task_source, best_kernel), kernel, retiming_options(options, best_record),
        task_name=task_name,
    )  # fmt: skip


def duel_record(result: EvalResult, against_sha: str, against: int) -> dict[str, Any] | None:
    """``eval.json``'s ``ranking.duel`` from a re-timing, or None when it gave no usable ratio."""
    timing = result.timing
    if not result.ok or result.speedup is None or timing is None or not timing.speedup_interval:
        return None
    low, high = timing.speedup_interval
    return {"against_sha": against_sha, "against": against, "ratio": round(result.speedup, 6),
            "low": round(low, 6), "high": round(high, 6)}  # fmt: skip
